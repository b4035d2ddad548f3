//! The one structured error of the execution contract, shared by every crate.
//!
//! Each variant names what the user needs to act on: the backend, op, tensor, field or file.

use crate::DType;
use std::path::PathBuf;

/// Result with the crate-wide [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure cyb-llm reports. Bad input never panics; it ends up here.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A backend (or the reference) has no implementation for this op on these inputs.
    #[error("op {op} is not supported by backend {backend} for input dtype {input_dtype}")]
    UnsupportedOp {
        op: String,
        backend: String,
        input_dtype: DType,
    },
    /// Input shapes do not fit the op's shape rule.
    #[error("op {op}: shape mismatch, expected {expected:?}, got {got:?}")]
    ShapeMismatch {
        op: String,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    /// A tensor the model needs is absent from the file.
    #[error("tensor {name} is missing (required by {required_by})")]
    MissingTensor { name: String, required_by: String },
    /// A tensor's bytes do not match what its declared dtype and shape need.
    #[error("tensor {name}: declared {declared} needs a different size than the {actual_bytes} bytes present")]
    WeightFormatMismatch {
        name: String,
        declared: DType,
        actual_bytes: usize,
    },
    /// A tensor's element type is a real format (a ggml type such as IQ4_XS) that has no
    /// `DType` in this build, so it can be listed but not read as a `Tensor`.
    #[error("tensor {name} has type {type_name}, which this build cannot compute with")]
    UnsupportedTensorType { name: String, type_name: String },
    /// An allocation failed or would take more memory than there is (`available`, when known).
    #[error(
        "out of memory: {what} needs {} MiB ({bytes} bytes){}",
        .bytes >> 20,
        .available.map(|a| format!(", {} MiB are available", a >> 20)).unwrap_or_default()
    )]
    OutOfMemory {
        what: String,
        bytes: u64,
        available: Option<u64>,
    },
    /// A backend could not start (no adapter, no driver, not built in).
    #[error("backend {backend} could not be initialised: {reason}")]
    BackendInit { backend: String, reason: String },
    /// A configuration field is absent, of the wrong type, or out of range.
    #[error("invalid config field {field}: {reason}")]
    InvalidConfig { field: String, reason: String },
    /// Tokenizer loading or encoding failed.
    #[error("tokenizer: {reason}")]
    Tokenizer { reason: String },
    /// A file is malformed: names the file, the byte offset where reading failed, and why.
    #[error("{}: malformed at byte {offset}: {reason}", file.display())]
    Format {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    /// An op was given arguments it cannot use (bad axis, bad dtype combination, ...).
    #[error("op {op}: {reason}")]
    InvalidArgument { op: String, reason: String },
    /// The operating system refused a file operation.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(op: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::InvalidArgument {
            op: op.into(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`Error::ShapeMismatch`].
    pub fn shape(op: impl Into<String>, expected: &[usize], got: &[usize]) -> Error {
        Error::ShapeMismatch {
            op: op.into(),
            expected: expected.to_vec(),
            got: got.to_vec(),
        }
    }
}

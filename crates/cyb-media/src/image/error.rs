//! What can go wrong between an image file (or an upload) and a model's pixel tensor. Every
//! variant names its input (`file`: a path, the upload's name or `<bytes>`).

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ImageError {
    #[error("{file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// The container is not one of the formats read here.
    #[error("{file}: unsupported image: {reason}")]
    Unsupported { file: String, reason: String },
    /// The bytes claim a known format but do not decode.
    #[error("{file}: malformed image: {reason}")]
    Malformed { file: String, reason: String },
    /// The header promises more pixels than are decoded here.
    #[error("{file}: too large to decode: {detail}")]
    TooLarge { file: String, detail: String },
    /// The decoding library panicked on this input; the panic was caught and the input rejected.
    #[error("{file}: the decoder failed on this input: {reason}")]
    DecoderPanic { file: String, reason: String },
    /// A preprocessing setting that cannot be applied (`preprocessor_config.json` field, size).
    #[error("{what}: {reason}")]
    Config { what: String, reason: String },
}

impl ImageError {
    /// An error in a processor's settings: `what` names the field.
    pub fn config(what: impl Into<String>, reason: impl Into<String>) -> ImageError {
        ImageError::Config {
            what: what.into(),
            reason: reason.into(),
        }
    }
}

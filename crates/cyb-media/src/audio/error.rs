//! What can go wrong between a file (or an upload, or stdin) and 16 kHz mono samples.
//!
//! Every variant names its input (`file`: a path, the upload's name hint or `<bytes>`,
//! `<stdin>`, `<reader>`) and why it failed, so a message alone tells the user what to fix.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum AudioError {
    #[error("{file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// The container or the codec is one this crate does not read.
    #[error("{file}: unsupported audio: {reason}")]
    Unsupported { file: String, reason: String },
    /// The input claims to be a known format but its bytes do not parse or decode.
    #[error("{file}: malformed audio: {reason}")]
    Malformed { file: String, reason: String },
    /// Parameters that parse but that no real recording has (1 Hz, 0 channels, ...).
    #[error("{file}: {reason}")]
    BadParameters { file: String, reason: String },
    /// Decoding whole would hold more samples than the limit; stream it instead.
    #[error(
        "{file}: more than {limit} samples decoded; too long to hold in memory whole \
         (use open_stream for long recordings)"
    )]
    TooLong { file: String, limit: usize },
    /// The decoding library panicked on this input; the panic was caught and the input rejected.
    #[error("{file}: the decoder failed on this input: {reason}")]
    DecoderPanic { file: String, reason: String },
    #[error("resampling {from} Hz to {to} Hz: {reason}")]
    Resample { from: u32, to: u32, reason: String },
}

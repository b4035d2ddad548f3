//! The WhisperStyle speech recognizers (every published size, `.en` and multilingual,
//! distil-whisper, large-v3-turbo): the family's config, weights under transformers' names and
//! the encoder–decoder forward. Decoding (prompts, timestamps, beam search, fallback) is the
//! runtime's; this folder only computes states and logits.

mod config;
mod model;
mod weights;

pub use config::WhisperConfig;
pub use model::{EncodedAudio, WhisperModel};

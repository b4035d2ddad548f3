//! Media input for cyb-llm's speech models: audio files, uploads and streams decoded, mixed to
//! mono and resampled to 16 kHz ([`audio`]), and Whisper's log-mel features ([`mel`]).
//!
//! Everything that reads bytes from outside treats them as hostile: a bad file is an
//! [`AudioError`] naming the file and the reason, never a panic, and memory stays bounded
//! (see [`audio`] for the limits). This crate knows nothing of models, tensors or backends;
//! it hands out plain `Vec<f32>`.

pub mod audio;
pub mod mel;

pub use audio::{
    bytes_16k_mono, decode_bytes, decode_file, load_16k_mono, open_stream, resample, stream_reader,
    to_mono, Audio, AudioError, AudioStream, RawPcm, WHISPER_SAMPLE_RATE,
};
pub use mel::LogMel;

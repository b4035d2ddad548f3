//! Media input for cyb-llm: audio files, uploads and streams decoded, mixed to mono and
//! resampled to 16 kHz ([`audio`]), Whisper's log-mel features ([`mel`]), and images decoded
//! and preprocessed for vision models ([`image`]).
//!
//! Everything that reads bytes from outside treats them as hostile: a bad file is an
//! [`AudioError`] or [`ImageError`] naming the file and the reason, never a panic, and memory
//! stays bounded (see [`audio`] and [`image`] for the limits). This crate knows nothing of
//! models, tensors or backends; it hands out plain `Vec<f32>`.

pub mod audio;
pub mod image;
pub mod mel;

pub use audio::{
    bytes_16k_mono, decode_bytes, decode_file, load_16k_mono, open_stream, resample, stream_reader,
    to_mono, Audio, AudioError, AudioStream, RawPcm, WHISPER_SAMPLE_RATE,
};
pub use image::{decode_image_bytes, decode_image_file, ImageError, ImageProcessor, RgbImage};
pub use mel::LogMel;

//! Audio for the recognizer: files, stdin and uploads turned into 16 kHz mono samples by
//! cyb-media, with its errors as the runtime's.

use cyb_tensor::{Error, Result};
use std::path::Path;

/// 16 kHz mono audio as a stream of chunks (memory bounded whatever the length).
pub struct AudioSource {
    pub chunks: Box<dyn Iterator<Item = Result<Vec<f32>>> + Send>,
    /// Samples in all, when known before decoding.
    pub total_samples: Option<usize>,
    /// Seconds in all, when known.
    pub total_seconds: Option<f64>,
}

/// The runtime's error for an audio input that cannot be read.
pub fn audio_error(e: cyb_media::AudioError) -> Error {
    Error::InvalidArgument {
        op: "audio".into(),
        reason: e.to_string(),
    }
}

/// Streams `path` (`-`: stdin, WAV or raw s16le mono 16 kHz PCM).
pub fn audio_source(path: &Path) -> Result<AudioSource> {
    let stream = cyb_media::open_stream(path).map_err(audio_error)?;
    Ok(AudioSource {
        chunks: Box::new(stream.map(|c| c.map_err(audio_error))),
        total_samples: None,
        total_seconds: None,
    })
}

/// An uploaded file (any container cyb-media reads) as 16 kHz mono samples.
pub fn decode_audio_bytes(bytes: Vec<u8>, name_hint: Option<&str>) -> Result<Vec<f32>> {
    cyb_media::bytes_16k_mono(bytes, name_hint).map_err(audio_error)
}

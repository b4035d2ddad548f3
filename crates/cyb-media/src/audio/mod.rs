//! Audio in: decoding containers, mixing to mono, resampling to Whisper's 16 kHz, and
//! streaming long inputs in bounded memory.
//!
//! Whole-input functions ([`decode_file`], [`load_16k_mono`], ...) hold at most
//! [`MAX_DECODED_SAMPLES`] samples and fail with [`AudioError::TooLong`] past that; the
//! 16 kHz ones go through [`AudioStream`] so that only the 16 kHz result is ever whole.
//! Rates outside [`MIN_SAMPLE_RATE`]..=[`MAX_SAMPLE_RATE`] and channel counts outside
//! 1..=[`MAX_CHANNELS`] are rejected as [`AudioError::BadParameters`].

mod container;
mod error;
mod mix;
mod mp4_scan;
mod pcm;
mod resample;
mod stream;

use std::path::Path;

pub use error::AudioError;
pub use mix::mix_to_mono;
pub use resample::resample;
pub use stream::{open_stream, stream_reader, AudioStream, RawPcm, STREAM_CHUNK_SAMPLES};

use container::ContainerDecoder;
use stream::{open_bytes, open_file, stream_bytes};

/// The rate Whisper's features are computed at.
pub const WHISPER_SAMPLE_RATE: u32 = 16_000;

/// Lowest accepted sample rate: below it a header is lying, not recording speech.
pub const MIN_SAMPLE_RATE: u32 = 1_000;
/// Highest accepted sample rate (the highest rate real hardware records).
pub const MAX_SAMPLE_RATE: u32 = 768_000;
/// Most channels accepted (symphonia's channel map holds no more).
pub const MAX_CHANNELS: usize = 32;
/// Most samples a whole-input decode holds (all channels counted; 2 GiB of f32): 9.3 hours of
/// 16 kHz mono, 1.7 hours of 44.1 kHz stereo. Longer inputs are for [`AudioStream`].
pub const MAX_DECODED_SAMPLES: usize = 1 << 29;

/// One packet's or block's frames, interleaved, as a source hands them out.
pub(crate) struct Frames<'a> {
    pub samples: &'a [f32],
    pub sample_rate: u32,
    pub channels: usize,
}

/// Decoded audio: `samples` interleaved by frame (`channels` values per frame).
#[derive(Clone, Debug, PartialEq)]
pub struct Audio {
    pub samples: Vec<f32>,
    pub sample_rate: u32,
    pub channels: usize,
}

impl Audio {
    /// Frames (samples per channel).
    pub fn frames(&self) -> usize {
        self.samples.len().checked_div(self.channels).unwrap_or(0)
    }

    /// Duration in seconds.
    pub fn duration_secs(&self) -> f64 {
        self.frames() as f64 / f64::from(self.sample_rate.max(1))
    }
}

/// Decodes a whole file of any supported container (WAV, FLAC, MP3, Ogg Vorbis, MP4/M4A AAC),
/// as f32 in [-1, 1] at the file's own rate and channel count. Integer samples are scaled by
/// 2^-(bits-1). MP3 and Vorbis encoder delay and padding are trimmed when the file records
/// them; in MP4, the AAC priming the edit list marks is dropped (its trailing padding is
/// kept, as ffmpeg keeps it).
pub fn decode_file(path: &Path) -> Result<Audio, AudioError> {
    let name = path.display().to_string();
    decode_all(open_file(path, &name)?, &name)
}

/// [`decode_file`] for bytes in memory (an upload). The format is found from the bytes;
/// `name_hint` (the upload's file name) names the input in errors (`<bytes>` without it).
pub fn decode_bytes(bytes: Vec<u8>, name_hint: Option<&str>) -> Result<Audio, AudioError> {
    let name = name_hint.unwrap_or("<bytes>");
    decode_all(open_bytes(bytes, name)?, name)
}

/// The mean of the channels of each frame; see [`mix_to_mono`].
pub fn to_mono(a: &Audio) -> Vec<f32> {
    let mut out = Vec::with_capacity(a.frames());
    mix_to_mono(&a.samples, a.channels, &mut out);
    out
}

/// A file decoded, mixed to mono and resampled to 16 kHz: the concatenation of
/// [`open_stream`]'s chunks. Non-finite samples become 0.
pub fn load_16k_mono(path: &Path) -> Result<Vec<f32>, AudioError> {
    collect(open_stream(path)?, &path.display().to_string())
}

/// [`load_16k_mono`] for bytes in memory (an upload).
pub fn bytes_16k_mono(bytes: Vec<u8>, name_hint: Option<&str>) -> Result<Vec<f32>, AudioError> {
    let name = name_hint.unwrap_or("<bytes>");
    collect(stream_bytes(bytes, name)?, name)
}

fn collect(stream: AudioStream, name: &str) -> Result<Vec<f32>, AudioError> {
    let mut out = Vec::new();
    for chunk in stream {
        let chunk = chunk?;
        if out.len() + chunk.len() > MAX_DECODED_SAMPLES {
            return Err(AudioError::TooLong {
                file: name.to_string(),
                limit: MAX_DECODED_SAMPLES,
            });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

fn decode_all(mut decoder: ContainerDecoder, name: &str) -> Result<Audio, AudioError> {
    let mut samples = Vec::new();
    while let Some(Frames {
        samples: frames, ..
    }) = decoder.next_frames()?
    {
        if samples.len() + frames.len() > MAX_DECODED_SAMPLES {
            return Err(AudioError::TooLong {
                file: name.to_string(),
                limit: MAX_DECODED_SAMPLES,
            });
        }
        samples.extend_from_slice(frames);
    }
    match (decoder.sample_rate(), decoder.channels()) {
        (Some(sample_rate), Some(channels)) => Ok(Audio {
            samples,
            sample_rate,
            channels,
        }),
        _ => Err(AudioError::Malformed {
            file: name.to_string(),
            reason: "no audio decoded and no sample rate or channel count given".to_string(),
        }),
    }
}

pub(crate) fn check_sample_rate(file: &str, rate: u32) -> Result<(), AudioError> {
    if (MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&rate) {
        return Ok(());
    }
    Err(AudioError::BadParameters {
        file: file.to_string(),
        reason: format!(
            "sample rate {rate} Hz is outside the accepted {MIN_SAMPLE_RATE}..={MAX_SAMPLE_RATE} Hz"
        ),
    })
}

pub(crate) fn check_channels(file: &str, channels: usize) -> Result<(), AudioError> {
    if (1..=MAX_CHANNELS).contains(&channels) {
        return Ok(());
    }
    Err(AudioError::BadParameters {
        file: file.to_string(),
        reason: format!("{channels} channels (accepted: 1..={MAX_CHANNELS})"),
    })
}

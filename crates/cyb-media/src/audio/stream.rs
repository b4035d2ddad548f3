//! 16 kHz mono audio as a sequence of bounded chunks, for recordings too long to hold whole.
//!
//! Each step decodes one packet (or one block of PCM), mixes it to mono and resamples it, so
//! memory stays at a packet plus one chunk whatever the input's length. Chunks hold
//! [`STREAM_CHUNK_SAMPLES`] samples except the last; their concatenation equals
//! [`super::load_16k_mono`] of the same input sample for sample.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use super::container::ContainerDecoder;
use super::mix::{mix_to_mono, zero_non_finite};
use super::mp4_scan::scan_mp4;
use super::pcm::PcmReader;
use super::resample::StreamResampler;
use super::{AudioError, Frames, WHISPER_SAMPLE_RATE};

/// Samples per chunk an [`AudioStream`] yields (one second at 16 kHz); the last may be shorter.
pub const STREAM_CHUNK_SAMPLES: usize = 16_000;

/// Headerless PCM: signed 16-bit little-endian, interleaved `channels`, at `sample_rate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawPcm {
    pub sample_rate: u32,
    pub channels: usize,
}

enum Source {
    Container(Box<ContainerDecoder>),
    Pcm(PcmReader),
}

/// 16 kHz mono chunks of one input; see the module doc. After an error it yields nothing more.
pub struct AudioStream {
    source: Source,
    /// Created once the input's rate is known (a container may only say with its first packet).
    resampler: Option<StreamResampler>,
    mono: Vec<f32>,
    ready: Vec<f32>,
    ended: bool,
}

/// Opens `path` for streaming: any container [`super::decode_file`] reads; `-` reads stdin as
/// [`stream_reader`] does.
pub fn open_stream(path: &Path) -> Result<AudioStream, AudioError> {
    if path.as_os_str() == "-" {
        let pcm = PcmReader::open(Box::new(std::io::stdin()), None, "<stdin>")?;
        return Ok(AudioStream::new(Source::Pcm(pcm)));
    }
    let decoder = open_file(path, &path.display().to_string())?;
    Ok(AudioStream::new(Source::Container(Box::new(decoder))))
}

/// Streams a byte stream that cannot seek: WAV if it starts with `RIFF` (any length, including
/// the unknown lengths of piped WAV), otherwise raw s16le PCM laid out as `raw` says, or 16 kHz
/// mono when `raw` is `None`. Errors name the input `<reader>`.
pub fn stream_reader(
    r: Box<dyn Read + Send>,
    raw: Option<RawPcm>,
) -> Result<AudioStream, AudioError> {
    let pcm = PcmReader::open(r, raw, "<reader>")?;
    Ok(AudioStream::new(Source::Pcm(pcm)))
}

/// Streams an in-memory container (an upload); `name` names it in errors.
pub(crate) fn stream_bytes(bytes: Vec<u8>, name: &str) -> Result<AudioStream, AudioError> {
    let decoder = open_bytes(bytes, name)?;
    Ok(AudioStream::new(Source::Container(Box::new(decoder))))
}

/// Opens a file's container decoder after the checks symphonia itself lacks.
pub(crate) fn open_file(path: &Path, name: &str) -> Result<ContainerDecoder, AudioError> {
    let io = |source| AudioError::Io {
        file: name.to_string(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    if file.metadata().map_err(io)?.len() == 0 {
        return Err(AudioError::Malformed {
            file: name.to_string(),
            reason: "empty file".into(),
        });
    }
    let mut buffered = BufReader::new(file);
    let priming = scan_mp4(&mut buffered, name)?;
    ContainerDecoder::open(Box::new(buffered.into_inner()), priming, name)
}

/// Opens an upload's container decoder after the checks symphonia itself lacks.
pub(crate) fn open_bytes(bytes: Vec<u8>, name: &str) -> Result<ContainerDecoder, AudioError> {
    if bytes.is_empty() {
        return Err(AudioError::Malformed {
            file: name.to_string(),
            reason: "empty input".into(),
        });
    }
    let mut cursor = std::io::Cursor::new(bytes);
    let priming = scan_mp4(&mut cursor, name)?;
    ContainerDecoder::open(Box::new(cursor), priming, name)
}

impl AudioStream {
    fn new(source: Source) -> AudioStream {
        AudioStream {
            source,
            resampler: None,
            mono: Vec::new(),
            ready: Vec::with_capacity(2 * STREAM_CHUNK_SAMPLES),
            ended: false,
        }
    }

    /// The input's own sample rate, once known (before the first chunk for WAV and raw PCM).
    pub fn source_sample_rate(&self) -> Option<u32> {
        match &self.source {
            Source::Container(d) => d.sample_rate(),
            Source::Pcm(p) => Some(p.sample_rate()),
        }
    }

    /// The input's channel count, once known.
    pub fn source_channels(&self) -> Option<usize> {
        match &self.source {
            Source::Container(d) => d.channels(),
            Source::Pcm(p) => Some(p.channels()),
        }
    }

    /// Decodes, mixes and resamples until a chunk is ready or the input ends.
    fn fill(&mut self) -> Result<(), AudioError> {
        while self.ready.len() < STREAM_CHUNK_SAMPLES && !self.ended {
            let frames = match &mut self.source {
                Source::Container(d) => d.next_frames()?,
                Source::Pcm(p) => p.next_frames()?,
            };
            match frames {
                Some(Frames {
                    samples,
                    sample_rate,
                    channels,
                }) => {
                    mix_to_mono(samples, channels, &mut self.mono);
                    zero_non_finite(&mut self.mono);
                    let resampler = match &mut self.resampler {
                        Some(r) => r,
                        None => self
                            .resampler
                            .insert(StreamResampler::new(sample_rate, WHISPER_SAMPLE_RATE)?),
                    };
                    resampler.push(&self.mono, &mut self.ready)?;
                }
                None => {
                    self.ended = true;
                    if let Some(r) = self.resampler.as_mut() {
                        r.finish(&mut self.ready)?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Iterator for AudioStream {
    type Item = Result<Vec<f32>, AudioError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Err(e) = self.fill() {
            self.ended = true;
            self.ready.clear();
            return Some(Err(e));
        }
        if self.ready.is_empty() {
            return None;
        }
        let n = self.ready.len().min(STREAM_CHUNK_SAMPLES);
        Some(Ok(self.ready.drain(..n).collect()))
    }
}

#[cfg(test)]
mod tests {
    /// Servers decode on worker threads and hand streams between them.
    #[test]
    fn streams_and_the_mel_front_end_cross_threads() {
        fn send<T: Send>() {}
        fn send_sync<T: Send + Sync>() {}
        send::<super::AudioStream>();
        send_sync::<crate::mel::LogMel>();
        send_sync::<super::super::Audio>();
    }
}

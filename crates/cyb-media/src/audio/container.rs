//! Containers and codecs decoded with symphonia (pure Rust): WAV, FLAC, MP3, Ogg Vorbis and
//! MP4/M4A with AAC, one packet at a time, as interleaved f32 frames.
//!
//! Hostile input: symphonia's own errors become [`AudioError`]s; a panic inside symphonia is
//! caught and becomes [`AudioError::DecoderPanic`] (this relies on the default `panic =
//! "unwind"`). A packet that fails to decode is skipped, as players do, but an input none of
//! whose packets decode is an error. Memory per call is one packet's frames; MP4 inputs are
//! first checked by [`super::mp4_check`] so that their sample tables cannot declare more
//! entries than their bytes hold.

use std::panic::{catch_unwind, AssertUnwindSafe};

use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{Decoder, DecoderOptions, CODEC_TYPE_NULL};
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::{FormatOptions, FormatReader};
use symphonia::core::io::{MediaSource, MediaSourceStream, MediaSourceStreamOptions};
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

use super::{check_channels, check_sample_rate, AudioError};

/// What this build reads, for messages about what it does not.
const SUPPORTED: &str = "WAV (PCM/float), FLAC, MP3, Ogg Vorbis, MP4/M4A (AAC)";

/// Consecutive undecodable packets after which the input is given up on: a damaged spot is a
/// few packets, a file of garbage that happens to sync is thousands.
const MAX_BAD_PACKETS_IN_A_ROW: usize = 200;

/// A demuxer and decoder for the first audio track of one input.
pub(crate) struct ContainerDecoder {
    file: String,
    reader: Box<dyn FormatReader>,
    decoder: Box<dyn Decoder>,
    track_id: u32,
    /// Known after the first decoded packet when the container does not say.
    sample_rate: Option<u32>,
    channels: Option<usize>,
    samples: Option<SampleBuffer<f32>>,
    bad_in_a_row: usize,
    last_bad: Option<String>,
    decoded_any: bool,
    done: bool,
}

impl ContainerDecoder {
    /// Probes `source` (with the extension of `name_hint`, if any, as a hint) and sets up the
    /// decoder of its first audio track. `file` names the input in errors.
    pub(crate) fn open(
        source: Box<dyn MediaSource>,
        name_hint: Option<&str>,
        file: &str,
    ) -> Result<ContainerDecoder, AudioError> {
        let mut hint = Hint::new();
        if let Some(ext) = name_hint.and_then(extension) {
            hint.with_extension(&ext);
        }
        let stream = MediaSourceStream::new(source, MediaSourceStreamOptions::default());
        let format_opts = FormatOptions {
            enable_gapless: true,
            ..Default::default()
        };
        let probed = shielded(file, || {
            symphonia::default::get_probe().format(
                &hint,
                stream,
                &format_opts,
                &MetadataOptions::default(),
            )
        })?
        .map_err(|e| match e {
            SymError::Unsupported(_) => AudioError::Unsupported {
                file: file.to_string(),
                reason: format!("not a container this build reads ({SUPPORTED})"),
            },
            other => from_symphonia(file, "reading the container header", other),
        })?;
        let reader = probed.format;

        let track = reader
            .tracks()
            .iter()
            .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
            .ok_or_else(|| AudioError::Unsupported {
                file: file.to_string(),
                reason: "no audio track".to_string(),
            })?;
        let params = track.codec_params.clone();
        let track_id = track.id;
        if let Some(rate) = params.sample_rate {
            check_sample_rate(file, rate)?;
        }
        let channels = params.channels.map(|c| c.count());
        if let Some(n) = channels {
            check_channels(file, n)?;
        }
        let codecs = symphonia::default::get_codecs();
        let decoder = shielded(file, || codecs.make(&params, &DecoderOptions::default()))?
            .map_err(|e| match e {
                SymError::Unsupported(_) => {
                    let name = codecs
                        .get_codec(params.codec)
                        .map(|d| d.long_name.to_string())
                        .unwrap_or_else(|| format!("codec id {}", params.codec));
                    AudioError::Unsupported {
                        file: file.to_string(),
                        reason: format!("{name} is not a codec this build decodes ({SUPPORTED})"),
                    }
                }
                other => from_symphonia(file, "setting up the decoder", other),
            })?;
        Ok(ContainerDecoder {
            file: file.to_string(),
            reader,
            decoder,
            track_id,
            sample_rate: params.sample_rate,
            channels,
            samples: None,
            bad_in_a_row: 0,
            last_bad: None,
            decoded_any: false,
            done: false,
        })
    }

    /// The sample rate, once known (from the container, else from the first packet).
    pub(crate) fn sample_rate(&self) -> Option<u32> {
        self.sample_rate
    }

    /// The channel count, once known (from the container, else from the first packet).
    pub(crate) fn channels(&self) -> Option<usize> {
        self.channels
    }

    /// The next packet's frames, interleaved, with their sample rate and channel count; `None`
    /// at the end of the input.
    pub(crate) fn next_frames(&mut self) -> Result<Option<(&[f32], u32, usize)>, AudioError> {
        if self.done {
            return Ok(None);
        }
        let result = self.decode_next();
        if !matches!(result, Ok(true)) {
            self.done = true;
        }
        match result {
            Ok(true) => match (&self.samples, self.sample_rate, self.channels) {
                (Some(s), Some(rate), Some(channels)) => Ok(Some((s.samples(), rate, channels))),
                _ => Ok(None),
            },
            Ok(false) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Decodes packets until one gives frames (`true`) or the input ends (`false`).
    fn decode_next(&mut self) -> Result<bool, AudioError> {
        let file = self.file.clone();
        loop {
            let packet = match shielded(&file, || self.reader.next_packet())? {
                Ok(p) => p,
                Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return self.at_end();
                }
                // Chained Ogg streams and the like: a new stream we do not follow.
                Err(SymError::ResetRequired) => return self.at_end(),
                Err(e) => return Err(from_symphonia(&file, "reading a packet", e)),
            };
            if packet.track_id() != self.track_id {
                continue;
            }
            let decoded = shielded(&file, || match self.decoder.decode(&packet) {
                Ok(buf) => {
                    let spec = *buf.spec();
                    let frames = buf.frames();
                    let capacity = buf.capacity() as u64;
                    let samples = match self.samples.take() {
                        Some(s)
                            if s.capacity() as u64 >= capacity * spec.channels.count() as u64 =>
                        {
                            s
                        }
                        _ => SampleBuffer::<f32>::new(capacity, spec),
                    };
                    let mut samples = samples;
                    samples.copy_interleaved_ref(buf);
                    self.samples = Some(samples);
                    Ok((spec.rate, spec.channels.count(), frames))
                }
                Err(e) => Err(e),
            })?;
            match decoded {
                Ok((rate, channels, frames)) => {
                    self.bad_in_a_row = 0;
                    self.settle(rate, channels)?;
                    if frames == 0 {
                        continue;
                    }
                    self.decoded_any = true;
                    return Ok(true);
                }
                Err(SymError::DecodeError(reason)) => {
                    self.bad_in_a_row += 1;
                    self.last_bad = Some(reason.to_string());
                    if self.bad_in_a_row >= MAX_BAD_PACKETS_IN_A_ROW {
                        return Err(AudioError::Malformed {
                            file,
                            reason: format!(
                                "{MAX_BAD_PACKETS_IN_A_ROW} packets in a row failed to decode \
                                 (last: {reason})"
                            ),
                        });
                    }
                }
                Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return self.at_end();
                }
                Err(e) => return Err(from_symphonia(&file, "decoding a packet", e)),
            }
        }
    }

    /// The end of the input: fine if anything decoded or nothing was wrong.
    fn at_end(&mut self) -> Result<bool, AudioError> {
        match (&self.last_bad, self.decoded_any) {
            (Some(reason), false) => Err(AudioError::Malformed {
                file: self.file.clone(),
                reason: format!("no packet decoded (last error: {reason})"),
            }),
            _ => Ok(false),
        }
    }

    /// Records the rate and channel count of a decoded packet; they may not change mid-stream.
    fn settle(&mut self, rate: u32, channels: usize) -> Result<(), AudioError> {
        match self.sample_rate {
            None => {
                check_sample_rate(&self.file, rate)?;
                self.sample_rate = Some(rate);
            }
            Some(r) if r != rate => {
                return Err(AudioError::Unsupported {
                    file: self.file.clone(),
                    reason: format!("the sample rate changes mid-stream ({r} Hz to {rate} Hz)"),
                })
            }
            Some(_) => {}
        }
        match self.channels {
            None => {
                check_channels(&self.file, channels)?;
                self.channels = Some(channels);
            }
            Some(c) if c != channels => {
                return Err(AudioError::Unsupported {
                    file: self.file.clone(),
                    reason: format!("the channel count changes mid-stream ({c} to {channels})"),
                })
            }
            Some(_) => {}
        }
        Ok(())
    }
}

/// The lower-cased extension of a file name, if it has one.
fn extension(name: &str) -> Option<String> {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let (stem, ext) = base.rsplit_once('.')?;
    (!stem.is_empty() && !ext.is_empty()).then(|| ext.to_ascii_lowercase())
}

/// Runs one call into symphonia, turning a panic into an error.
fn shielded<T>(file: &str, f: impl FnOnce() -> T) -> Result<T, AudioError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        let reason = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic without a message".to_string());
        AudioError::DecoderPanic {
            file: file.to_string(),
            reason,
        }
    })
}

fn from_symphonia(file: &str, doing: &str, e: SymError) -> AudioError {
    let file = file.to_string();
    match e {
        SymError::IoError(source) if source.kind() == std::io::ErrorKind::UnexpectedEof => {
            AudioError::Malformed {
                file,
                reason: format!("{doing}: the input ends too early"),
            }
        }
        SymError::IoError(source) => AudioError::Io { file, source },
        SymError::Unsupported(what) => AudioError::Unsupported {
            file,
            reason: format!("{doing}: {what}"),
        },
        other => AudioError::Malformed {
            file,
            reason: format!("{doing}: {other}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::extension;

    #[test]
    fn extension_of_names() {
        assert_eq!(extension("a/b/song.MP3").as_deref(), Some("mp3"));
        assert_eq!(extension("upload.m4a").as_deref(), Some("m4a"));
        assert_eq!(extension("noext"), None);
        assert_eq!(extension(".hidden"), None);
        assert_eq!(extension("dir.d/file"), None);
        assert_eq!(extension("trailing."), None);
    }
}

//! Containers and codecs decoded with symphonia (pure Rust): WAV, FLAC, MP3, Ogg Vorbis and
//! MP4/M4A with AAC, one packet at a time, as interleaved f32 frames.
//!
//! Hostile input: symphonia's own errors become [`AudioError`]s; a panic inside symphonia is
//! caught and becomes [`AudioError::DecoderPanic`] (this relies on the default `panic =
//! "unwind"`). A packet that fails to decode is skipped, as players do, but an input none of
//! whose packets decode is an error. Memory per call is one packet's frames; MP4 inputs are
//! first scanned by [`super::mp4_scan`] so that their sample tables cannot declare more
//! entries than their bytes hold, and their AAC priming (which symphonia leaves in) is
//! dropped here as ffmpeg and players do.

use std::panic::{catch_unwind, AssertUnwindSafe};

use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{
    CodecType, Decoder, DecoderOptions, CODEC_TYPE_ADPCM_IMA_QT, CODEC_TYPE_ADPCM_IMA_WAV,
    CODEC_TYPE_ADPCM_MS, CODEC_TYPE_ALAC, CODEC_TYPE_EAC3, CODEC_TYPE_MP1, CODEC_TYPE_MP2,
    CODEC_TYPE_NULL, CODEC_TYPE_OPUS, CODEC_TYPE_PCM_ALAW, CODEC_TYPE_PCM_MULAW, CODEC_TYPE_SPEEX,
    CODEC_TYPE_WMA,
};
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::{FormatOptions, FormatReader};
use symphonia::core::io::{
    MediaSource, MediaSourceStream, MediaSourceStreamOptions, ReadBytes, SeekBuffered,
};
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Instantiate;

use super::mp4_scan::Priming;
use super::{check_channels, check_sample_rate, AudioError, Frames};

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
    /// Leading frames to drop (MP4 priming): known once the sample rate is.
    priming: Option<Priming>,
    skip_left: Option<u64>,
    /// Samples to drop from the front of the current packet.
    offset: usize,
}

impl ContainerDecoder {
    /// Finds the container in `source` by its bytes and sets up the decoder of its first
    /// audio track. `file` names the input in errors.
    pub(crate) fn open(
        source: Box<dyn MediaSource>,
        priming: Option<Priming>,
        file: &str,
    ) -> Result<ContainerDecoder, AudioError> {
        let stream = MediaSourceStream::new(source, MediaSourceStreamOptions::default());
        let reader = shielded(file, || probe(stream))?.map_err(|e| match e {
            SymError::Unsupported(what) => AudioError::Unsupported {
                file: file.to_string(),
                reason: format!("{what} (this build reads {SUPPORTED})"),
            },
            other => from_symphonia(file, "reading the container header", other),
        })?;

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
                        .map(|d| d.long_name)
                        .or_else(|| codec_name(params.codec))
                        .map_or_else(|| format!("codec id {}", params.codec), str::to_string);
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
            priming,
            skip_left: None,
            offset: 0,
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
    pub(crate) fn next_frames(&mut self) -> Result<Option<Frames<'_>>, AudioError> {
        if self.done {
            return Ok(None);
        }
        let result = self.decode_next();
        if !matches!(result, Ok(true)) {
            self.done = true;
        }
        match result {
            Ok(true) => match (&self.samples, self.sample_rate, self.channels) {
                (Some(s), Some(rate), Some(channels)) => Ok(Some(Frames {
                    samples: s.samples().get(self.offset..).unwrap_or(&[]),
                    sample_rate: rate,
                    channels,
                })),
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
                // A damaged page or frame (an Ogg CRC mismatch, say): the demuxer resyncs.
                Err(SymError::DecodeError(reason)) => {
                    self.bad_packet(reason)?;
                    continue;
                }
                Err(e) => return Err(from_symphonia(&file, "reading a packet", e)),
            };
            if packet.track_id() != self.track_id {
                continue;
            }
            let decoded = shielded(&file, || match self.decoder.decode(&packet) {
                Ok(buf) => {
                    let spec = *buf.spec();
                    let frames = buf.frames();
                    // Sized for the decoder's largest packet, so it is made once per input.
                    let capacity = buf.capacity() as u64;
                    let needed = capacity.saturating_mul(spec.channels.count() as u64);
                    let mut samples = match self.samples.take() {
                        Some(s) if s.capacity() as u64 >= needed => s,
                        _ => SampleBuffer::<f32>::new(capacity, spec),
                    };
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
                    let priming = self.priming;
                    let skip = self
                        .skip_left
                        .get_or_insert_with(|| priming.map_or(0, |p| p.frames(rate)));
                    let dropped = (*skip).min(frames as u64);
                    *skip -= dropped;
                    self.offset = dropped as usize * channels;
                    if frames as u64 == dropped {
                        continue;
                    }
                    self.decoded_any = true;
                    return Ok(true);
                }
                Err(SymError::DecodeError(reason)) => self.bad_packet(reason)?,
                Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return self.at_end();
                }
                Err(e) => return Err(from_symphonia(&file, "decoding a packet", e)),
            }
        }
    }

    /// Notes a packet that failed to demux or decode; too many in a row end the input.
    fn bad_packet(&mut self, reason: &str) -> Result<(), AudioError> {
        self.bad_in_a_row += 1;
        self.last_bad = Some(reason.to_string());
        if self.bad_in_a_row >= MAX_BAD_PACKETS_IN_A_ROW {
            return Err(AudioError::Malformed {
                file: self.file.clone(),
                reason: format!(
                    "{MAX_BAD_PACKETS_IN_A_ROW} packets in a row failed to decode (last: {reason})"
                ),
            });
        }
        Ok(())
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

/// Finds the container and opens its reader, as symphonia's `Probe::format` does, except that
/// metadata before the container (ID3v2) is read and dropped, and that input which is not a
/// container this build reads is `Unsupported` rather than an I/O or parse error: when the
/// scan runs out of input without a marker, and when the marker it found was not at the start
/// (a chance match inside other data, such as an MP3 frame sync in an AU file) and that
/// reader fails.
fn probe(mut stream: MediaSourceStream) -> Result<Box<dyn FormatReader>, SymError> {
    let probe = symphonia::default::get_probe();
    let format_opts = FormatOptions {
        enable_gapless: true,
        ..Default::default()
    };
    loop {
        let scan_start = stream.pos();
        if let Some(what) = unsupported_magic(&mut stream) {
            return Err(SymError::Unsupported(what));
        }
        match probe.next(&mut stream) {
            Ok(Instantiate::Format(open)) => {
                let marker_at = stream.pos();
                return open(stream, &format_opts).map_err(|e| match e {
                    SymError::DecodeError(_) | SymError::IoError(_) if marker_at > scan_start => {
                        SymError::Unsupported("no container this build reads was found")
                    }
                    e => e,
                });
            }
            Ok(Instantiate::Metadata(reader)) => {
                reader(&MetadataOptions::default()).read_all(&mut stream)?;
            }
            // The scan ran out of input, or of its 1 MiB window, without a marker.
            Err(SymError::IoError(_) | SymError::Unsupported(_)) => {
                return Err(SymError::Unsupported(
                    "no container this build reads was found",
                ));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Names common containers this build does not read from their first bytes, which are left
/// unconsumed.
fn unsupported_magic(stream: &mut MediaSourceStream) -> Option<&'static str> {
    let mut head = [0u8; 12];
    let mut got = 0;
    while got < head.len() {
        match stream.read_buf(&mut head[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    stream.seek_buffered_rev(got);
    let head = head.get(..got)?;
    let at = |offset: usize, magic: &[u8]| head.get(offset..offset + magic.len()) == Some(magic);
    Some(match () {
        _ if at(0, b".snd") => "Sun/NeXT AU files are not read",
        _ if at(0, b"FORM") && (at(8, b"AIFF") || at(8, b"AIFC")) => "AIFF files are not read",
        _ if at(0, b"caff") => "Core Audio (CAF) files are not read",
        _ if at(0, &[0x1a, 0x45, 0xdf, 0xa3]) => "Matroska/WebM files are not read",
        _ if at(0, b"wvpk") => "WavPack files are not read",
        _ if at(0, b"MAC ") => "Monkey's Audio files are not read",
        _ if at(0, b"#!AMR") => "AMR files are not read",
        _ if at(0, &[0x30, 0x26, 0xb2, 0x75]) => "ASF/WMA files are not read",
        _ if at(0, b"RF64") => "RF64 (64-bit WAV) files are not read",
        _ => return None,
    })
}

/// Names of codecs symphonia knows of but this build does not decode.
fn codec_name(codec: CodecType) -> Option<&'static str> {
    Some(match codec {
        CODEC_TYPE_OPUS => "Opus",
        CODEC_TYPE_ADPCM_IMA_WAV | CODEC_TYPE_ADPCM_IMA_QT => "IMA ADPCM",
        CODEC_TYPE_ADPCM_MS => "Microsoft ADPCM",
        CODEC_TYPE_ALAC => "Apple Lossless (ALAC)",
        CODEC_TYPE_MP1 => "MPEG-1 Layer I",
        CODEC_TYPE_MP2 => "MPEG-1 Layer II",
        CODEC_TYPE_SPEEX => "Speex",
        CODEC_TYPE_WMA => "Windows Media Audio",
        CODEC_TYPE_EAC3 => "E-AC-3",
        CODEC_TYPE_PCM_ALAW => "A-law PCM",
        CODEC_TYPE_PCM_MULAW => "mu-law PCM",
        _ => return None,
    })
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
    use super::*;

    fn open_bytes(bytes: &[u8]) -> Result<ContainerDecoder, AudioError> {
        ContainerDecoder::open(Box::new(std::io::Cursor::new(bytes.to_vec())), None, "<t>")
    }

    #[test]
    fn common_unsupported_containers_are_named() {
        let mut cases: Vec<(&[u8], &str)> = vec![
            (b".snd\0\0\0\x18", "AU"),
            (b"FORM\0\0\0\x40AIFFCOMM", "AIFF"),
            (b"FORM\0\0\0\x40AIFCFVER", "AIFF"),
            (b"caff\0\x01\0\0desc", "CAF"),
            (
                &[0x1a, 0x45, 0xdf, 0xa3, 0x9f, 0x42, 0x86, 0x81],
                "Matroska",
            ),
            (b"wvpk\x20\0\0\0", "WavPack"),
            (b"MAC \x96\x0f\0\0", "Monkey"),
            (b"#!AMR\n\x3c\x00", "AMR"),
            (&[0x30, 0x26, 0xb2, 0x75, 0x8e, 0x66, 0xcf, 0x11], "WMA"),
            (b"RF64\xff\xff\xff\xffWAVEds64", "RF64"),
        ];
        let padded: Vec<Vec<u8>> = cases
            .iter()
            .map(|(head, _)| [head.to_vec(), vec![0u8; 64]].concat())
            .collect();
        for ((_, name), bytes) in cases.iter_mut().zip(&padded) {
            let err = match open_bytes(bytes) {
                Err(e) => e,
                Ok(_) => panic!("{name} opened"),
            };
            assert!(
                matches!(err, AudioError::Unsupported { .. }),
                "{name}: {err}"
            );
            assert!(err.to_string().contains(*name), "{name}: {err}");
        }
    }

    #[test]
    fn codec_names_cover_the_common_unsupported_codecs() {
        assert_eq!(codec_name(CODEC_TYPE_OPUS), Some("Opus"));
        assert_eq!(codec_name(CODEC_TYPE_ALAC), Some("Apple Lossless (ALAC)"));
        assert_eq!(codec_name(CODEC_TYPE_NULL), None);
    }
}

//! PCM from a byte stream that cannot seek (stdin, a socket, any `Read`): a WAV file read
//! front to back, or headerless samples in a format the caller names.
//!
//! WAV written to a pipe often cannot know its length (ffmpeg writes 0xFFFFFFFF, others 0),
//! so a data chunk of either size is read to the end of the stream, and a stream that ends
//! before its declared size simply ends. Chunks before `data` are skipped by reading, never
//! held. Memory is one block of [`BLOCK_FRAMES`] frames whatever the header claims.

use std::io::{self, Read};

use super::{check_channels, check_sample_rate, AudioError, Frames, RawPcm};

/// Frames read and converted per call.
pub(crate) const BLOCK_FRAMES: usize = 4096;

/// A WAV `fmt ` chunk longer than this is not one any writer makes.
const MAX_FMT_CHUNK: u32 = 1024;

/// How the bytes of one sample encode it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SampleFormat {
    /// Unsigned 8-bit, 128 is zero.
    U8,
    S16,
    S24,
    S32,
    F32,
    F64,
}

impl SampleFormat {
    fn bytes(self) -> usize {
        match self {
            SampleFormat::U8 => 1,
            SampleFormat::S16 => 2,
            SampleFormat::S24 => 3,
            SampleFormat::S32 | SampleFormat::F32 => 4,
            SampleFormat::F64 => 8,
        }
    }

    /// One little-endian sample as f32 in [-1, 1); integers are divided by 2^(bits-1).
    fn decode(self, b: &[u8]) -> f32 {
        match (self, b) {
            (SampleFormat::U8, [x, ..]) => (f32::from(*x) - 128.0) / 128.0,
            (SampleFormat::S16, [a, b, ..]) => f32::from(i16::from_le_bytes([*a, *b])) / 32768.0,
            (SampleFormat::S24, [a, b, c, ..]) => {
                (i32::from_le_bytes([0, *a, *b, *c]) >> 8) as f32 / 8_388_608.0
            }
            (SampleFormat::S32, [a, b, c, d, ..]) => {
                i32::from_le_bytes([*a, *b, *c, *d]) as f32 / 2_147_483_648.0
            }
            (SampleFormat::F32, [a, b, c, d, ..]) => f32::from_le_bytes([*a, *b, *c, *d]),
            (SampleFormat::F64, [a, b, c, d, e, f, g, h, ..]) => {
                f64::from_le_bytes([*a, *b, *c, *d, *e, *f, *g, *h]) as f32
            }
            _ => 0.0,
        }
    }
}

/// Interleaved PCM frames read block by block from a stream.
pub(crate) struct PcmReader {
    file: String,
    reader: Box<dyn Read + Send>,
    format: SampleFormat,
    channels: usize,
    sample_rate: u32,
    /// Bytes of sample data still to read; `None` reads to the end of the stream.
    remaining: Option<u64>,
    /// Raw bytes; the first `held` are read but not yet converted (a partial frame, or the
    /// bytes sniffed before deciding this is raw PCM).
    bytes: Vec<u8>,
    held: usize,
    frames: Vec<f32>,
    done: bool,
}

impl PcmReader {
    /// Sniffs the stream: `RIFF` opens a WAV file, anything else is raw PCM, s16le, in the
    /// layout `raw` gives (16 kHz mono without it).
    pub(crate) fn open(
        mut reader: Box<dyn Read + Send>,
        raw: Option<RawPcm>,
        file: &str,
    ) -> Result<PcmReader, AudioError> {
        let mut magic = [0u8; 4];
        let got = read_full(&mut reader, &mut magic).map_err(|e| io_err(file, e))?;
        if got == 4 && &magic == b"RIFF" {
            let header = read_wav_header(&mut reader, file)?;
            let mut pcm = PcmReader::new(file, reader, header.format, header.channels, header.rate);
            pcm.remaining = header.data_len;
            return Ok(pcm);
        }
        if got == 4 && &magic == b"RF64" {
            return Err(AudioError::Unsupported {
                file: file.to_string(),
                reason: "RF64 (64-bit WAV) is not read from a stream".to_string(),
            });
        }
        let raw = raw.unwrap_or(RawPcm {
            sample_rate: 16_000,
            channels: 1,
        });
        check_sample_rate(file, raw.sample_rate)?;
        check_channels(file, raw.channels)?;
        let mut pcm = PcmReader::new(
            file,
            reader,
            SampleFormat::S16,
            raw.channels,
            raw.sample_rate,
        );
        let sniffed = magic.get(..got).unwrap_or(&[]);
        pcm.bytes[..sniffed.len()].copy_from_slice(sniffed);
        pcm.held = sniffed.len();
        Ok(pcm)
    }

    fn new(
        file: &str,
        reader: Box<dyn Read + Send>,
        format: SampleFormat,
        channels: usize,
        sample_rate: u32,
    ) -> PcmReader {
        // channels <= MAX_CHANNELS was checked, so this is at most a few MiB.
        let block = BLOCK_FRAMES * channels * format.bytes();
        PcmReader {
            file: file.to_string(),
            reader,
            format,
            channels,
            sample_rate,
            remaining: None,
            bytes: vec![0; block.max(4)],
            held: 0,
            frames: Vec::with_capacity(BLOCK_FRAMES * channels),
            done: false,
        }
    }

    pub(crate) fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    pub(crate) fn channels(&self) -> usize {
        self.channels
    }

    /// The next block of interleaved frames, with the sample rate and channel count; `None` at
    /// the end of the stream. A partial frame at the very end is dropped.
    pub(crate) fn next_frames(&mut self) -> Result<Option<Frames<'_>>, AudioError> {
        if self.done {
            return Ok(None);
        }
        let mut want = self.bytes.len();
        if let Some(left) = self.remaining {
            let limit = u64::try_from(self.held)
                .unwrap_or(u64::MAX)
                .saturating_add(left);
            want = want.min(usize::try_from(limit).unwrap_or(usize::MAX));
        }
        let target = self.bytes.get_mut(self.held..want).unwrap_or(&mut []);
        let got = read_full(&mut self.reader, target).map_err(|e| io_err(&self.file, e))?;
        if let Some(left) = self.remaining.as_mut() {
            *left = left.saturating_sub(got as u64);
        }
        let filled = self.held + got;
        let frame_bytes = self.channels * self.format.bytes();
        let whole = filled / frame_bytes * frame_bytes;
        if got < want - self.held || self.remaining == Some(0) {
            self.done = true;
        }
        self.frames.clear();
        let format = self.format;
        self.frames.extend(
            self.bytes[..whole]
                .chunks_exact(format.bytes())
                .map(|b| format.decode(b)),
        );
        self.bytes.copy_within(whole..filled, 0);
        self.held = filled - whole;
        if self.frames.is_empty() {
            self.done = true;
            return Ok(None);
        }
        Ok(Some(Frames {
            samples: &self.frames,
            sample_rate: self.sample_rate,
            channels: self.channels,
        }))
    }
}

struct WavHeader {
    format: SampleFormat,
    channels: usize,
    rate: u32,
    data_len: Option<u64>,
}

/// Reads a WAV header up to the start of the samples; the `RIFF` tag is already consumed.
fn read_wav_header(r: &mut dyn Read, file: &str) -> Result<WavHeader, AudioError> {
    let malformed = |reason: &str| AudioError::Malformed {
        file: file.to_string(),
        reason: format!("WAV: {reason}"),
    };
    let mut riff = [0u8; 8];
    if read_full(r, &mut riff).map_err(|e| io_err(file, e))? < 8 {
        return Err(malformed("the header ends too early"));
    }
    if &riff[4..8] != b"WAVE" {
        return Err(malformed("a RIFF file, but not a WAVE one"));
    }
    let mut fmt: Option<(SampleFormat, usize, u32)> = None;
    loop {
        let mut chunk = [0u8; 8];
        if read_full(r, &mut chunk).map_err(|e| io_err(file, e))? < 8 {
            return Err(malformed("no data chunk"));
        }
        let size = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
        match &chunk[..4] {
            b"fmt " => {
                if !(16..=MAX_FMT_CHUNK).contains(&size) {
                    return Err(malformed(&format!("a fmt chunk of {size} bytes")));
                }
                let mut body = vec![0u8; size as usize + (size as usize & 1)];
                if read_full(r, &mut body).map_err(|e| io_err(file, e))? < size as usize {
                    return Err(malformed("the fmt chunk ends too early"));
                }
                fmt = Some(parse_fmt(&body, file)?);
            }
            b"data" => {
                let (format, channels, rate) = fmt.ok_or_else(|| malformed("data before fmt"))?;
                // Writers that stream cannot know the size and leave 0 or all ones.
                let data_len = (size != 0 && size != u32::MAX).then_some(u64::from(size));
                return Ok(WavHeader {
                    format,
                    channels,
                    rate,
                    data_len,
                });
            }
            _ => {
                let skip = u64::from(size) + u64::from(size & 1);
                let skipped =
                    io::copy(&mut r.take(skip), &mut io::sink()).map_err(|e| io_err(file, e))?;
                if skipped < skip {
                    return Err(malformed("no data chunk"));
                }
            }
        }
    }
}

/// The sample format, channel count and rate a `fmt ` chunk describes.
fn parse_fmt(b: &[u8], file: &str) -> Result<(SampleFormat, usize, u32), AudioError> {
    let u16_at = |i: usize| b.get(i..i + 2).map(|s| u16::from_le_bytes([s[0], s[1]]));
    let u32_at = |i: usize| {
        b.get(i..i + 4)
            .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    };
    let short = || AudioError::Malformed {
        file: file.to_string(),
        reason: "WAV: the fmt chunk is too short".to_string(),
    };
    let mut tag = u16_at(0).ok_or_else(short)?;
    let channels = usize::from(u16_at(2).ok_or_else(short)?);
    let rate = u32_at(4).ok_or_else(short)?;
    let block_align = usize::from(u16_at(12).ok_or_else(short)?);
    let bits = u16_at(14).ok_or_else(short)?;
    if tag == 0xFFFE {
        // WAVE_FORMAT_EXTENSIBLE: the real tag is the first two bytes of the sub-format GUID.
        tag = u16_at(24).ok_or_else(short)?;
    }
    check_channels(file, channels)?;
    check_sample_rate(file, rate)?;
    let format = match (tag, bits) {
        (1, 8) => SampleFormat::U8,
        (1, 16) => SampleFormat::S16,
        (1, 24) => SampleFormat::S24,
        (1, 32) => SampleFormat::S32,
        (3, 32) => SampleFormat::F32,
        (3, 64) => SampleFormat::F64,
        (1 | 3, _) => {
            return Err(AudioError::Unsupported {
                file: file.to_string(),
                reason: format!("WAV with {bits}-bit samples"),
            })
        }
        _ => {
            return Err(AudioError::Unsupported {
                file: file.to_string(),
                reason: format!("WAV codec tag {tag:#06x} (only PCM and IEEE float are read)"),
            })
        }
    };
    if block_align != channels * format.bytes() {
        return Err(AudioError::Malformed {
            file: file.to_string(),
            reason: format!(
                "WAV: block align {block_align} does not match {channels} channels of {bits} bits"
            ),
        });
    }
    Ok((format, channels, rate))
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn io_err(file: &str, source: io::Error) -> AudioError {
    AudioError::Io {
        file: file.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wav_header(tag: u16, channels: u16, rate: u32, bits: u16, data_len: u32) -> Vec<u8> {
        let block = channels * (bits / 8);
        let mut h = Vec::new();
        h.extend_from_slice(b"RIFF");
        h.extend_from_slice(&36u32.wrapping_add(data_len).to_le_bytes());
        h.extend_from_slice(b"WAVEfmt ");
        h.extend_from_slice(&16u32.to_le_bytes());
        h.extend_from_slice(&tag.to_le_bytes());
        h.extend_from_slice(&channels.to_le_bytes());
        h.extend_from_slice(&rate.to_le_bytes());
        h.extend_from_slice(&(rate * u32::from(block)).to_le_bytes());
        h.extend_from_slice(&block.to_le_bytes());
        h.extend_from_slice(&bits.to_le_bytes());
        h.extend_from_slice(b"data");
        h.extend_from_slice(&data_len.to_le_bytes());
        h
    }

    fn read_all(bytes: Vec<u8>, raw: Option<RawPcm>) -> Result<(Vec<f32>, u32, usize), AudioError> {
        let mut pcm = PcmReader::open(Box::new(io::Cursor::new(bytes)), raw, "<test>")?;
        let mut all = Vec::new();
        while let Some(f) = pcm.next_frames()? {
            all.extend_from_slice(f.samples);
        }
        Ok((all, pcm.sample_rate(), pcm.channels()))
    }

    #[test]
    fn every_sample_format_scales_to_unit_range() {
        let cases: [(u16, u16, &[u8], f32); 6] = [
            (1, 8, &[0, 255], -1.0),
            (1, 16, &[0x00, 0x80, 0xff, 0x7f], -1.0),
            (1, 24, &[0x00, 0x00, 0x80, 0xff, 0xff, 0x7f], -1.0),
            (1, 32, &[0, 0, 0, 0x80, 0xff, 0xff, 0xff, 0x7f], -1.0),
            (3, 32, &[0, 0, 0x80, 0xbf, 0, 0, 0x80, 0x3f], -1.0),
            (
                3,
                64,
                &[0, 0, 0, 0, 0, 0, 0xf0, 0xbf, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f],
                -1.0,
            ),
        ];
        for (tag, bits, data, first) in cases {
            let mut bytes = wav_header(tag, 1, 8000, bits, data.len() as u32);
            bytes.extend_from_slice(data);
            let (s, rate, ch) = read_all(bytes, None).unwrap();
            assert_eq!((rate, ch, s.len()), (8000, 1, 2), "{bits}-bit");
            assert_eq!(s[0], first, "{bits}-bit");
            assert!(s[1] > 0.99 && s[1] <= 1.0, "{bits}-bit: {}", s[1]);
        }
    }

    #[test]
    fn data_length_bounds_the_read_and_unknown_lengths_read_to_the_end() {
        let samples: Vec<u8> = (0i16..10).flat_map(|v| (v * 100).to_le_bytes()).collect();
        let mut declared = wav_header(1, 1, 16_000, 16, 8);
        declared.extend_from_slice(&samples);
        assert_eq!(read_all(declared, None).unwrap().0.len(), 4);
        for len in [0, u32::MAX] {
            let mut open_ended = wav_header(1, 1, 16_000, 16, len);
            open_ended.extend_from_slice(&samples);
            assert_eq!(
                read_all(open_ended, None).unwrap().0.len(),
                10,
                "declared {len:#x}"
            );
        }
    }

    #[test]
    fn raw_pcm_keeps_the_sniffed_bytes_and_drops_a_partial_frame() {
        let bytes: Vec<u8> = [1i16, -2, 3, -4, 5]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut odd = bytes.clone();
        odd.push(7);
        let (s, rate, ch) = read_all(
            odd,
            Some(RawPcm {
                sample_rate: 8000,
                channels: 1,
            }),
        )
        .unwrap();
        assert_eq!((rate, ch), (8000, 1));
        let want: Vec<f32> = [1.0f32, -2.0, 3.0, -4.0, 5.0]
            .iter()
            .map(|v| v / 32768.0)
            .collect();
        assert_eq!(s, want);
        let (s, _, ch) = read_all(
            bytes,
            Some(RawPcm {
                sample_rate: 8000,
                channels: 2,
            }),
        )
        .unwrap();
        assert_eq!((ch, s.len()), (2, 4));
        assert_eq!(read_all(vec![1, 2, 3], None).unwrap().0.len(), 1);
        assert_eq!(read_all(Vec::new(), None).unwrap().0.len(), 0);
    }

    #[test]
    fn bad_headers_are_errors() {
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("1 Hz", wav_header(1, 1, 1, 16, 0)),
            ("no channels", wav_header(1, 0, 16_000, 16, 0)),
            ("ADPCM", wav_header(0x11, 1, 16_000, 16, 0)),
            ("12-bit", wav_header(1, 1, 16_000, 12, 0)),
            ("truncated", wav_header(1, 1, 16_000, 16, 0)[..30].to_vec()),
            (
                "no data chunk",
                wav_header(1, 1, 16_000, 16, 0)[..36].to_vec(),
            ),
            ("not WAVE", b"RIFF\0\0\0\0AVI LIST".to_vec()),
        ];
        for (what, bytes) in cases {
            let err = match read_all(bytes, None) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("{what}: accepted"),
            };
            assert!(err.contains("<test>"), "{what}: {err}");
        }
        let mut huge_fmt = wav_header(1, 1, 16_000, 16, 0);
        huge_fmt[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(read_all(huge_fmt, None)
            .unwrap_err()
            .to_string()
            .contains("fmt chunk"));
    }

    #[test]
    fn chunks_before_data_are_skipped() {
        let mut bytes = wav_header(1, 1, 16_000, 16, 4);
        let data_at = bytes.len() - 8;
        let mut list = b"LIST".to_vec();
        list.extend_from_slice(&5u32.to_le_bytes());
        list.extend_from_slice(&[9, 9, 9, 9, 9, 0]); // odd size: one pad byte
        bytes.splice(data_at..data_at, list);
        bytes.extend_from_slice(&[0, 0x40, 0, 0xc0]);
        assert_eq!(read_all(bytes, None).unwrap().0, vec![0.5, -0.5]);
    }
}

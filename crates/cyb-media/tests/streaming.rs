//! `AudioStream`: long inputs in bounded memory, raw PCM, and agreement with the whole-file
//! path. The long inputs are generated on the fly by `Read` impls, never held or written.

mod common;

use std::io::{self, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use common::{fixture, wav_bytes};
use cyb_media::audio::{mix_to_mono, STREAM_CHUNK_SAMPLES};
use cyb_media::{load_16k_mono, open_stream, resample, stream_reader, AudioError, RawPcm};

/// A WAV stream produced lazily: a header whose RIFF and data sizes say "unknown" (as a writer
/// piping to stdout leaves them), then `frames` frames of `sample(frame, channel)` as s16le.
struct GeneratedWav {
    header: Vec<u8>,
    pos: usize,
    frame: u64,
    frames: u64,
    channels: u16,
    sample: fn(u64, u16) -> i16,
}

impl GeneratedWav {
    fn new(rate: u32, channels: u16, frames: u64, sample: fn(u64, u16) -> i16) -> GeneratedWav {
        let mut header = wav_bytes(1, channels, rate, 16, u32::MAX, &[]);
        header[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        GeneratedWav {
            header,
            pos: 0,
            frame: 0,
            frames,
            channels,
            sample,
        }
    }
}

impl Read for GeneratedWav {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos < self.header.len() {
            let n = buf.len().min(self.header.len() - self.pos);
            buf[..n].copy_from_slice(&self.header[self.pos..self.pos + n]);
            self.pos += n;
            return Ok(n);
        }
        let frame_bytes = 2 * usize::from(self.channels);
        let mut written = 0;
        while self.frame < self.frames && written + frame_bytes <= buf.len() {
            for c in 0..self.channels {
                let s = (self.sample)(self.frame, c).to_le_bytes();
                buf[written..written + 2].copy_from_slice(&s);
                written += 2;
            }
            self.frame += 1;
        }
        if written == 0 && self.frame < self.frames {
            // The stream reader asks for whole blocks of frames; splitting a frame across
            // reads is not needed here.
            return Err(io::Error::other("buffer smaller than a frame"));
        }
        Ok(written)
    }
}

/// Peak resident memory of this process so far (Linux), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn ramp(frame: u64, _channel: u16) -> i16 {
    (frame.wrapping_mul(7919) % 65_536) as u16 as i16
}

#[test]
fn an_hour_of_16_khz_wav_streams_in_bounded_chunks_and_memory() {
    const FRAMES: u64 = 16_000 * 3600;
    let before = peak_rss();
    let stream = stream_reader(Box::new(GeneratedWav::new(16_000, 1, FRAMES, ramp)), None).unwrap();
    assert_eq!(stream.source_sample_rate(), Some(16_000));
    let mut total = 0u64;
    let mut chunks = 0u64;
    let mut last_len = STREAM_CHUNK_SAMPLES;
    for chunk in stream {
        let chunk = chunk.unwrap();
        assert_eq!(
            last_len, STREAM_CHUNK_SAMPLES,
            "only the last chunk may be short"
        );
        assert!(!chunk.is_empty() && chunk.len() <= STREAM_CHUNK_SAMPLES);
        // Same rate: the samples pass through untouched.
        for probe in [0, chunk.len() / 2, chunk.len() - 1] {
            let want = f32::from(ramp(total + probe as u64, 0)) / 32768.0;
            assert_eq!(chunk[probe], want, "sample {}", total + probe as u64);
        }
        total += chunk.len() as u64;
        chunks += 1;
        last_len = chunk.len();
    }
    assert_eq!(total, FRAMES);
    assert_eq!(chunks, FRAMES / STREAM_CHUNK_SAMPLES as u64);
    if let (Some(before), Some(after)) = (before, peak_rss()) {
        // Held whole, the hour would be 230 MB of f32 (and 115 MB of input).
        let grew = after.saturating_sub(before);
        eprintln!("peak memory grew by {} KB streaming the hour", grew >> 10);
        assert!(grew < 64 << 20, "peak memory grew by {} MB", grew >> 20);
    }
}

fn stereo_tones(frame: u64, channel: u16) -> i16 {
    let t = frame as f64 / 44_100.0;
    let f = if channel == 0 { 1000.0 } else { 2500.0 };
    (0.4 * (2.0 * std::f64::consts::PI * f * t).sin() * 32767.0).round() as i16
}

#[test]
fn ten_minutes_of_44_1_khz_stereo_resample_while_streaming() {
    const FRAMES: u64 = 44_100 * 600;
    let stream = stream_reader(
        Box::new(GeneratedWav::new(44_100, 2, FRAMES, stereo_tones)),
        None,
    )
    .unwrap();
    let mut total = 0usize;
    let mut worst = 0f32;
    for chunk in stream {
        let chunk = chunk.unwrap();
        assert!(chunk.len() <= STREAM_CHUNK_SAMPLES);
        // Compare some samples away from the two ends with the analytic 16 kHz mono mix.
        for i in (0..chunk.len()).step_by(997) {
            let j = total + i;
            if j < 1000 || j + 1000 > 16_000 * 600 {
                continue;
            }
            let t = j as f64 / 16_000.0;
            let want = 0.2
                * ((2.0 * std::f64::consts::PI * 1000.0 * t).sin()
                    + (2.0 * std::f64::consts::PI * 2500.0 * t).sin());
            worst = worst.max((chunk[i] - want as f32).abs());
        }
        total += chunk.len();
    }
    assert_eq!(total, 16_000 * 600);
    // 16-bit quantisation of the input is 1.5e-5; the filter adds well under 1e-3.
    assert!(worst < 1e-3, "worst error {worst}");
}

#[test]
fn raw_pcm_from_a_reader() {
    let samples: Vec<i16> = (0..8001).map(|i| ((i * 37) % 2000 - 1000) as i16).collect();
    let bytes: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();

    // Default layout: 16 kHz mono, passed through.
    let got: Vec<f32> = stream_reader(Box::new(io::Cursor::new(bytes.clone())), None)
        .unwrap()
        .flat_map(|c| c.unwrap())
        .collect();
    let want: Vec<f32> = samples.iter().map(|&s| f32::from(s) / 32768.0).collect();
    assert_eq!(got, want);

    // 8 kHz stereo: the odd trailing sample is half a frame and is dropped.
    let raw = RawPcm {
        sample_rate: 8_000,
        channels: 2,
    };
    let stream = stream_reader(Box::new(io::Cursor::new(bytes)), Some(raw)).unwrap();
    assert_eq!(
        (stream.source_sample_rate(), stream.source_channels()),
        (Some(8_000), Some(2))
    );
    let got: Vec<f32> = stream.flat_map(|c| c.unwrap()).collect();
    let mut mono = Vec::new();
    mix_to_mono(&want[..8000], 2, &mut mono);
    assert_eq!(got, resample(&mono, 8_000, 16_000).unwrap());
    assert_eq!(got.len(), 8000);

    let bad = RawPcm {
        sample_rate: 16_000,
        channels: 0,
    };
    assert!(stream_reader(Box::new(io::Cursor::new(vec![0u8; 8])), Some(bad)).is_err());
}

#[test]
fn the_streamed_wav_reader_and_the_file_decoder_agree() {
    let path = fixture("tone_s16.wav");
    let whole = load_16k_mono(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let piped: Vec<f32> = stream_reader(Box::new(io::Cursor::new(bytes)), None)
        .unwrap()
        .flat_map(|c| c.unwrap())
        .collect();
    assert_eq!(piped, whole);
    for name in ["tone.flac", "tone.mp3", "tone_f32.wav"] {
        let path = fixture(name);
        let streamed: Vec<f32> = open_stream(&path)
            .unwrap()
            .flat_map(|c| c.unwrap())
            .collect();
        assert_eq!(streamed, load_16k_mono(&path).unwrap(), "{name}");
        assert!(!streamed.is_empty());
    }
}

/// A reader that fails after `ok` bytes.
struct FailsAfter {
    inner: io::Cursor<Vec<u8>>,
    ok: u64,
}

impl Read for FailsAfter {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.inner.position() >= self.ok {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "peer went away",
            ));
        }
        let room = (self.ok - self.inner.position()) as usize;
        let n = buf.len().min(room);
        self.inner.read(&mut buf[..n])
    }
}

#[test]
fn a_read_error_mid_stream_is_reported_once_and_ends_the_stream() {
    let data: Vec<u8> = (0..200_000u32)
        .flat_map(|i| (i as i16).to_le_bytes())
        .collect();
    let reader = FailsAfter {
        inner: io::Cursor::new(data),
        ok: 100_000,
    };
    let mut stream = stream_reader(Box::new(reader), None).unwrap();
    let mut ok_samples = 0;
    let err = loop {
        match stream.next() {
            Some(Ok(chunk)) => ok_samples += chunk.len(),
            Some(Err(e)) => break e,
            None => panic!("the error was not reported"),
        }
    };
    assert!(matches!(err, AudioError::Io { .. }), "{err}");
    assert!(err.to_string().contains("<reader>") && err.to_string().contains("peer went away"));
    assert!(ok_samples <= 50_000);
    assert!(stream.next().is_none());
}

#[test]
fn a_wav_stream_with_an_implausible_header_is_refused_up_front() {
    let one_hz = wav_bytes(1, 1, 1, 16, 0, &[0; 100]);
    let err = match stream_reader(Box::new(io::Cursor::new(one_hz)), None) {
        Err(e) => e,
        Ok(_) => panic!("1 Hz accepted"),
    };
    assert!(err.to_string().contains("sample rate 1 Hz"), "{err}");
}

/// `open_stream("-")` reads stdin: this test runs itself again as a child process with a WAV
/// piped into its stdin.
#[test]
fn a_dash_reads_stdin() {
    const CHILD: &str = "CYB_MEDIA_STDIN_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let n: usize = open_stream(Path::new("-"))
            .unwrap()
            .map(|c| c.unwrap().len())
            .sum();
        println!("samples={n}");
        return;
    }
    let data: Vec<u8> = (0..8000i16)
        .flat_map(|i| (i % 100 * 300).to_le_bytes())
        .collect();
    let wav = wav_bytes(1, 1, 8_000, 16, data.len() as u32, &data);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_dash_reads_stdin",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&wav).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("samples=16000"), "{stdout}");
}

//! Container decoding against reference decoders, on 0.5 s of stereo tones plus noise at
//! 44.1 kHz (tests/fixtures/audio, made by tools/fixtures/make_audio_fixtures.py).
//!
//! Lossless (16-bit WAV, FLAC, 32-bit float WAV): every sample equals soundfile's decode
//! (libsndfile), int16 scaled by 1/32768, float bit for bit.
//!
//! Lossy (MP3, Ogg Vorbis, AAC in M4A): two decoders of one bitstream differ by float rounding
//! and by how much encoder delay and padding they trim. So we find the offset that best lines
//! our decode up with ffmpeg's (a 4096-frame window), require that offset to be the one named
//! per format below, and then require the aligned samples to agree with ffmpeg's to a
//! signal-to-difference ratio of at least 90 dB (measured: 117 to 138 dB, float rounding; a
//! swapped or missing channel, a gain error or a decoder bug gives well under 40 dB). Our
//! frame count and per-channel RMS are checked against ffmpeg's as well, and the decode is
//! checked against the 16-bit original by correlation.

mod common;

use common::{blob, f32s, fixture, i16s, manifest};
use cyb_media::{decode_bytes, decode_file, Audio};
use serde_json::Value;

fn file_entry(name: &str) -> Value {
    let m = manifest("containers.json");
    m["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["file"] == name)
        .unwrap()
        .clone()
}

fn check_lossless(name: &str) {
    let entry = file_entry(name);
    let refs = blob("refs.bin");
    let audio = decode_file(&fixture(name)).unwrap();
    assert_eq!(
        audio.sample_rate,
        entry["sample_rate"].as_u64().unwrap() as u32,
        "{name}"
    );
    assert_eq!(
        audio.channels,
        entry["channels"].as_u64().unwrap() as usize,
        "{name}"
    );
    let want: Vec<f32> = match entry["decoded"]["dtype"].as_str().unwrap() {
        "i16" => i16s(&refs, &entry["decoded"])
            .iter()
            .map(|&i| f32::from(i) / 32768.0)
            .collect(),
        _ => f32s(&refs, &entry["decoded"]),
    };
    assert_eq!(audio.samples.len(), want.len(), "{name}: sample count");
    let mismatches = audio
        .samples
        .iter()
        .zip(&want)
        .filter(|(a, b)| a.to_bits() != b.to_bits());
    assert_eq!(
        mismatches.count(),
        0,
        "{name}: samples differ from soundfile's"
    );

    // Uploads decode the same, with or without a name to hint at the format.
    let bytes = std::fs::read(fixture(name)).unwrap();
    assert_eq!(
        decode_bytes(bytes.clone(), Some(name)).unwrap(),
        audio,
        "{name} as bytes"
    );
    assert_eq!(
        decode_bytes(bytes, None).unwrap(),
        audio,
        "{name} as bytes without a name"
    );
}

#[test]
fn wav_16_bit_equals_soundfile() {
    check_lossless("tone_s16.wav");
}

#[test]
fn wav_32_bit_float_equals_soundfile() {
    check_lossless("tone_f32.wav");
}

#[test]
fn flac_equals_soundfile() {
    check_lossless("tone.flac");
}

/// Ratio of the reference's energy to the difference's, in dB.
fn snr_db(reference: &[f32], got: &[f32]) -> f64 {
    let signal: f64 = reference.iter().map(|&x| f64::from(x).powi(2)).sum();
    let noise: f64 = reference
        .iter()
        .zip(got)
        .map(|(&x, &y)| f64::from(x - y).powi(2))
        .sum();
    10.0 * (signal / noise.max(1e-30)).log10()
}

/// Frames `lo + lag .. hi + lag` of `audio`, interleaved, or `None` where out of range.
fn frames(audio: &Audio, lo: usize, hi: usize, lag: isize) -> Option<&[f32]> {
    let c = audio.channels;
    let start = usize::try_from(lo as isize + lag).ok()?;
    audio.samples.get(start * c..(start + hi - lo) * c)
}

/// The lag (our frame index minus ffmpeg's) within ±`search` with the best SNR, and that SNR.
fn best_lag(audio: &Audio, reference: &[f32], lo: usize, hi: usize, search: isize) -> (isize, f64) {
    (-search..=search)
        .filter_map(|lag| frames(audio, lo, hi, lag).map(|got| (lag, snr_db(reference, got))))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap()
}

fn correlation(a: &[f32], b: &[f32]) -> f64 {
    let dot = |x: &[f32], y: &[f32]| {
        x.iter()
            .zip(y)
            .map(|(&p, &q)| f64::from(p) * f64::from(q))
            .sum::<f64>()
    };
    dot(a, b) / (dot(a, a) * dot(b, b)).sqrt()
}

/// `expected_lag`: how many more leading frames our decode has than ffmpeg's.
/// `expected_extra`: how many more frames in all (leading and trailing).
fn check_lossy(name: &str, expected_lag: isize, expected_extra: isize) {
    let entry = file_entry(name);
    let refs = blob("refs.bin");
    let audio = decode_file(&fixture(name)).unwrap();
    assert_eq!(audio.sample_rate, 44_100, "{name}");
    assert_eq!(audio.channels, 2, "{name}");

    let lo = entry["window"][0].as_u64().unwrap() as usize;
    let hi = entry["window"][1].as_u64().unwrap() as usize;
    let reference = f32s(&refs, &entry["decoded_window"]);
    let (lag, snr) = best_lag(&audio, &reference, lo, hi, 3000);
    eprintln!(
        "{name}: best lag {lag} frames, {snr:.1} dB against ffmpeg; {} frames",
        audio.frames()
    );
    assert_eq!(lag, expected_lag, "{name}: offset against ffmpeg's decode");
    assert!(
        snr >= 90.0,
        "{name}: only {snr:.1} dB against ffmpeg's decode"
    );

    let ffmpeg_frames = entry["n_frames"].as_i64().unwrap() as isize;
    assert_eq!(
        audio.frames() as isize - ffmpeg_frames,
        expected_extra,
        "{name}: frame count"
    );
    // RMS over the frames that line up with ffmpeg's whole decode.
    let aligned = frames(&audio, 0, ffmpeg_frames as usize, lag).unwrap();
    for (c, want) in entry["rms"].as_array().unwrap().iter().enumerate() {
        let want = want.as_f64().unwrap();
        let ch: Vec<f64> = aligned
            .iter()
            .skip(c)
            .step_by(2)
            .map(|&x| f64::from(x))
            .collect();
        let rms = (ch.iter().map(|x| x * x).sum::<f64>() / ch.len() as f64).sqrt();
        assert!(
            (rms - want).abs() < 1e-3 * want,
            "{name} channel {c}: rms {rms} vs ffmpeg {want}"
        );
    }

    // Against the 16-bit original the lossy files were encoded from (same frames as the
    // 16-bit WAV): the codec's own loss, checked loosely.
    let original = decode_file(&fixture("tone_s16.wav")).unwrap();
    let ffmpeg_lag = lag; // ffmpeg's decode lines up with the original in time for all three
    let n = original.frames() - 4096;
    let got = frames(&audio, 2048, n, ffmpeg_lag).unwrap();
    let want = frames(&original, 2048, n, 0).unwrap();
    let r = correlation(got, want);
    eprintln!("{name}: correlation with the original {r:.5}");
    assert!(r > 0.99, "{name}: correlation with the original only {r}");
}

#[test]
fn mp3_matches_ffmpeg() {
    check_lossy("tone.mp3", 0, 0);
}

#[test]
fn ogg_vorbis_matches_ffmpeg() {
    check_lossy("tone.ogg", 0, 0);
}

/// The MP4 edit list says to skip the AAC encoder's 1024 priming frames; symphonia does not
/// apply it, cyb-media does (as ffmpeg does), so the two line up. Neither trims the padding at
/// the end, so both have the same frame count.
#[test]
fn m4a_aac_matches_ffmpeg() {
    check_lossy("tone.m4a", 0, 0);
}

//! Resampling to 16 kHz against the analytic signal: a sum of sines sampled at 44.1 and
//! 48 kHz, resampled, must equal the same sines sampled at 16 kHz (the filter passes up to
//! about 7.4 kHz), have `ceil(n * 16000 / from)` samples, and stay in time (a lag of even one
//! output sample would put the 3.5 kHz component far off). Tones above 8 kHz must be removed,
//! not folded down.

mod common;

use cyb_media::{bytes_16k_mono, decode_file, load_16k_mono, resample, to_mono};

fn tones(rate: u32, n: usize, parts: &[(f64, f64)]) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let t = i as f64 / f64::from(rate);
            parts
                .iter()
                .map(|&(f, a)| a * (2.0 * std::f64::consts::PI * f * t).sin())
                .sum::<f64>() as f32
        })
        .collect()
}

/// Away from the edges, where the filter sees zeros beyond the signal.
const EDGE: usize = 300;

#[test]
fn sines_at_44_1_and_48_khz_resample_to_the_analytic_16_khz_signal() {
    let parts = [(440.0, 0.4), (3500.0, 0.3), (6800.0, 0.2)];
    for from in [44_100u32, 48_000] {
        let n = from as usize * 2 + 37;
        let x = tones(from, n, &parts);
        let y = resample(&x, from, 16_000).unwrap();
        let expected_len = (n as u64 * 16_000).div_ceil(u64::from(from)) as usize;
        assert_eq!(y.len(), expected_len, "{from} Hz");
        let want = tones(16_000, y.len(), &parts);
        let err = y[EDGE..y.len() - EDGE]
            .iter()
            .zip(&want[EDGE..want.len() - EDGE])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        eprintln!("{from} Hz -> 16 kHz: max error {err:.2e} (peak amplitude 0.9)");
        assert!(err < 1e-3, "{from} Hz: max error {err}");
    }
}

#[test]
fn tones_above_8_khz_are_filtered_out() {
    for from in [44_100u32, 48_000] {
        let x = tones(from, from as usize, &[(10_000.0, 0.5), (15_000.0, 0.5)]);
        let y = resample(&x, from, 16_000).unwrap();
        let mid = &y[EDGE..y.len() - EDGE];
        let rms = (mid.iter().map(|v| v * v).sum::<f32>() / mid.len() as f32).sqrt();
        assert!(rms < 1e-3, "{from} Hz: {rms} left of tones above Nyquist");
    }
}

#[test]
fn same_rate_is_the_identity_and_upsampling_works() {
    let x = tones(16_000, 1000, &[(1000.0, 0.5)]);
    assert_eq!(resample(&x, 16_000, 16_000).unwrap(), x);
    let x8 = tones(8_000, 8_000, &[(1000.0, 0.5)]);
    let y = resample(&x8, 8_000, 16_000).unwrap();
    assert_eq!(y.len(), 16_000);
    let want = tones(16_000, 16_000, &[(1000.0, 0.5)]);
    let err = y[EDGE..16_000 - EDGE]
        .iter()
        .zip(&want[EDGE..])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(err < 1e-3, "8 kHz -> 16 kHz: max error {err}");
}

#[test]
fn load_16k_mono_is_decode_mix_and_resample() {
    let path = common::fixture("tone_s16.wav");
    let audio = decode_file(&path).unwrap();
    let want = resample(&to_mono(&audio), audio.sample_rate, 16_000).unwrap();
    assert_eq!(want.len(), 8000);
    assert_eq!(load_16k_mono(&path).unwrap(), want);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes_16k_mono(bytes, Some("upload.wav")).unwrap(), want);
}

//! Times `LogMel::compute` on one 30-second window (480000 samples, 3000 frames) of noise,
//! the median of 50 runs, at 80 and 128 mels; and the 16 kHz resampler on 60 s of 44.1 kHz.
//!
//! cargo run --release -p cyb-media --example mel_timing

use std::time::Instant;

use cyb_media::{resample, LogMel};

fn median_ms(mut f: impl FnMut(), runs: usize) -> f64 {
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[runs / 2]
}

fn main() {
    // A fixed xorshift: no rand dependency, same input every run.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let samples: Vec<f32> = (0..480_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect();
    println!("rayon threads: {}", rayon::current_num_threads());
    for n_mels in [80, 128] {
        let mel = LogMel::whisper(n_mels);
        let mut out = Vec::new();
        let ms = median_ms(|| out = mel.compute(&samples), 50);
        println!("log-mel 30 s, {n_mels} mels, 3000 frames: {ms:.2} ms (median of 50)");
        assert_eq!(out.len(), n_mels * 3000);
    }
    let long: Vec<f32> = (0..44_100 * 60)
        .map(|i| (i as f32 * 0.0627).sin() * 0.5)
        .collect();
    for (from, label) in [(44_100, "44.1 kHz"), (48_000, "48 kHz")] {
        let ms = median_ms(|| drop(resample(&long, from, 16_000)), 5);
        println!("resample 60 s of {label} to 16 kHz: {ms:.1} ms (median of 5)");
    }
}

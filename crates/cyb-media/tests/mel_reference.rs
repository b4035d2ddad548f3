//! `LogMel::compute` against Hugging Face transformers' WhisperFeatureExtractor (numpy path):
//! white noise, silence, a chirp, a clipped sine and a 170-sample input (reflect padding
//! wraps more than once), at 80 and 128 mels, and the 30-second padded case that Whisper
//! actually feeds (frame ranges 0..300, 580..620 across the end of the signal, 2950..3000).

mod common;

use common::{blob, f32s, i16s, manifest, shape};
use cyb_media::LogMel;
use serde_json::Value;

/// The brief's bound on the normalised features, `(log10(mel) + 4) / 4`.
const TOLERANCE: f32 = 1e-4;

/// The f32 signal the script fed the extractor: `float32(i) / float32(32767)`.
fn signal(blob: &[u8], entry: &Value) -> Vec<f32> {
    i16s(blob, entry)
        .iter()
        .map(|&i| f32::from(i) / 32767.0)
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn features_match_the_feature_extractor() {
    let m = manifest("mel.json");
    let data = blob("mel.bin");
    let mut checked = 0;
    for case in m["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let x = signal(&data, &case["input"]);
        for (n_mels, expected) in case["expected"].as_object().unwrap() {
            let n_mels: usize = n_mels.parse().unwrap();
            let want = f32s(&data, expected);
            assert_eq!(shape(expected), vec![n_mels, x.len() / 160], "{name}");
            let mel = LogMel::whisper(n_mels);
            assert_eq!(mel.n_mels(), n_mels);
            let got = mel.compute(&x);
            let diff = max_abs_diff(&got, &want);
            eprintln!("{name} {n_mels} mels: max |diff| {diff:.2e}");
            assert!(
                diff <= TOLERANCE,
                "{name}, {n_mels} mels: max |diff| {diff}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 9);
}

#[test]
fn padded_30_seconds_matches_on_stored_frame_ranges() {
    let m = manifest("mel.json");
    let data = blob("mel.bin");
    let cases = m["cases"].as_array().unwrap();
    let padded = &m["padded"];
    let mut x: Vec<f32> = Vec::new();
    for name in padded["input_concat"].as_array().unwrap() {
        let case = cases.iter().find(|c| c["name"] == *name).unwrap();
        x.extend(signal(&data, &case["input"]));
    }
    x.resize(padded["pad_to"].as_u64().unwrap() as usize, 0.0);
    let n_frames = padded["n_frames"].as_u64().unwrap() as usize;
    let got = LogMel::whisper(80).compute(&x);
    assert_eq!(got.len(), 80 * n_frames);
    for range in padded["ranges"].as_array().unwrap() {
        let lo = range["frames"][0].as_u64().unwrap() as usize;
        let hi = range["frames"][1].as_u64().unwrap() as usize;
        let want = f32s(&data, &range["expected"]);
        let got_range: Vec<f32> = (0..80)
            .flat_map(|m| got[m * n_frames + lo..m * n_frames + hi].to_vec())
            .collect();
        let diff = max_abs_diff(&got_range, &want);
        eprintln!("padded frames {lo}..{hi}: max |diff| {diff:.2e}");
        assert!(diff <= TOLERANCE, "frames {lo}..{hi}: max |diff| {diff}");
    }
}

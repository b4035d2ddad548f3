//! Helpers the encoder fixture tests share.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};

/// A file under the repository's tests/fixtures.
pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

/// A JSON file under tests/fixtures.
pub fn reference(rel: &str) -> Value {
    let text = std::fs::read_to_string(fixture(rel)).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// The token ids of each entry of a reference's `sequences`.
pub fn sequence_ids(r: &Value) -> Vec<Vec<u32>> {
    r["sequences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        })
        .collect()
}

/// Largest difference relative to the largest reference value, at most 1e-5.
pub fn check(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let diff = got
        .iter()
        .zip(want)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    let scale = want.iter().map(|y| y.abs()).fold(0f32, f32::max);
    let e = diff / scale.max(1e-30);
    assert!(e <= 1e-5, "{what}: relative error {e:e} > 1e-5");
}

/// A few positions of a `len`-token sequence: the last, the first and one in between.
pub fn positions(len: usize) -> Vec<usize> {
    let mut p = vec![len - 1, 0, len / 2];
    p.dedup();
    p
}

/// Rows `at` of `[len, width]` row-major `all`.
pub fn rows_of(all: &[f32], at: &[usize], width: usize) -> Vec<f32> {
    at.iter()
        .flat_map(|&r| all[r * width..(r + 1) * width].iter().copied())
        .collect()
}

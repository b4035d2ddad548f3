//! Shared by the tests that need the real models (the default model, all-MiniLM-L6-v2) or a
//! wgpu adapter.
#![allow(dead_code)]

use std::path::PathBuf;

/// The SmolLM2 GGUF (`CYB_SMOLLM2_GGUF`, else the runtime's default model path), or `None` with
/// a skip message when it is absent. Under CI (env `CI` set) a missing file fails the test.
pub fn smollm2() -> Option<PathBuf> {
    let p = std::env::var_os("CYB_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(cyb_runtime::default_model_path);
    if p.is_file() {
        return Some(p);
    }
    let msg = format!(
        "SmolLM2 GGUF not found at {}; run tools/fetch_smollm2.sh (or set CYB_SMOLLM2_GGUF)",
        p.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("skipping: {msg}");
    None
}

/// sentence-transformers' embeddings of tests/fixtures/minilm/sentences.txt.
pub struct MinilmReference {
    pub sentences: Vec<String>,
    pub dim: usize,
    /// `sentences.len() × dim`, row-major.
    pub want: Vec<f32>,
    /// Token count of each sentence.
    pub tokens: Vec<usize>,
}

pub fn minilm_reference() -> MinilmReference {
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/minilm");
    let text = std::fs::read_to_string(fixtures.join("sentences.txt")).unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("reference.json")).unwrap())
            .unwrap();
    let want = std::fs::read(fixtures.join("embeddings.bin"))
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    MinilmReference {
        sentences: text.lines().map(String::from).collect(),
        dim: doc["shape"][1].as_u64().unwrap() as usize,
        want,
        tokens: doc["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as usize)
            .collect(),
    }
}

/// Cosine similarity in f64.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

pub fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// Largest difference relative to the largest reference value.
pub fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    diff / b.iter().map(|y| y.abs()).fold(0f32, f32::max).max(1e-30)
}

/// The wgpu backend, or `None` (the test is skipped) where this machine has no adapter; under
/// CI a missing adapter fails the test.
#[cfg(feature = "wgpu")]
pub fn wgpu_backend() -> Option<std::sync::Arc<cyb_wgpu::WgpuBackend>> {
    match cyb_wgpu::WgpuBackend::new() {
        Ok(g) => Some(std::sync::Arc::new(g)),
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI and no wgpu adapter: {e}"
            );
            eprintln!("SKIPPED: no wgpu adapter ({e})");
            None
        }
    }
}

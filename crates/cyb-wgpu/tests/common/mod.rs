//! The backend under test, or a loud failure in CI when no adapter can be opened.

use cyb_wgpu::WgpuBackend;
use std::sync::{Arc, OnceLock};

/// The wgpu backend, shared by the tests of one binary. Without an adapter: a panic when the
/// environment variable `CI` is set (CI must never skip), else `None` and a message.
pub fn gpu() -> Option<Arc<WgpuBackend>> {
    static GPU: OnceLock<Option<Arc<WgpuBackend>>> = OnceLock::new();
    GPU.get_or_init(|| match WgpuBackend::new() {
        Ok(b) => {
            eprintln!("wgpu adapter: {}", b.adapter().summary());
            Some(Arc::new(b))
        }
        Err(e) => {
            if std::env::var_os("CI").is_some() {
                panic!("CI is set and the wgpu backend cannot start: {e}");
            }
            eprintln!("SKIPPED: no wgpu adapter ({e}); install mesa-vulkan-drivers");
            None
        }
    })
    .clone()
}

/// Deterministic pseudo-random values in [-1, 1) (xorshift64*).
#[allow(dead_code)] // not every test binary draws random inputs
pub fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let v = s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
            v as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// max|a - b| / max|b|.
#[allow(dead_code)]
pub fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    let scale = b.iter().map(|y| y.abs()).fold(0f32, f32::max);
    if scale == 0.0 {
        diff
    } else {
        diff / scale
    }
}

/// Index of the first largest value.
#[allow(dead_code)]
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

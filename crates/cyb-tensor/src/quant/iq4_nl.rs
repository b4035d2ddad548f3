//! IQ4_NL: 32 values as 4-bit indices into a fixed non-linear table, one f16 scale.
//!
//! Layout (18 B): f16 `d`, `qs[16]`; byte `j` holds the index of value `j` (low nibble) and of
//! value `j + 16` (high nibble); `x = d · TABLE[index]`. The table is denser near zero, where
//! most weights are.

use super::{read_f16, signed_absmax, write_f16};
use crate::quant::kquant_search::GROUP_MAX_EPS;

/// ggml's `kvalues_iq4nl`.
const TABLE: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Scales tried on each side of the first guess; ggml's `quantize_iq4_nl` (what
/// `llama-quantize` runs) uses 7.
const NTRY: i32 = 7;

pub(super) fn dequantize_iq4_nl(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    for j in 0..16 {
        let q = b[2 + j];
        out[j] = d * TABLE[(q & 0x0f) as usize] as f32;
        out[j + 16] = d * TABLE[(q >> 4) as usize] as f32;
    }
}

/// Index of the table entry nearest to `v` (the upper one on ties), by bisection.
fn nearest_index(v: f32) -> usize {
    if v <= TABLE[0] as f32 {
        return 0;
    }
    if v >= TABLE[15] as f32 {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if v < TABLE[mid] as f32 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if v - (TABLE[hi - 1] as f32) < TABLE[hi] as f32 - v {
        hi - 1
    } else {
        hi
    }
}

/// Weighted (`w = x²`) least-squares fit of `x ≈ d · TABLE[index(id · x)]`:
/// returns `(Σwqx, Σwq²)`.
fn fit(x: &[f32], id: f32) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for &v in x {
        let q = TABLE[nearest_index(id * v)] as f32;
        let w = v * v;
        sumqx += w * q * v;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// As ggml's `quantize_iq4_nl` without importance weights. The first guess maps the value of
/// largest magnitude to +127; then the inverse scales `(k - 127) / max` for `k` in `-7..=7`
/// (the sign-flipped mapping onto the table's longer negative side) are tried. Each guess is
/// refined to its least-squares scale and the one explaining the most weighted energy
/// `(Σwqx)² / Σwq²` wins; finally every value is indexed against the winning scale.
///
/// ggml's `quantize_row_iq4_nl_ref` runs the same search with no tries (`ntry = -1`) and keeps
/// the first guess's indices; we follow `llama-quantize` instead, which is the better fit.
pub(super) fn quantize_iq4_nl(x: &[f32], out: &mut [u8]) {
    let (max, amax) = signed_absmax(x);
    let mut d = 0f32;
    if amax >= GROUP_MAX_EPS {
        let first = -max / TABLE[0] as f32;
        let (sumqx, sumq2) = fit(x, 1.0 / first);
        d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -NTRY..=NTRY {
            let id = (itry + TABLE[0] as i32) as f32 / max;
            let (sumqx, sumq2) = fit(x, id);
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
    }
    write_f16(out, 0, d);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for j in 0..16 {
        let lo = nearest_index(id * x[j]) as u8;
        let hi = nearest_index(id * x[j + 16]) as u8;
        out[2 + j] = lo | (hi << 4);
    }
}

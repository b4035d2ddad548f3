//! `y = a · wᵀ` for F32, F16 and BF16 weights with f32 activations: weights are converted in
//! registers as they stream by (F16C / a 16-bit shift for BF16) and multiplied with FMA, up to
//! four activation rows per pass over a weight row.
//!
//! Each output is summed in a fixed order (two 8-lane partial sums over 16-value steps, then
//! one over an 8-value step, then the scalar tail) that does not depend on the number of rows
//! in the pass, so results never depend on tiling or threads.

// Kernels index several parallel arrays (rows, columns, groups) by one loop counter.
#![allow(clippy::needless_range_loop)]

use crate::matmul::blocks::value;
use cyb_tensor::DType;

/// Up to four rows `r0..r0 + nr` of `a` (`k` values each) against one weight row `w`.
pub type FDot = unsafe fn(w: &[u8], a: &[f32], k: usize, r0: usize, nr: usize, out: &mut [f32; 4]);

fn portable(dtype: DType, w: &[u8], a: &[f32], k: usize, r0: usize, nr: usize, out: &mut [f32; 4]) {
    let mut buf = [0f32; 64];
    let mut acc = [[0f32; 8]; 4];
    let mut tail = [0f32; 4];
    let full = k / 64 * 64;
    for c in (0..full).step_by(64) {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = value(dtype, w, c + i);
        }
        for (r, acc) in acc.iter_mut().enumerate().take(nr) {
            let x = &a[(r0 + r) * k + c..][..64];
            for (xs, ws) in x.chunks_exact(8).zip(buf.chunks_exact(8)) {
                for l in 0..8 {
                    acc[l] += xs[l] * ws[l];
                }
            }
        }
    }
    for i in full..k {
        let wv = value(dtype, w, i);
        for (r, t) in tail.iter_mut().enumerate().take(nr) {
            *t += a[(r0 + r) * k + i] * wv;
        }
    }
    for r in 0..nr {
        out[r] = acc[r].iter().sum::<f32>() + tail[r];
    }
}

macro_rules! portable_entry {
    ($name:ident, $dt:expr) => {
        unsafe fn $name(w: &[u8], a: &[f32], k: usize, r0: usize, nr: usize, out: &mut [f32; 4]) {
            portable($dt, w, a, k, r0, nr, out)
        }
    };
}
portable_entry!(portable_f32, DType::F32);
portable_entry!(portable_f16, DType::F16);
portable_entry!(portable_bf16, DType::BF16);

/// The kernel for weights of `dtype` in `set`.
pub fn kernel(dtype: DType, set: crate::features::KernelSet) -> Option<FDot> {
    #[cfg(target_arch = "x86_64")]
    if set >= crate::features::KernelSet::Avx2 {
        use super::float_x86 as x;
        return match dtype {
            DType::F32 => Some(x::f32_avx2),
            DType::F16 => Some(x::f16_avx2),
            DType::BF16 => Some(x::bf16_avx2),
            _ => None,
        };
    }
    #[cfg(target_arch = "aarch64")]
    if set == crate::features::KernelSet::Neon {
        use super::neon as n;
        return match dtype {
            DType::F32 => Some(n::f32_neon),
            DType::F16 => Some(n::f16_neon),
            DType::BF16 => Some(n::bf16_neon),
            _ => None,
        };
    }
    let _ = set;
    match dtype {
        DType::F32 => Some(portable_f32),
        DType::F16 => Some(portable_f16),
        DType::BF16 => Some(portable_bf16),
        _ => None,
    }
}

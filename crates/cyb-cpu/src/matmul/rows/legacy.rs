//! Dot products of the 32-value legacy formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against
//! activations quantized to 32-value 8-bit blocks, for up to four activation rows per pass over
//! one weight row (so each weight block is loaded once per four rows during prefill).
//!
//! Every format is written `x = d·q + off` with unsigned levels `q` (`off = -8d` for Q4_0,
//! `m` for Q4_1, `-16d` for Q5_0, `m` for Q5_1), so `Σ x·a = d·d_a·Σ q·q_a + off·(d_a·Σq_a)`:
//! the integer part is an unsigned × signed byte dot product, the offset part uses the
//! activation block's precomputed sum. Q8_0 has signed levels and no offset.
//!
//! Each row's result is computed by the same sequence of operations whatever the number of
//! rows in the pass, so results never depend on tiling or threads.

// Kernels index several parallel arrays (rows, columns, groups) by one loop counter.
#![allow(clippy::needless_range_loop)]

use crate::matmul::blocks::{columns, f16_at, unpack_legacy};
use crate::matmul::quant_act::QuantizedRows;
use cyb_tensor::DType;

/// Up to four weight rows (`nc`, each `row_bytes` apart in `w`) against up to four activation
/// rows `r0..r0 + nr`; the result of weight row `c` and activation row `r` goes to
/// `out[c * 4 + r]`.
pub type QDot = unsafe fn(
    w: &[u8],
    row_bytes: usize,
    nc: usize,
    a: &QuantizedRows,
    r0: usize,
    nr: usize,
    out: &mut [f32; 16],
);

fn portable_affine(
    dtype: DType,
    w: &[u8],
    a: &QuantizedRows,
    r0: usize,
    nr: usize,
    out: &mut [f32; 4],
) {
    let bb = dtype.block_bytes();
    let mut acc = [0f32; 4];
    for (bi, blk) in w.chunks_exact(bb).enumerate() {
        let (q, d, off) = unpack_legacy(dtype, blk);
        for (r, acc) in acc.iter_mut().enumerate().take(nr) {
            let row = r0 + r;
            let qa = &a.row(row)[bi * 32..bi * 32 + 32];
            let isum: i32 = q
                .iter()
                .zip(qa)
                .map(|(&x, &y)| i32::from(x) * i32::from(y))
                .sum();
            *acc += d * a.row_d(row)[bi] * isum as f32;
            *acc += off * a.row_s(row)[bi];
        }
    }
    out[..nr].copy_from_slice(&acc[..nr]);
}

fn portable_q8_0(_: DType, w: &[u8], a: &QuantizedRows, r0: usize, nr: usize, out: &mut [f32; 4]) {
    let mut acc = [0f32; 4];
    for (bi, blk) in w.chunks_exact(34).enumerate() {
        let d = f16_at(blk, 0);
        for (r, acc) in acc.iter_mut().enumerate().take(nr) {
            let row = r0 + r;
            let qa = &a.row(row)[bi * 32..bi * 32 + 32];
            let isum: i32 = blk[2..34]
                .iter()
                .zip(qa)
                .map(|(&x, &y)| i32::from(x as i8) * i32::from(y))
                .sum();
            *acc += d * a.row_d(row)[bi] * isum as f32;
        }
    }
    out[..nr].copy_from_slice(&acc[..nr]);
}

macro_rules! portable_entry {
    ($name:ident, $one:ident, $dt:expr) => {
        unsafe fn $name(
            w: &[u8],
            row_bytes: usize,
            nc: usize,
            a: &QuantizedRows,
            r0: usize,
            nr: usize,
            out: &mut [f32; 16],
        ) {
            columns($one, $dt, w, row_bytes, nc, a, r0, nr, out)
        }
    };
}
portable_entry!(portable_q4_0, portable_affine, DType::Q4_0);
portable_entry!(portable_q4_1, portable_affine, DType::Q4_1);
portable_entry!(portable_q5_0, portable_affine, DType::Q5_0);
portable_entry!(portable_q5_1, portable_affine, DType::Q5_1);
portable_entry!(portable_q8_0_entry, portable_q8_0, DType::Q8_0);

/// The kernel for `dtype` in `set`, if this file has one.
pub fn kernel(dtype: DType, set: crate::features::KernelSet) -> Option<QDot> {
    #[cfg(target_arch = "x86_64")]
    {
        use super::legacy_x86 as x;
        use crate::features::KernelSet::{Avx2, Avx512};
        let k: Option<QDot> = match (dtype, set) {
            (DType::Q4_0, Avx2) => Some(x::q4_0_avx2),
            (DType::Q4_1, Avx2) => Some(x::q4_1_avx2),
            (DType::Q5_0, Avx2) => Some(x::q5_0_avx2),
            (DType::Q5_1, Avx2) => Some(x::q5_1_avx2),
            (DType::Q8_0, Avx2) => Some(x::q8_0_avx2),
            (DType::Q4_0, Avx512) => Some(x::q4_0_vnni),
            (DType::Q4_1, Avx512) => Some(x::q4_1_vnni),
            (DType::Q5_0, Avx512) => Some(x::q5_0_vnni),
            (DType::Q5_1, Avx512) => Some(x::q5_1_vnni),
            (DType::Q8_0, Avx512) => Some(x::q8_0_vnni),
            _ => None,
        };
        if k.is_some() {
            return k;
        }
    }
    #[cfg(target_arch = "aarch64")]
    if set == crate::features::KernelSet::Neon {
        use super::neon as n;
        let k: Option<QDot> = match dtype {
            DType::Q4_0 => Some(n::q4_0_neon),
            DType::Q4_1 => Some(n::q4_1_neon),
            DType::Q5_0 => Some(n::q5_0_neon),
            DType::Q5_1 => Some(n::q5_1_neon),
            DType::Q8_0 => Some(n::q8_0_neon),
            _ => None,
        };
        return k;
    }
    let _ = set;
    match dtype {
        DType::Q4_0 => Some(portable_q4_0),
        DType::Q4_1 => Some(portable_q4_1),
        DType::Q5_0 => Some(portable_q5_0),
        DType::Q5_1 => Some(portable_q5_1),
        DType::Q8_0 => Some(portable_q8_0_entry),
        _ => None,
    }
}

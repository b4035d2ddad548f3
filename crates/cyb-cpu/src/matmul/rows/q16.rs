//! Dot products of the block formats against activations quantized to 16-bit levels
//! (`QuantizedRows::quantize16`): the portable kernels and the choice of kernel per set.
//!
//! The math is that of `legacy.rs` (32-value formats, `x = d·q + off`) and
//! `kquant.rs` (K-quants, per-16 scales and mins) with wider activation levels, except
//! that the 32-value formats' offset term uses the exact f32 sum of the activation block. Integer
//! sums stay exact: a 32-value block of levels `|q| ≤ 127` against `|q_a| ≤ 32767` is below
//! 2^27; the K-quants' scaled super-block sums go through i64 here (the SIMD kernels convert to
//! f32 before an i32 could overflow).

// Kernels index several parallel arrays (rows, columns, groups) by one loop counter.
#![allow(clippy::needless_range_loop)]

use super::kquant;
use super::legacy::QDot;
use crate::matmul::blocks::{f16_at, unpack_kquant, unpack_legacy};
use crate::matmul::quant_act::QuantizedRows;
use cyb_tensor::DType;

fn portable_legacy(
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
        let (q, d, off): ([i32; 32], f32, f32) = if dtype == DType::Q8_0 {
            (
                std::array::from_fn(|i| i32::from(blk[2 + i] as i8)),
                f16_at(blk, 0),
                0.0,
            )
        } else {
            let (q, d, off) = unpack_legacy(dtype, blk);
            (q.map(i32::from), d, off)
        };
        for (r, acc) in acc.iter_mut().enumerate().take(nr) {
            let row = r0 + r;
            let qa = &a.row16(row)[bi * 32..bi * 32 + 32];
            let isum: i32 = q.iter().zip(qa).map(|(&x, &y)| x * i32::from(y)).sum();
            *acc += d * a.row_d(row)[bi] * isum as f32;
            *acc += off * a.row_s(row)[bi];
        }
    }
    out[..nr].copy_from_slice(&acc[..nr]);
}

fn portable_kquant(
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
        let u = unpack_kquant(dtype, blk);
        for (r, acc) in acc.iter_mut().enumerate().take(nr) {
            let row = r0 + r;
            let qa = &a.row16(row)[bi * 256..(bi + 1) * 256];
            let bsums = &a.row_bsums(row)[bi * 16..(bi + 1) * 16];
            let (mut isum, mut msum) = (0i64, 0i64);
            for g in 0..16 {
                let s: i32 = u.q[g * 16..g * 16 + 16]
                    .iter()
                    .zip(&qa[g * 16..g * 16 + 16])
                    .map(|(&x, &y)| i32::from(x) * i32::from(y))
                    .sum();
                isum += i64::from(u.sc[g]) * i64::from(s);
                msum += i64::from(u.mn[g]) * i64::from(bsums[g]);
            }
            let da = a.row_d(row)[bi];
            *acc += u.d * da * isum as f32 - u.dmin * da * msum as f32;
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
            for c in 0..nc {
                let mut col = [0f32; 4];
                $one(
                    $dt,
                    &w[c * row_bytes..(c + 1) * row_bytes],
                    a,
                    r0,
                    nr,
                    &mut col,
                );
                out[c * 4..c * 4 + 4].copy_from_slice(&col);
            }
        }
    };
}
portable_entry!(portable_q4_0, portable_legacy, DType::Q4_0);
portable_entry!(portable_q4_1, portable_legacy, DType::Q4_1);
portable_entry!(portable_q5_0, portable_legacy, DType::Q5_0);
portable_entry!(portable_q5_1, portable_legacy, DType::Q5_1);
portable_entry!(portable_q8_0, portable_legacy, DType::Q8_0);
portable_entry!(portable_q2_k, portable_kquant, DType::Q2_K);
portable_entry!(portable_q3_k, portable_kquant, DType::Q3_K);
portable_entry!(portable_tq1_0, portable_kquant, DType::TQ1_0);
portable_entry!(portable_tq2_0, portable_kquant, DType::TQ2_0);
portable_entry!(portable_q4_k, portable_kquant, DType::Q4_K);
portable_entry!(portable_q5_k, portable_kquant, DType::Q5_K);
portable_entry!(portable_q6_k, portable_kquant, DType::Q6_K);

/// The 16-bit-activation kernel for `dtype` in `set` and its activation block (32 or 256).
pub fn kernel(dtype: DType, set: crate::features::KernelSet) -> Option<(QDot, usize)> {
    #[cfg(target_arch = "x86_64")]
    {
        use super::q16_x86 as x;
        use crate::features::KernelSet::{Avx2, Avx512};
        let k: Option<(QDot, usize)> = match (dtype, set) {
            (DType::Q4_0, Avx2) => Some((x::q4_0_avx2, 32)),
            (DType::Q4_1, Avx2) => Some((x::q4_1_avx2, 32)),
            (DType::Q5_0, Avx2) => Some((x::q5_0_avx2, 32)),
            (DType::Q5_1, Avx2) => Some((x::q5_1_avx2, 32)),
            (DType::Q8_0, Avx2) => Some((x::q8_0_avx2, 32)),
            (DType::Q4_0, Avx512) => Some((x::q4_0_vnni, 32)),
            (DType::Q4_1, Avx512) => Some((x::q4_1_vnni, 32)),
            (DType::Q5_0, Avx512) => Some((x::q5_0_vnni, 32)),
            (DType::Q5_1, Avx512) => Some((x::q5_1_vnni, 32)),
            (DType::Q8_0, Avx512) => Some((x::q8_0_vnni, 32)),
            (DType::Q4_K, Avx2 | Avx512) => Some((super::kquant16_avx2::q4_k_avx2, 256)),
            (DType::Q6_K, Avx2 | Avx512) => Some((super::kquant16_avx2::q6_k_avx2, 256)),
            _ => None,
        };
        if k.is_some() {
            return k;
        }
    }
    // The NEON set has no 16-bit-activation kernels of its own: where they are asked for
    // (CYB_CPU_ACT=q16; its default is q8, `ActPrecision::default_for`), the portable ones run.
    if kquant::repacked_only(dtype, set) {
        return None;
    }
    match dtype {
        DType::Q4_0 => Some((portable_q4_0, 32)),
        DType::Q4_1 => Some((portable_q4_1, 32)),
        DType::Q5_0 => Some((portable_q5_0, 32)),
        DType::Q5_1 => Some((portable_q5_1, 32)),
        DType::Q8_0 => Some((portable_q8_0, 32)),
        DType::Q2_K => Some((portable_q2_k, 256)),
        DType::Q3_K => Some((portable_q3_k, 256)),
        DType::TQ1_0 => Some((portable_tq1_0, 256)),
        DType::TQ2_0 => Some((portable_tq2_0, 256)),
        DType::Q4_K => Some((portable_q4_k, 256)),
        DType::Q5_K => Some((portable_q5_k, 256)),
        DType::Q6_K => Some((portable_q6_k, 256)),
        _ => None,
    }
}

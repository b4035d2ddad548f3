//! Dot products of the K-quants (Q2_K, Q4_K, Q5_K, Q6_K; 256-value super-blocks) against
//! activations quantized to 256-value 8-bit blocks with sums per 16 (`QuantizedRows` with
//! `block == 256`).
//!
//! Every format is written `x = d·sc[g]·q - dmin·mn[g]` for groups `g` of 16 values with
//! unsigned levels `q` and integer scales/mins (Q6_K: `sc` signed, `dmin·mn = d·32·sc`), so
//! `Σ x·a = d·d_a·Σ_g sc[g]·Σ q·q_a - dmin·d_a·Σ_g mn[g]·bsum[g]`: integer sums per group, two
//! float multiplies per super-block. Q3_K and the ternary formats fall back to the reference.

// Kernels index several parallel arrays (rows, columns, groups) by one loop counter.
#![allow(clippy::needless_range_loop)]

use super::legacy::QDot;
use crate::matmul::blocks::unpack_kquant;
use crate::matmul::quant_act::QuantizedRows;
use cyb_tensor::DType;

fn portable_one(
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
            let qa = &a.row(row)[bi * 256..(bi + 1) * 256];
            let bsums = &a.row_bsums(row)[bi * 16..(bi + 1) * 16];
            let (mut isum, mut msum) = (0i32, 0i32);
            for g in 0..16 {
                let s: i32 = u.q[g * 16..g * 16 + 16]
                    .iter()
                    .zip(&qa[g * 16..g * 16 + 16])
                    .map(|(&x, &y)| i32::from(x) * i32::from(y))
                    .sum();
                isum += u.sc[g] * s;
                msum += u.mn[g] * bsums[g];
            }
            let da = a.row_d(row)[bi];
            *acc += u.d * da * isum as f32 - u.dmin * da * msum as f32;
        }
    }
    out[..nr].copy_from_slice(&acc[..nr]);
}

macro_rules! portable_entry {
    ($name:ident, $dt:expr) => {
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
                portable_one(
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
portable_entry!(portable_q2_k, DType::Q2_K);
portable_entry!(portable_q3_k, DType::Q3_K);
portable_entry!(portable_tq1_0, DType::TQ1_0);
portable_entry!(portable_tq2_0, DType::TQ2_0);
portable_entry!(portable_q4_k, DType::Q4_K);
portable_entry!(portable_q5_k, DType::Q5_K);
portable_entry!(portable_q6_k, DType::Q6_K);

/// Formats that on `set` only the repacked GEMM (`gemm/mod.rs`) reads, with no per-row kernel
/// (neither here nor in `q16.rs`): Q3_K and the ternary formats on AVX-512.
pub(crate) fn repacked_only(dtype: DType, set: crate::features::KernelSet) -> bool {
    matches!(dtype, DType::Q3_K | DType::TQ1_0 | DType::TQ2_0)
        && set == crate::features::KernelSet::Avx512
}

/// The kernel for `dtype` in `set`, if this file has one.
pub fn kernel(dtype: DType, set: crate::features::KernelSet) -> Option<QDot> {
    if repacked_only(dtype, set) {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    if set >= crate::features::KernelSet::Avx2 {
        match dtype {
            DType::Q4_K => return Some(super::kquant_avx2::q4_k_avx2),
            DType::Q6_K => return Some(super::kquant_avx2::q6_k_avx2),
            _ => {}
        }
    }
    #[cfg(target_arch = "x86_64")]
    if set == crate::features::KernelSet::Avx2 {
        use super::kquant_avx2 as x;
        match dtype {
            DType::Q2_K => return Some(x::q2_k_avx2),
            DType::Q3_K => return Some(x::q3_k_avx2),
            DType::Q5_K => return Some(x::q5_k_avx2),
            DType::TQ1_0 => return Some(x::tq1_0_avx2),
            DType::TQ2_0 => return Some(x::tq2_0_avx2),
            _ => {}
        }
    }
    #[cfg(target_arch = "aarch64")]
    if set == crate::features::KernelSet::Neon {
        use super::neon as n;
        return match dtype {
            DType::Q2_K => Some(n::q2_k_neon),
            DType::Q3_K => Some(n::q3_k_neon),
            DType::TQ1_0 => Some(n::tq1_0_neon),
            DType::TQ2_0 => Some(n::tq2_0_neon),
            DType::Q4_K => Some(n::q4_k_neon),
            DType::Q5_K => Some(n::q5_k_neon),
            DType::Q6_K => Some(n::q6_k_neon),
            _ => None,
        };
    }
    let _ = set;
    match dtype {
        DType::Q2_K => Some(portable_q2_k),
        DType::Q3_K => Some(portable_q3_k),
        DType::TQ1_0 => Some(portable_tq1_0),
        DType::TQ2_0 => Some(portable_tq2_0),
        DType::Q4_K => Some(portable_q4_k),
        DType::Q5_K => Some(portable_q5_k),
        DType::Q6_K => Some(portable_q6_k),
        _ => None,
    }
}

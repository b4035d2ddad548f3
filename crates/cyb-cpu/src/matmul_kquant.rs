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

use crate::matmul_q4::QDot;
use crate::quant_act::QuantizedRows;
use cyb_tensor::DType;
use half::f16;

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// One unpacked super-block: levels, per-16 scales and mins, `d`, `dmin`.
pub(crate) struct Unpacked {
    pub q: [u8; 256],
    pub sc: [i32; 16],
    pub mn: [i32; 16],
    pub d: f32,
    pub dmin: f32,
}

/// Q4_K/Q5_K six-bit (scale, min) of 32-value group `j`.
pub(crate) fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

pub(crate) fn unpack(dtype: DType, b: &[u8]) -> Unpacked {
    let mut u = Unpacked {
        q: [0; 256],
        sc: [0; 16],
        mn: [0; 16],
        d: 0.0,
        dmin: 0.0,
    };
    match dtype {
        DType::Q2_K => {
            let (scales, qs) = (&b[0..16], &b[16..80]);
            u.d = f16_at(b, 80);
            u.dmin = f16_at(b, 82);
            for g in 0..16 {
                u.sc[g] = i32::from(scales[g] & 0x0f);
                u.mn[g] = i32::from(scales[g] >> 4);
            }
            for (i, q) in u.q.iter_mut().enumerate() {
                let (half, within) = (i / 128, i % 128);
                *q = (qs[32 * half + within % 32] >> (2 * (within / 32))) & 3;
            }
        }
        DType::Q3_K => {
            // d·(s - 32)·(q - 4) with q = two low bits + 4·hmask bit: sc = s - 32, mn = 4·sc.
            u.d = f16_at(b, 108);
            u.dmin = u.d;
            let scales = crate::repack::q3_k_scales(&b[96..108]);
            for g in 0..16 {
                u.sc[g] = i32::from(scales[g]) - 32;
                u.mn[g] = 4 * u.sc[g];
            }
            u.q = crate::repack::low_levels(&b[32..96], Some(&b[0..32]));
        }
        DType::TQ1_0 | DType::TQ2_0 => {
            // d·(q - 1) with levels q in 0..=2 (as the repacked GEMM takes them).
            u.d = f16_at(b, crate::repack::ternary_scale_at(dtype));
            u.dmin = u.d;
            u.sc = [1; 16];
            u.mn = [1; 16];
            u.q = crate::repack::ternary_levels(dtype, b);
        }
        DType::Q4_K | DType::Q5_K => {
            u.d = f16_at(b, 0);
            u.dmin = f16_at(b, 2);
            let scales = &b[4..16];
            let (qh, qs) = if dtype == DType::Q5_K {
                (Some(&b[16..48]), &b[48..176])
            } else {
                (None, &b[16..144])
            };
            for j in 0..8 {
                let (s, m) = scale_min_k4(j, scales);
                u.sc[2 * j] = i32::from(s);
                u.sc[2 * j + 1] = i32::from(s);
                u.mn[2 * j] = i32::from(m);
                u.mn[2 * j + 1] = i32::from(m);
            }
            for (i, q) in u.q.iter_mut().enumerate() {
                let byte = 32 * (i / 64) + i % 32;
                let shift = if i % 64 < 32 { 0 } else { 4 };
                *q = (qs[byte] >> shift) & 0x0f;
                if let Some(qh) = qh {
                    *q |= ((qh[i % 32] >> (i / 32)) & 1) << 4;
                }
            }
        }
        _ => {
            // Q6_K
            let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
            u.d = f16_at(b, 208);
            u.dmin = u.d * 32.0;
            for g in 0..16 {
                u.sc[g] = i32::from(scales[g] as i8);
                u.mn[g] = u.sc[g];
            }
            for (i, q) in u.q.iter_mut().enumerate() {
                let (half, s, l) = (i / 128, (i % 128) / 32, i % 32);
                let lo = (ql[64 * half + 32 * (s % 2) + l] >> if s < 2 { 0 } else { 4 }) & 0x0f;
                let hi = (qh[32 * half + l] >> (2 * s)) & 3;
                *q = lo | (hi << 4);
            }
        }
    }
    u
}

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
        let u = unpack(dtype, blk);
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

/// Formats that on `set` only the repacked GEMM (`gemm.rs`) reads, with no per-row kernel
/// (neither here nor in `matmul_q16`): Q3_K and the ternary formats on AVX-512.
pub(crate) fn repacked_only(dtype: DType, set: crate::KernelSet) -> bool {
    matches!(dtype, DType::Q3_K | DType::TQ1_0 | DType::TQ2_0) && set == crate::KernelSet::Avx512
}

/// The kernel for `dtype` in `set`, if this file has one.
pub fn kernel(dtype: DType, set: crate::KernelSet) -> Option<QDot> {
    if repacked_only(dtype, set) {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    if set >= crate::KernelSet::Avx2 {
        match dtype {
            DType::Q4_K => return Some(crate::matmul_kquant_x86::q4_k_avx2),
            DType::Q6_K => return Some(crate::matmul_kquant_x86::q6_k_avx2),
            _ => {}
        }
    }
    #[cfg(target_arch = "x86_64")]
    if set == crate::KernelSet::Avx2 {
        use crate::matmul_kquant_x86 as x;
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
    if set == crate::KernelSet::Neon {
        use crate::neon_arm as n;
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

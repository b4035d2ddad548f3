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

use crate::quant_act::QuantizedRows;
use cyb_tensor::DType;
use half::f16;

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

pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// A legacy block's scale, offset, 16 bytes of nibbles and (Q5) fifth bits.
pub(crate) fn fields(dtype: DType, b: &[u8]) -> (f32, f32, &[u8], Option<u32>) {
    match dtype {
        DType::Q4_0 => {
            let d = f16_at(b, 0);
            (d, -8.0 * d, &b[2..18], None)
        }
        DType::Q4_1 => (f16_at(b, 0), f16_at(b, 2), &b[4..20], None),
        DType::Q5_0 => {
            let d = f16_at(b, 0);
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            (d, -16.0 * d, &b[6..22], Some(qh))
        }
        _ => {
            let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
            (f16_at(b, 0), f16_at(b, 2), &b[8..24], Some(qh))
        }
    }
}

/// The unsigned levels, scale and offset of one legacy block.
pub(crate) fn unpack(dtype: DType, b: &[u8]) -> ([u8; 32], f32, f32) {
    let mut q = [0u8; 32];
    let (d, off, qs, qh) = fields(dtype, b);
    for j in 0..16 {
        q[j] = qs[j] & 0x0f;
        q[j + 16] = qs[j] >> 4;
        if let Some(h) = qh {
            q[j] |= (((h >> j) & 1) as u8) << 4;
            q[j + 16] |= (((h >> (j + 16)) & 1) as u8) << 4;
        }
    }
    (q, d, off)
}

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
        let (q, d, off) = unpack(dtype, blk);
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

/// Runs a one-weight-row kernel over `nc` weight rows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn columns(
    one: fn(DType, &[u8], &QuantizedRows, usize, usize, &mut [f32; 4]),
    dtype: DType,
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
        one(
            dtype,
            &w[c * row_bytes..(c + 1) * row_bytes],
            a,
            r0,
            nr,
            &mut col,
        );
        out[c * 4..c * 4 + 4].copy_from_slice(&col);
    }
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
pub fn kernel(dtype: DType, set: crate::KernelSet) -> Option<QDot> {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::matmul_q4_x86 as x;
        use crate::KernelSet::{Avx2, Avx512};
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
    if set == crate::KernelSet::Neon {
        use crate::neon_arm as n;
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

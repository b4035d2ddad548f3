//! The NEON kernel set (aarch64): the per-row matmul kernels of `legacy.rs` (legacy 32-value
//! formats), `kquant.rs` (K-quants) and `float.rs` (F32/F16/BF16), with the
//! integer dot products and float conversions in NEON registers.
//!
//! Quantized weights meet 8-bit activations (as on llama.cpp's ARM path): levels are widened
//! with `smull`/`smull2` and pairwise-accumulated into 32-bit lanes (baseline NEON; no `sdot`,
//! which not every ARMv8 core has). Every output is summed in the same order as the portable
//! kernel's, whatever the number of rows in the pass, so results do not depend on tiling or
//! threads. F16 is widened by bit arithmetic (Rust's NEON `f16` vector types are unstable).

// Kernels index several parallel arrays (rows, columns, groups) by one loop counter.
#![allow(clippy::needless_range_loop)]

use crate::matmul::blocks::{columns, f16_at, fields, unpack_kquant, value};
use crate::matmul::quant_act::QuantizedRows;
use cyb_tensor::DType;
use std::arch::aarch64::*;

/// Σ x·y over 16 levels each (|x|, |y| ≤ 128: the products fit 16 bits).
#[inline(always)]
fn dot16(x: int8x16_t, y: int8x16_t) -> i32 {
    // SAFETY: NEON is part of the aarch64 baseline this module is compiled for.
    unsafe {
        let lo = vmull_s8(vget_low_s8(x), vget_low_s8(y));
        let hi = vmull_high_s8(x, y);
        vaddvq_s32(vpadalq_s16(vpaddlq_s16(lo), hi))
    }
}

/// 16 signed levels from `b[..16]`.
#[inline(always)]
fn load16(b: &[u8]) -> int8x16_t {
    assert!(b.len() >= 16);
    // SAFETY: 16 bytes are readable (checked above).
    unsafe { vreinterpretq_s8_u8(vld1q_u8(b.as_ptr())) }
}

/// 16 activation levels from `a[..16]`.
#[inline(always)]
fn load_act(a: &[i8]) -> int8x16_t {
    assert!(a.len() >= 16);
    // SAFETY: 16 values are readable (checked above).
    unsafe { vld1q_s8(a.as_ptr()) }
}

/// The bit of `bits` (one byte per lane: 16 bits of a Q5 `qh` word, low byte first) for each
/// of 16 values, as 0x10 where set.
#[inline(always)]
fn fifth_bits(bits: u16) -> uint8x16_t {
    const MASK: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: NEON baseline; MASK is 16 bytes.
    unsafe {
        let bytes = vcombine_u8(vdup_n_u8(bits as u8), vdup_n_u8((bits >> 8) as u8));
        let set = vtstq_u8(bytes, vld1q_u8(MASK.as_ptr()));
        vandq_u8(set, vdupq_n_u8(0x10))
    }
}

/// The unsigned levels of one legacy block (values 0–15 low, 16–31 high) with its scale and
/// offset, as `blocks::unpack_legacy` gives them.
#[inline(always)]
fn legacy_levels(dtype: DType, b: &[u8]) -> (int8x16_t, int8x16_t, f32, f32) {
    let (d, off, qs, qh) = fields(dtype, b);
    assert!(qs.len() >= 16);
    // SAFETY: NEON baseline; `qs` holds 16 bytes (checked above).
    unsafe {
        let packed = vld1q_u8(qs.as_ptr());
        let mut lo = vandq_u8(packed, vdupq_n_u8(0x0f));
        let mut hi = vshrq_n_u8(packed, 4);
        if let Some(h) = qh {
            lo = vorrq_u8(lo, fifth_bits(h as u16));
            hi = vorrq_u8(hi, fifth_bits((h >> 16) as u16));
        }
        (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), d, off)
    }
}

/// One weight row of a legacy format against rows `r0..r0 + nr`: `legacy.rs`'s portable
/// kernel, same float operations in the same order.
fn legacy_one(dtype: DType, w: &[u8], a: &QuantizedRows, r0: usize, nr: usize, out: &mut [f32; 4]) {
    let bb = dtype.block_bytes();
    let mut acc = [0f32; 4];
    for (bi, blk) in w.chunks_exact(bb).enumerate() {
        if dtype == DType::Q8_0 {
            let d = f16_at(blk, 0);
            let (x0, x1) = (load16(&blk[2..]), load16(&blk[18..]));
            for (r, acc) in acc.iter_mut().enumerate().take(nr) {
                let row = r0 + r;
                let qa = &a.row(row)[bi * 32..bi * 32 + 32];
                let isum = dot16(x0, load_act(qa)) + dot16(x1, load_act(&qa[16..]));
                *acc += d * a.row_d(row)[bi] * isum as f32;
            }
            continue;
        }
        let (lo, hi, d, off) = legacy_levels(dtype, blk);
        for (r, acc) in acc.iter_mut().enumerate().take(nr) {
            let row = r0 + r;
            let qa = &a.row(row)[bi * 32..bi * 32 + 32];
            let isum = dot16(lo, load_act(qa)) + dot16(hi, load_act(&qa[16..]));
            *acc += d * a.row_d(row)[bi] * isum as f32;
            *acc += off * a.row_s(row)[bi];
        }
    }
    out[..nr].copy_from_slice(&acc[..nr]);
}

/// One weight row of a K-quant against rows `r0..r0 + nr`: `kquant.rs`'s portable kernel
/// (its scalar unpacking), the 16-value dot products in NEON.
fn kquant_one(dtype: DType, w: &[u8], a: &QuantizedRows, r0: usize, nr: usize, out: &mut [f32; 4]) {
    let bb = dtype.block_bytes();
    let mut acc = [0f32; 4];
    for (bi, blk) in w.chunks_exact(bb).enumerate() {
        let u = unpack_kquant(dtype, blk);
        let q: [int8x16_t; 16] = std::array::from_fn(|g| load16(&u.q[g * 16..]));
        for (r, acc) in acc.iter_mut().enumerate().take(nr) {
            let row = r0 + r;
            let qa = &a.row(row)[bi * 256..(bi + 1) * 256];
            let bsums = &a.row_bsums(row)[bi * 16..(bi + 1) * 16];
            let (mut isum, mut msum) = (0i32, 0i32);
            for g in 0..16 {
                isum += u.sc[g] * dot16(q[g], load_act(&qa[g * 16..]));
                msum += u.mn[g] * bsums[g];
            }
            let da = a.row_d(row)[bi];
            *acc += u.d * da * isum as f32 - u.dmin * da * msum as f32;
        }
    }
    out[..nr].copy_from_slice(&acc[..nr]);
}

macro_rules! quant_entry {
    ($name:ident, $one:ident, $dt:expr) => {
        pub(crate) unsafe fn $name(
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
quant_entry!(q4_0_neon, legacy_one, DType::Q4_0);
quant_entry!(q4_1_neon, legacy_one, DType::Q4_1);
quant_entry!(q5_0_neon, legacy_one, DType::Q5_0);
quant_entry!(q5_1_neon, legacy_one, DType::Q5_1);
quant_entry!(q8_0_neon, legacy_one, DType::Q8_0);
quant_entry!(q2_k_neon, kquant_one, DType::Q2_K);
quant_entry!(q3_k_neon, kquant_one, DType::Q3_K);
quant_entry!(tq1_0_neon, kquant_one, DType::TQ1_0);
quant_entry!(tq2_0_neon, kquant_one, DType::TQ2_0);
quant_entry!(q4_k_neon, kquant_one, DType::Q4_K);
quant_entry!(q5_k_neon, kquant_one, DType::Q5_K);
quant_entry!(q6_k_neon, kquant_one, DType::Q6_K);

/// Four f16 values (in the low halves of `x`) as f32, exactly (subnormals, infinities and NaN
/// included).
#[inline(always)]
fn f16x4(x: uint32x4_t) -> float32x4_t {
    // SAFETY: NEON baseline.
    unsafe {
        let sign = vshlq_n_u32(vandq_u32(x, vdupq_n_u32(0x8000)), 16);
        let em = vandq_u32(x, vdupq_n_u32(0x7fff));
        // The exponent and mantissa shifted into f32 position are the value times 2^-112
        // (subnormals too); the product restores it exactly.
        let scaled = vmulq_f32(
            vreinterpretq_f32_u32(vshlq_n_u32(em, 13)),
            vdupq_n_f32(f32::from_bits((127 + 112) << 23)),
        );
        let special = vcgeq_u32(em, vdupq_n_u32(0x7c00));
        let inf_nan = vorrq_u32(vshlq_n_u32(em, 13), vdupq_n_u32(0x7f80_0000));
        let bits = vbslq_u32(special, inf_nan, vreinterpretq_u32_f32(scaled));
        vreinterpretq_f32_u32(vorrq_u32(bits, sign))
    }
}

/// Eight weights from `w` (element `i` on), as f32.
#[inline(always)]
fn weights8(dtype: DType, w: &[u8], i: usize) -> (float32x4_t, float32x4_t) {
    // SAFETY: NEON baseline; the asserts keep every load inside `w`.
    unsafe {
        match dtype {
            DType::F32 => {
                assert!(w.len() >= 4 * (i + 8));
                let p = w.as_ptr().add(4 * i) as *const f32;
                (vld1q_f32(p), vld1q_f32(p.add(4)))
            }
            _ => {
                assert!(w.len() >= 2 * (i + 8));
                let h = vld1q_u16(w.as_ptr().add(2 * i) as *const u16);
                let (lo, hi) = (vmovl_u16(vget_low_u16(h)), vmovl_high_u16(h));
                if dtype == DType::BF16 {
                    (
                        vreinterpretq_f32_u32(vshlq_n_u32(lo, 16)),
                        vreinterpretq_f32_u32(vshlq_n_u32(hi, 16)),
                    )
                } else {
                    (f16x4(lo), f16x4(hi))
                }
            }
        }
    }
}

/// `float.rs`'s portable kernel in NEON: eight lanes per row over 8-value steps, summed
/// across lanes at the end, then the scalar tail.
fn float_one(
    dtype: DType,
    w: &[u8],
    a: &[f32],
    k: usize,
    r0: usize,
    nr: usize,
    out: &mut [f32; 4],
) {
    let full = k / 8 * 8;
    // SAFETY: NEON baseline; activation loads stay inside `a` (asserted).
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); 2]; 4];
        for c in (0..full).step_by(8) {
            let (w0, w1) = weights8(dtype, w, c);
            for r in 0..nr {
                let x = &a[(r0 + r) * k + c..][..8];
                acc[r][0] = vfmaq_f32(acc[r][0], vld1q_f32(x.as_ptr()), w0);
                acc[r][1] = vfmaq_f32(acc[r][1], vld1q_f32(x.as_ptr().add(4)), w1);
            }
        }
        for r in 0..nr {
            let mut s = vaddvq_f32(vaddq_f32(acc[r][0], acc[r][1]));
            for i in full..k {
                s += a[(r0 + r) * k + i] * value(dtype, w, i);
            }
            out[r] = s;
        }
    }
}

macro_rules! float_entry {
    ($name:ident, $dt:expr) => {
        pub(crate) unsafe fn $name(
            w: &[u8],
            a: &[f32],
            k: usize,
            r0: usize,
            nr: usize,
            out: &mut [f32; 4],
        ) {
            float_one($dt, w, a, k, r0, nr, out)
        }
    };
}
float_entry!(f32_neon, DType::F32);
float_entry!(f16_neon, DType::F16);
float_entry!(bf16_neon, DType::BF16);

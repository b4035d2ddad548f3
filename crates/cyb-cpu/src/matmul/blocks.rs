//! The packed GGUF blocks read value by value: the scalar decoders of every block format, written
//! once for every kernel set. The portable kernels (`rows/legacy.rs`, `rows/kquant.rs`,
//! `rows/q16.rs`, `rows/float.rs`), the NEON kernels (`rows/neon.rs`), the AVX2 kernels of the
//! rarer K-quants (`rows/kquant_avx2.rs`) and the repacking for the GEMM (`gemm/repack.rs`) all
//! take a block's scales, nibbles and high bits from here, so each layout is spelled out once.
//!
//! A leaf: it uses nothing of this crate but `quant_act.rs`.

// Kernels index several parallel arrays (rows, columns, groups) by one loop counter.
#![allow(clippy::needless_range_loop)]

use super::quant_act::QuantizedRows;
use cyb_tensor::DType;
use half::{bf16, f16};

// ---- The 32-value legacy formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)

/// The little-endian f16 at byte `at` of `b`.
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
pub(crate) fn unpack_legacy(dtype: DType, b: &[u8]) -> ([u8; 32], f32, f32) {
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

// ---- The K-quants (256-value super-blocks) and the ternary formats

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

/// The levels, scales and mins of one K-quant (or ternary) super-block.
pub(crate) fn unpack_kquant(dtype: DType, b: &[u8]) -> Unpacked {
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
            let scales = q3_k_scales(&b[96..108]);
            for g in 0..16 {
                u.sc[g] = i32::from(scales[g]) - 32;
                u.mn[g] = 4 * u.sc[g];
            }
            u.q = low_levels(&b[32..96], Some(&b[0..32]));
        }
        DType::TQ1_0 | DType::TQ2_0 => {
            // d·(q - 1) with levels q in 0..=2 (as the repacked GEMM takes them).
            u.d = f16_at(b, ternary_scale_at(dtype));
            u.dmin = u.d;
            u.sc = [1; 16];
            u.mn = [1; 16];
            u.q = ternary_levels(dtype, b);
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

/// The 256 six-bit levels of a Q6_K block, in value order.
pub(super) fn q6_k_levels(b: &[u8]) -> [u8; 256] {
    let (ql, qh) = (&b[0..128], &b[128..192]);
    let mut q = [0u8; 256];
    for half in 0..2 {
        let (ql, qh, q) = (&ql[64 * half..], &qh[32 * half..], &mut q[128 * half..]);
        for l in 0..32 {
            let (a, c, h) = (ql[l], ql[l + 32], qh[l]);
            q[l] = (a & 0x0f) | ((h & 3) << 4);
            q[l + 32] = (c & 0x0f) | (((h >> 2) & 3) << 4);
            q[l + 64] = (a >> 4) | (((h >> 4) & 3) << 4);
            q[l + 96] = (c >> 4) | (((h >> 6) & 3) << 4);
        }
    }
    q
}

/// The 256 levels of a Q2_K/Q3_K block in value order: two bits from the planes `qs` (byte
/// `32·h + l` holds value `128·h + 32·s + l` at bit `2·s`), plus 4 where Q3_K's `hmask` bit is
/// set (bit `b` of `hmask[l]` belongs to value `32·b + l`).
pub(crate) fn low_levels(qs: &[u8], hmask: Option<&[u8]>) -> [u8; 256] {
    let mut q = [0u8; 256];
    for (i, l) in q.iter_mut().enumerate() {
        let (half, within) = (i / 128, i % 128);
        *l = (qs[32 * half + within % 32] >> (2 * (within / 32))) & 3;
        if let Some(h) = hmask {
            *l |= ((h[i % 32] >> (i / 32)) & 1) << 2;
        }
    }
    q
}

/// Byte offset of a TQ1_0/TQ2_0 block's f16 scale.
pub(crate) fn ternary_scale_at(dtype: DType) -> usize {
    if dtype == DType::TQ1_0 {
        52
    } else {
        64
    }
}

/// The 256 levels `q + 1` (0, 1 or 2) of a TQ1_0/TQ2_0 block, from its values (`d·(q - 1)` is
/// exact for q - 1 in {-1, 0, 1}), so every packing shares cyb-tensor's one reading of them.
pub(crate) fn ternary_levels(dtype: DType, b: &[u8]) -> [u8; 256] {
    let at = ternary_scale_at(dtype);
    let d = half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32();
    let mut x = [0f32; 256];
    match cyb_tensor::quant::dequantize(dtype, b, &mut x) {
        Ok(()) if d != 0.0 => std::array::from_fn(|i| ((x[i] / d).round() + 1.0) as u8),
        _ => [1; 256],
    }
}

/// The 16 biased six-bit Q3_K scales (`0..64`) of the packed `s` (12 bytes).
pub(crate) fn q3_k_scales(s: &[u8]) -> [u8; 16] {
    std::array::from_fn(|j| {
        let low = if j < 8 { s[j] & 0x0f } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        low | (high << 4)
    })
}

// ---- Float weights

/// Value `i` of a float weight row (F32, F16 or BF16 bytes) as f32.
pub(crate) fn value(dtype: DType, w: &[u8], i: usize) -> f32 {
    match dtype {
        DType::F16 => f16::from_le_bytes([w[2 * i], w[2 * i + 1]]).to_f32(),
        DType::BF16 => bf16::from_le_bytes([w[2 * i], w[2 * i + 1]]).to_f32(),
        _ => f32::from_le_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]),
    }
}

// ---- Running a one-weight-row kernel

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

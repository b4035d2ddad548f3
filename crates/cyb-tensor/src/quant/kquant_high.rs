//! Q4_K, Q5_K (8 sub-blocks of 32, six-bit scales and mins) and Q6_K (16 sub-blocks of 16).
//!
//! Q4_K (144 B): f16 `d`, f16 `dmin`, `scales[12]`, `qs[128]`; `x = d·sc·q - dmin·m`.
//! Q5_K (176 B): f16 `d`, f16 `dmin`, `scales[12]`, `qh[32]`, `qs[128]`; as Q4_K with a fifth
//! bit: bit `b` of `qh[l]` belongs to value `32·b + l`.
//! The nibbles: byte `32·p + l` of `qs` holds value `64·p + l` (low) and `64·p + 32 + l` (high).
//! The twelve scale bytes hold eight six-bit (scale, min) pairs: pairs 0-3 in the low six bits
//! of bytes 0-3 (scale) and 4-7 (min); pairs 4-7 in the nibbles of bytes 8-11 with their top two
//! bits in the high bits of bytes 0-3 (scale) and 4-7 (min).
//!
//! Q6_K (210 B): `ql[128]` (low nibbles), `qh[64]` (high two bits), `scales[16]` (i8), f16 `d`;
//! `x = d·sc·(q - 32)`. In each 128-value half `h`: value `32·s + l` (s in 0..4) has its low
//! nibble in `ql[64·h + 32·(s % 2) + l]` (low nibble for s < 2, high for s ≥ 2) and its high
//! bits at bit `2·s` of `qh[32·h + l]`.

use super::kquant_search::{affine_weighted, symmetric_weighted, AffineSearch, GROUP_MAX_EPS};
use super::{nearest_int, read_f16, write_f16};

const QK_K: usize = 256;

/// The (scale, min) pair of sub-block `j` from the twelve packed bytes.
fn scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        let sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        let m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        (sc, m)
    }
}

fn pack_scale_mins(ls: &[u8; 8], lm: &[u8; 8], s: &mut [u8]) {
    s[..12].fill(0);
    for j in 0..8 {
        if j < 4 {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (ls[j] & 0x0f) | ((lm[j] & 0x0f) << 4);
            s[j - 4] |= (ls[j] >> 4) << 6;
            s[j] |= (lm[j] >> 4) << 6;
        }
    }
}

/// Value index → (byte, shift) of the nibble planes of Q4_K and Q5_K.
fn nibble_pos(i: usize) -> (usize, u32) {
    (32 * (i / 64) + i % 32, if i % 64 < 32 { 0 } else { 4 })
}

fn dequantize_k_affine(b: &[u8], qh: Option<&[u8]>, qs: &[u8], out: &mut [f32]) {
    let (d, dmin) = (read_f16(b, 0), read_f16(b, 2));
    let scales = &b[4..16];
    for (i, o) in out.iter_mut().enumerate().take(QK_K) {
        let (sc, m) = scale_min(i / 32, scales);
        let (byte, shift) = nibble_pos(i);
        let mut q = (qs[byte] >> shift) & 0x0f;
        if let Some(qh) = qh {
            q |= ((qh[i % 32] >> (i / 32)) & 1) << 4;
        }
        *o = d * sc as f32 * q as f32 - dmin * m as f32;
    }
}

pub(super) fn dequantize_q4_k(b: &[u8], out: &mut [f32]) {
    dequantize_k_affine(b, None, &b[16..144], out);
}

pub(super) fn dequantize_q5_k(b: &[u8], out: &mut [f32]) {
    dequantize_k_affine(b, Some(&b[16..48]), &b[48..176], out);
}

/// The shared Q4_K/Q5_K quantizer: per-sub-block affine search weighted by `rms + |x|`,
/// six-bit scales and mins relative to the largest of each, then every value re-rounded
/// against the stored scales. Returns the levels (`0..=nmax`); writes `d`, `dmin`, scales.
fn quantize_k_affine(x: &[f32], search: &AffineSearch, out: &mut [u8]) -> [u8; QK_K] {
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let mut weights = [0f32; 32];
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (scale, min) = affine_weighted(xs, &weights, search, &mut levels[32 * j..32 * j + 32]);
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        // Truncation to u8 before the clamp, as ggml: a negative scale ends up at 63.
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    pack_scale_mins(&ls, &lm, &mut out[4..16]);
    let d = write_f16(out, 0, max_scale / 63.0);
    let dmin = write_f16(out, 2, max_min / 63.0);

    let nmax = search.nmax;
    for j in 0..8 {
        let (sc, m) = scale_min(j, &out[4..16]);
        let dl = d * sc as f32;
        if dl == 0.0 {
            continue;
        }
        let dm = dmin * m as f32;
        for ii in 0..32 {
            levels[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / dl).clamp(0, nmax) as u8;
        }
    }
    levels
}

fn pack_nibbles(levels: &[u8; QK_K], qs: &mut [u8]) {
    qs[..128].fill(0);
    for (i, &l) in levels.iter().enumerate() {
        let (byte, shift) = nibble_pos(i);
        qs[byte] |= (l & 0x0f) << shift;
    }
}

pub(super) fn quantize_q4_k(x: &[f32], out: &mut [u8]) {
    let search = AffineSearch {
        nmax: 15,
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    let levels = quantize_k_affine(x, &search, out);
    pack_nibbles(&levels, &mut out[16..144]);
}

pub(super) fn quantize_q5_k(x: &[f32], out: &mut [u8]) {
    let search = AffineSearch {
        nmax: 31,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    let levels = quantize_k_affine(x, &search, out);
    let qh = &mut out[16..48];
    qh.fill(0);
    for (i, &l) in levels.iter().enumerate() {
        qh[i % 32] |= ((l >> 4) & 1) << (i / 32);
    }
    pack_nibbles(&levels, &mut out[48..176]);
}

/// Value index → (ql byte, ql shift, qh byte, qh shift) of Q6_K.
fn q6_pos(i: usize) -> (usize, u32, usize, u32) {
    let (half, s, l) = (i / 128, (i % 128) / 32, i % 32);
    let ql_byte = 64 * half + 32 * (s % 2) + l;
    let ql_shift = if s < 2 { 0 } else { 4 };
    (ql_byte, ql_shift, 32 * half + l, 2 * s as u32)
}

pub(super) fn dequantize_q6_k(b: &[u8], out: &mut [f32]) {
    let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = read_f16(b, 208);
    for (i, o) in out.iter_mut().enumerate().take(QK_K) {
        let (lb, ls, hb, hs) = q6_pos(i);
        let q = ((ql[lb] >> ls) & 0x0f) | (((qh[hb] >> hs) & 3) << 4);
        *o = d * (scales[i / 16] as i8) as f32 * (q as i32 - 32) as f32;
    }
}

pub(super) fn quantize_q6_k(x: &[f32], out: &mut [u8]) {
    let mut levels = [0u8; QK_K];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
    for ib in 0..16 {
        let scale = symmetric_weighted(
            &x[16 * ib..16 * ib + 16],
            32,
            &mut levels[16 * ib..16 * ib + 16],
        );
        scales[ib] = scale;
        if scale.abs() > max_abs_scale {
            max_abs_scale = scale.abs();
            max_scale = scale;
        }
    }
    out[..210].fill(0);
    if max_abs_scale < GROUP_MAX_EPS {
        return;
    }
    let iscale = -128.0 / max_scale;
    let d = write_f16(out, 208, 1.0 / iscale);
    for (o, &s) in out[192..208].iter_mut().zip(&scales) {
        *o = nearest_int(iscale * s).min(127) as i8 as u8;
    }
    for j in 0..16 {
        let dl = d * (out[192 + j] as i8) as f32;
        if dl == 0.0 {
            continue;
        }
        for ii in 0..16 {
            levels[16 * j + ii] = (nearest_int(x[16 * j + ii] / dl).clamp(-32, 31) + 32) as u8;
        }
    }
    for (i, &l) in levels.iter().enumerate() {
        let (lb, ls, hb, hs) = q6_pos(i);
        out[lb] |= (l & 0x0f) << ls;
        out[128 + hb] |= ((l >> 4) & 3) << hs;
    }
}

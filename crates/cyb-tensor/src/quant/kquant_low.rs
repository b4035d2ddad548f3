//! Q2_K and Q3_K: 256 values in 16 sub-blocks of 16.
//!
//! Q2_K (84 B): `scales[16]` (low nibble: scale, high nibble: min of sub-block `j`), `qs[64]`
//! (2-bit levels), f16 `d`, f16 `dmin`; `x = d·sc·q - dmin·m`.
//!
//! Q3_K (110 B): `hmask[32]` (third bit), `qs[64]` (low 2 bits), `scales[12]` (16 six-bit
//! signed scales, +32 biased), f16 `d`; `x = d·(sc - 32)·(q - 4)` where `q` has its third bit
//! set when the `hmask` bit is set.
//!
//! The 2-bit planes: byte `32·h + l` of `qs` holds, at bit `2·s`, value `128·h + 32·s + l`.
//! The Q3_K high bits: bit `b` of `hmask[l]` belongs to value `32·b + l`.

use super::kquant_search::{affine_weighted, symmetric_refined, AffineSearch};
use super::{nearest_int, read_f16, write_f16};

const QK_K: usize = 256;

/// Value index → (byte in `qs`, bit shift) of the 2-bit planes shared by Q2_K and Q3_K.
fn plane_pos(i: usize) -> (usize, usize) {
    let (half, within) = (i / 128, i % 128);
    (32 * half + within % 32, 2 * (within / 32))
}

fn pack_planes(levels: &[u8; QK_K], qs: &mut [u8]) {
    qs[..64].fill(0);
    for (i, &l) in levels.iter().enumerate() {
        let (byte, shift) = plane_pos(i);
        qs[byte] |= (l & 3) << shift;
    }
}

pub(super) fn dequantize_q2_k(b: &[u8], out: &mut [f32]) {
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let (d, dmin) = (read_f16(b, 80), read_f16(b, 82));
    for (i, o) in out.iter_mut().enumerate().take(QK_K) {
        let sc = scales[i / 16];
        let dl = d * (sc & 0x0f) as f32;
        let ml = dmin * (sc >> 4) as f32;
        let (byte, shift) = plane_pos(i);
        *o = dl * ((qs[byte] >> shift) & 3) as f32 - ml;
    }
}

pub(super) fn quantize_q2_k(x: &[f32], out: &mut [u8]) {
    const Q4SCALE: f32 = 15.0;
    let search = AffineSearch {
        nmax: 3,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..16 {
        let xs = &x[16 * j..16 * j + 16];
        let mut weights = [0f32; 16];
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = v.abs();
        }
        let (scale, min) = affine_weighted(xs, &weights, &search, &mut levels[16 * j..16 * j + 16]);
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }

    let packed = &mut out[0..16];
    packed.fill(0);
    let d = if max_scale > 0.0 {
        let iscale = Q4SCALE / max_scale;
        for (p, &s) in packed.iter_mut().zip(&scales) {
            *p = nearest_int(iscale * s) as u8;
        }
        write_f16(out, 80, max_scale / Q4SCALE)
    } else {
        write_f16(out, 80, 0.0)
    };
    let dmin = if max_min > 0.0 {
        let iscale = Q4SCALE / max_min;
        for (p, &m) in out[0..16].iter_mut().zip(&mins) {
            *p |= (nearest_int(iscale * m) << 4) as u8;
        }
        write_f16(out, 82, max_min / Q4SCALE)
    } else {
        write_f16(out, 82, 0.0)
    };

    // Re-round every value against the scales as they were stored; a sub-block whose stored
    // scale is zero keeps the levels of its search.
    for j in 0..16 {
        let sc = out[j];
        let dl = d * (sc & 0x0f) as f32;
        if dl == 0.0 {
            continue;
        }
        let dm = dmin * (sc >> 4) as f32;
        for ii in 0..16 {
            levels[16 * j + ii] = nearest_int((x[16 * j + ii] + dm) / dl).clamp(0, 3) as u8;
        }
    }
    pack_planes(&levels, &mut out[16..80]);
}

/// The 16 biased six-bit Q3_K scales (`0..64`; subtract 32 for the signed value).
fn q3_scales(s: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let low = if j < 8 { s[j] & 0x0f } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = low | (high << 4);
    }
    out
}

pub(super) fn dequantize_q3_k(b: &[u8], out: &mut [f32]) {
    let (hmask, qs) = (&b[0..32], &b[32..96]);
    let scales = q3_scales(&b[96..108]);
    let d = read_f16(b, 108);
    for (i, o) in out.iter_mut().enumerate().take(QK_K) {
        let dl = d * (scales[i / 16] as i32 - 32) as f32;
        let (byte, shift) = plane_pos(i);
        let low = ((qs[byte] >> shift) & 3) as i32;
        let high_set = hmask[i % 32] & (1 << (i / 32)) != 0;
        *o = dl * (low - if high_set { 0 } else { 4 }) as f32;
    }
}

pub(super) fn quantize_q3_k(x: &[f32], out: &mut [u8]) {
    let mut levels = [0u8; QK_K];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut amax) = (0f32, 0f32);
    for j in 0..16 {
        let scale = symmetric_refined(&x[16 * j..16 * j + 16], 4, &mut levels[16 * j..16 * j + 16]);
        scales[j] = scale;
        if scale.abs() > amax {
            amax = scale.abs();
            max_scale = scale;
        }
    }

    out[96..108].fill(0);
    let d = if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        for (j, &s) in scales.iter().enumerate() {
            // ggml truncates to i8 before clamping; the clamp keeps the same result.
            let l = ((nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
            if j < 8 {
                out[96 + j] = l & 0x0f;
            } else {
                out[96 + j - 8] |= (l & 0x0f) << 4;
            }
            out[96 + 8 + j % 4] |= (l >> 4) << (2 * (j / 4));
        }
        write_f16(out, 108, 1.0 / iscale)
    } else {
        write_f16(out, 108, 0.0)
    };

    let stored = q3_scales(&out[96..108]);
    for j in 0..16 {
        let dl = d * (stored[j] as i32 - 32) as f32;
        if dl == 0.0 {
            continue;
        }
        for ii in 0..16 {
            levels[16 * j + ii] = (nearest_int(x[16 * j + ii] / dl).clamp(-4, 3) + 4) as u8;
        }
    }

    let hmask = &mut out[0..32];
    hmask.fill(0);
    for (i, l) in levels.iter_mut().enumerate() {
        if *l > 3 {
            hmask[i % 32] |= 1 << (i / 32);
            *l -= 4;
        }
    }
    pack_planes(&levels, &mut out[32..96]);
}

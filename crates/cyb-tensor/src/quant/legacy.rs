//! The legacy 32-value formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//!
//! Layouts (`ggml-common.h`), little-endian, no padding:
//! - Q4_0 (18 B): f16 `d`, 16 B nibbles; byte `j` holds value `j` (low) and `j + 16` (high).
//! - Q4_1 (20 B): f16 `d`, f16 `m`, 16 B nibbles as Q4_0.
//! - Q5_0 (22 B): f16 `d`, u32 `qh` (bit `i` = 5th bit of value `i`), 16 B nibbles.
//! - Q5_1 (24 B): f16 `d`, f16 `m`, u32 `qh`, 16 B nibbles.
//! - Q8_0 (34 B): f16 `d`, 32 i8.
//! - Q8_1 (36 B): f16 `d`, f16 `s = d * sum(q)`, 32 i8.
//!
//! Symmetric formats take `d` from the value of largest magnitude with its sign, so that value
//! lands exactly on the outermost level; asymmetric ones span `[min, max]`.

use super::{read_f16, signed_absmax, write_f16};

const HALF: usize = 16;

fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// Largest and smallest value, as ggml's scan starting from `±f32::MAX`.
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

pub(super) fn dequantize_q4_0(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    for j in 0..HALF {
        let q = b[2 + j];
        out[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
        out[j + HALF] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

pub(super) fn quantize_q4_0(x: &[f32], out: &mut [u8]) {
    let (max, _) = signed_absmax(x);
    let d = max / -8.0;
    let id = inverse(d);
    write_f16(out, 0, d);
    // Truncation after +8.5 rounds to nearest; the `as` casts saturate where C's would be UB.
    let level = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    for j in 0..HALF {
        out[2 + j] = level(x[j]) | (level(x[j + HALF]) << 4);
    }
}

pub(super) fn dequantize_q4_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (read_f16(b, 0), read_f16(b, 2));
    for j in 0..HALF {
        let q = b[4 + j];
        out[j] = d * (q & 0x0f) as f32 + m;
        out[j + HALF] = d * (q >> 4) as f32 + m;
    }
}

pub(super) fn quantize_q4_1(x: &[f32], out: &mut [u8]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = inverse(d);
    write_f16(out, 0, d);
    write_f16(out, 2, min);
    let level = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
    for j in 0..HALF {
        out[4 + j] = level(x[j]) | (level(x[j + HALF]) << 4);
    }
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The 5-bit levels of a Q5 block: low nibbles from `qs`, fifth bits from `qh`.
fn q5_levels(qh: u32, qs: &[u8]) -> [u8; 32] {
    let mut q = [0u8; 32];
    for j in 0..HALF {
        let hi0 = ((qh >> j) & 1) as u8;
        let hi1 = ((qh >> (j + HALF)) & 1) as u8;
        q[j] = (qs[j] & 0x0f) | (hi0 << 4);
        q[j + HALF] = (qs[j] >> 4) | (hi1 << 4);
    }
    q
}

/// Packs 32 five-bit levels into `qh` (4 bytes) and `qs` (16 bytes).
fn pack_q5(q: &[u8; 32], qh_out: &mut [u8], qs_out: &mut [u8]) {
    let mut qh = 0u32;
    for j in 0..HALF {
        qs_out[j] = (q[j] & 0x0f) | ((q[j + HALF] & 0x0f) << 4);
        qh |= u32::from((q[j] >> 4) & 1) << j;
        qh |= u32::from((q[j + HALF] >> 4) & 1) << (j + HALF);
    }
    qh_out.copy_from_slice(&qh.to_le_bytes());
}

pub(super) fn dequantize_q5_0(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    let q = q5_levels(read_u32(b, 2), &b[6..22]);
    for (o, &l) in out.iter_mut().zip(&q) {
        *o = (l as i32 - 16) as f32 * d;
    }
}

pub(super) fn quantize_q5_0(x: &[f32], out: &mut [u8]) {
    let (max, _) = signed_absmax(x);
    let d = max / -16.0;
    let id = inverse(d);
    write_f16(out, 0, d);
    let mut q = [0u8; 32];
    for (l, &v) in q.iter_mut().zip(x) {
        *l = ((v * id + 16.5) as i8).min(31) as u8;
    }
    let (qh, qs) = out[2..].split_at_mut(4);
    pack_q5(&q, qh, qs);
}

pub(super) fn dequantize_q5_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (read_f16(b, 0), read_f16(b, 2));
    let q = q5_levels(read_u32(b, 4), &b[8..24]);
    for (o, &l) in out.iter_mut().zip(&q) {
        *o = d * l as f32 + m;
    }
}

pub(super) fn quantize_q5_1(x: &[f32], out: &mut [u8]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = inverse(d);
    write_f16(out, 0, d);
    write_f16(out, 2, min);
    let mut q = [0u8; 32];
    for (l, &v) in q.iter_mut().zip(x) {
        // ggml does not clamp here: (max - min) * id + 0.5 stays below 32. The mask keeps
        // saturated non-finite input inside five bits.
        *l = (((v - min) * id + 0.5) as u8) & 0x1f;
    }
    let (qh, qs) = out[4..].split_at_mut(4);
    pack_q5(&q, qh, qs);
}

pub(super) fn dequantize_q8_0(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[2..34]) {
        *o = q as i8 as f32 * d;
    }
}

/// Q8 levels: `round(x / d)` with `d = amax / 127`, halves away from zero (C's `roundf`).
fn q8_levels(x: &[f32], out: &mut [u8]) -> f32 {
    let (_, amax) = signed_absmax(x);
    let d = amax / 127.0;
    let id = inverse(d);
    for (o, &v) in out.iter_mut().zip(x) {
        *o = ((v * id).round() as i8) as u8;
    }
    d
}

pub(super) fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    let d = q8_levels(x, &mut out[2..34]);
    write_f16(out, 0, d);
}

/// ggml has no `dequantize_row_q8_1` (Q8_1 is only a dot-product operand); `s` is ignored,
/// values are `d * q` as the format defines.
pub(super) fn dequantize_q8_1(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[4..36]) {
        *o = q as i8 as f32 * d;
    }
}

pub(super) fn quantize_q8_1(x: &[f32], out: &mut [u8]) {
    let d = q8_levels(x, &mut out[4..36]);
    write_f16(out, 0, d);
    let sum: i32 = out[4..36].iter().map(|&q| i32::from(q as i8)).sum();
    write_f16(out, 2, sum as f32 * d);
}

//! TQ1_0 and TQ2_0: ternary weights `{-1, 0, 1}` times one f16 scale per 256 values.
//!
//! TQ2_0 (66 B): `qs[64]`, f16 `d`. Each level is stored as `q + 1` in two bits: byte
//! `32·h + m` holds value `128·h + 32·n + m` at bit `2·n`.
//!
//! TQ1_0 (54 B): `qs[48]`, `qh[4]`, f16 `d`. Five trits per byte (four in `qh`), stored as a
//! fixed-point fraction: a byte `b` holds trits `t0..t4` (most significant first) as
//! `ceil((t0·81 + t1·27 + t2·9 + t3·3 + t4) · 256 / 243)`, so trit `n` is recovered as
//! `((b · 3^n mod 256) · 3) >> 8` without a division. Value order: `qs[0..32]` carry values
//! `32·n + m` (byte `m`, trit `n`), `qs[32..48]` values `160 + 16·n + m`, `qh[0..4]` values
//! `240 + 4·n + m` (trits 0..4; the fifth trit is always 0).

use super::{read_f16, write_f16};

const QK_K: usize = 256;
const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// Trit `n` (0 = most significant) of a TQ1_0 byte, as a level in `{-1, 0, 1}`.
fn trit(byte: u8, n: usize) -> i32 {
    let shifted = byte.wrapping_mul(POW3[n]);
    ((u16::from(shifted) * 3) >> 8) as i32 - 1
}

/// (byte index in `qs ++ qh`, trit position) of value `i`.
fn tq1_pos(i: usize) -> (usize, usize) {
    match i {
        0..=159 => (i % 32, i / 32),
        160..=239 => (32 + (i - 160) % 16, (i - 160) / 16),
        _ => (48 + (i - 240) % 4, (i - 240) / 4),
    }
}

pub(super) fn dequantize_tq1_0(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 52);
    for (i, o) in out.iter_mut().enumerate().take(QK_K) {
        let (byte, n) = tq1_pos(i);
        *o = d * trit(b[byte], n) as f32;
    }
}

/// `round(x / amax)` with halves away from zero, as ggml's `lroundf`, stored as `q + 1`.
fn ternary_levels(x: &[f32]) -> ([u8; QK_K], f32) {
    let (_, amax) = super::signed_absmax(x);
    let id = if amax != 0.0 { 1.0 / amax } else { 0.0 };
    let mut t = [1u8; QK_K];
    for (o, &v) in t.iter_mut().zip(x) {
        // Finite input gives -1, 0 or 1; the clamp only tames NaN and infinities.
        *o = ((v * id).round().clamp(-1.0, 1.0) as i32 + 1) as u8;
    }
    (t, amax)
}

pub(super) fn quantize_tq1_0(x: &[f32], out: &mut [u8]) {
    let (t, d) = ternary_levels(x);
    let mut acc = [0u16; 52];
    for (i, &ti) in t.iter().enumerate() {
        let (byte, _) = tq1_pos(i);
        acc[byte] = acc[byte] * 3 + u16::from(ti);
    }
    for (byte, a) in acc.iter().enumerate() {
        // qh bytes carry four trits; the fifth (least significant) is a zero.
        let full = if byte >= 48 { a * 3 } else { *a };
        out[byte] = (full * 256).div_ceil(243) as u8;
    }
    write_f16(out, 52, d);
}

pub(super) fn dequantize_tq2_0(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 64);
    for (i, o) in out.iter_mut().enumerate().take(QK_K) {
        let q = (b[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
        *o = d * (q as i32 - 1) as f32;
    }
}

pub(super) fn quantize_tq2_0(x: &[f32], out: &mut [u8]) {
    let (t, d) = ternary_levels(x);
    out[..64].fill(0);
    for (i, &ti) in t.iter().enumerate() {
        out[32 * (i / 128) + i % 32] |= ti << (2 * ((i % 128) / 32));
    }
    write_f16(out, 64, d);
}

//! Q8_K: the 256-value activation format that K-quant dot products multiply against.
//!
//! Layout (292 B): f32 `d`, 256 i8 `qs`, 16 i16 `bsums` (the sum of each run of 16 levels, so a
//! dot product can apply the other operand's mins without touching every level); `x = d·q`.

const QK_K: usize = 256;

pub(super) fn dequantize_q8_k(b: &[u8], out: &mut [f32]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (o, &q) in out.iter_mut().zip(&b[4..4 + QK_K]) {
        *o = d * (q as i8) as f32;
    }
}

/// The level of largest magnitude becomes -127 (not -128) so that negating any level stays in
/// range, which the SIMD dot products rely on.
pub(super) fn quantize_q8_k(x: &[f32], out: &mut [u8]) {
    out[..292].fill(0);
    let (max, amax) = super::signed_absmax(x);
    if amax == 0.0 {
        return;
    }
    let iscale = -127.0 / max;
    for (o, &v) in out[4..4 + QK_K].iter_mut().zip(x) {
        *o = super::nearest_int(iscale * v).min(127) as i8 as u8;
    }
    for j in 0..16 {
        let sum: i32 = out[4 + 16 * j..4 + 16 * j + 16]
            .iter()
            .map(|&q| i32::from(q as i8))
            .sum();
        let at = 4 + QK_K + 2 * j;
        out[at..at + 2].copy_from_slice(&(sum as i16).to_le_bytes());
    }
    out[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
}

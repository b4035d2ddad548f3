//! Reference dequantize and quantize for every ggml block format.
//!
//! Byte layouts are ggml's (`ggml-common.h`); one file per family. These are the portable
//! oracles; fast kernels live in the backends and are tested against them.
//!
//! Quantizers follow ggml's reference quantizers (`quantize_row_*_ref`, i.e. what
//! `llama-quantize` does without an importance matrix; for IQ4_NL that is `quantize_iq4_nl`),
//! including the floating-point order of operations, so that the bytes they produce are the
//! bytes ggml produces for the same input.
//! Non-finite inputs never panic; the bytes they give are unspecified.

mod iq4_nl;
mod kquant_high;
mod kquant_low;
mod kquant_search;
mod legacy;
mod q8_k;
mod ternary;

use crate::{DType, Error, Result};
use half::f16;
use rayon::prelude::*;

/// Below this many blocks the work is too small to be worth handing to the thread pool.
const PARALLEL_MIN_BLOCKS: usize = 512;

/// Dequantizes one block: `bytes.len() == block_bytes`, `out.len() == block_elems`.
type DequantizeBlock = fn(bytes: &[u8], out: &mut [f32]);
/// Quantizes one block: `src.len() == block_elems`, `out.len() == block_bytes`; writes every byte.
type QuantizeBlock = fn(src: &[f32], out: &mut [u8]);

fn block_codec(dtype: DType) -> Option<(DequantizeBlock, QuantizeBlock)> {
    Some(match dtype {
        DType::Q4_0 => (legacy::dequantize_q4_0, legacy::quantize_q4_0),
        DType::Q4_1 => (legacy::dequantize_q4_1, legacy::quantize_q4_1),
        DType::Q5_0 => (legacy::dequantize_q5_0, legacy::quantize_q5_0),
        DType::Q5_1 => (legacy::dequantize_q5_1, legacy::quantize_q5_1),
        DType::Q8_0 => (legacy::dequantize_q8_0, legacy::quantize_q8_0),
        DType::Q8_1 => (legacy::dequantize_q8_1, legacy::quantize_q8_1),
        DType::Q2_K => (kquant_low::dequantize_q2_k, kquant_low::quantize_q2_k),
        DType::Q3_K => (kquant_low::dequantize_q3_k, kquant_low::quantize_q3_k),
        DType::Q4_K => (kquant_high::dequantize_q4_k, kquant_high::quantize_q4_k),
        DType::Q5_K => (kquant_high::dequantize_q5_k, kquant_high::quantize_q5_k),
        DType::Q6_K => (kquant_high::dequantize_q6_k, kquant_high::quantize_q6_k),
        DType::Q8_K => (q8_k::dequantize_q8_k, q8_k::quantize_q8_k),
        DType::TQ1_0 => (ternary::dequantize_tq1_0, ternary::quantize_tq1_0),
        DType::TQ2_0 => (ternary::dequantize_tq2_0, ternary::quantize_tq2_0),
        DType::IQ4_NL => (iq4_nl::dequantize_iq4_nl, iq4_nl::quantize_iq4_nl),
        _ => return None,
    })
}

/// Dequantizes whole blocks of `dtype` from `bytes` into `out`
/// (`out.len()` values, `bytes.len() == dtype.bytes_for(out.len())`).
pub fn dequantize(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    check(dtype, bytes.len(), out.len())?;
    let (dequantize_block, _) =
        block_codec(dtype).ok_or_else(|| unsupported("dequantize", dtype))?;
    let (bb, be) = (dtype.block_bytes(), dtype.block_elems());
    if out.len() / be >= PARALLEL_MIN_BLOCKS {
        bytes
            .par_chunks_exact(bb)
            .zip(out.par_chunks_exact_mut(be))
            .for_each(|(b, o)| dequantize_block(b, o));
    } else {
        for (b, o) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(be)) {
            dequantize_block(b, o);
        }
    }
    Ok(())
}

/// Quantizes `src` into whole blocks of `dtype` in `out`.
pub fn quantize(dtype: DType, src: &[f32], out: &mut [u8]) -> Result<()> {
    check(dtype, out.len(), src.len())?;
    let (_, quantize_block) = block_codec(dtype).ok_or_else(|| unsupported("quantize", dtype))?;
    let (bb, be) = (dtype.block_bytes(), dtype.block_elems());
    if src.len() / be >= PARALLEL_MIN_BLOCKS {
        src.par_chunks_exact(be)
            .zip(out.par_chunks_exact_mut(bb))
            .for_each(|(x, o)| quantize_block(x, o));
    } else {
        for (x, o) in src.chunks_exact(be).zip(out.chunks_exact_mut(bb)) {
            quantize_block(x, o);
        }
    }
    Ok(())
}

fn check(dtype: DType, bytes: usize, values: usize) -> Result<()> {
    if !dtype.is_quantized() || dtype.bytes_for(values) != Some(bytes) {
        return Err(Error::invalid(
            "quant",
            format!("{values} values of {dtype} do not fit {bytes} bytes"),
        ));
    }
    Ok(())
}

fn unsupported(op: &str, dtype: DType) -> Error {
    Error::UnsupportedOp {
        op: op.into(),
        backend: "reference".into(),
        input_dtype: dtype,
    }
}

/// Reads the little-endian f16 at `at` as f32.
fn read_f16(bytes: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f32()
}

/// Writes `v` rounded to f16 (nearest, ties to even, as ggml) at `at`; returns the stored value.
fn write_f16(bytes: &mut [u8], at: usize, v: f32) -> f32 {
    let h = f16::from_f32(v);
    bytes[at..at + 2].copy_from_slice(&h.to_bits().to_le_bytes());
    h.to_f32()
}

/// ggml's `nearest_int`: round to nearest, ties to even, through the float mantissa.
/// Exact for `|v| < 2^22`, which every caller guarantees for finite input; other inputs give
/// some integer rather than a panic.
fn nearest_int(v: f32) -> i32 {
    let shifted = v + 12_582_912.0; // 1.5 * 2^23: the integer part lands in the low mantissa bits
    (shifted.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// The value with the largest magnitude (the first one on ties) and that magnitude, as ggml
/// picks the scale's sign; `(0, 0)` for an all-zero block.
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        let a = v.abs();
        if a > amax {
            amax = a;
            max = v;
        }
    }
    (max, amax)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        for (v, want) in [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (3.49, 3),
            (-7.6, -8),
        ] {
            assert_eq!(nearest_int(v), want, "{v}");
        }
    }

    #[test]
    fn wrong_sizes_are_errors() {
        for dtype in DType::ALL.into_iter().filter(|d| d.is_quantized()) {
            let (be, bb) = (dtype.block_elems(), dtype.block_bytes());
            let mut out = vec![0f32; be];
            assert!(
                dequantize(dtype, &vec![0u8; bb - 1], &mut out).is_err(),
                "{dtype}"
            );
            assert!(
                dequantize(dtype, &vec![0u8; bb + 1], &mut out).is_err(),
                "{dtype}"
            );
            let mut short = vec![0f32; be - 1];
            assert!(
                dequantize(dtype, &vec![0u8; bb], &mut short).is_err(),
                "{dtype}"
            );
            let mut bytes = vec![0u8; bb];
            assert!(
                quantize(dtype, &vec![0f32; be + 1], &mut bytes).is_err(),
                "{dtype}"
            );
            assert!(
                quantize(dtype, &vec![0f32; be], &mut bytes[..bb - 1]).is_err(),
                "{dtype}"
            );
            assert!(
                quantize(dtype, &[], &mut []).is_ok(),
                "{dtype}: zero blocks is fine"
            );
        }
        let mut out = [0f32; 4];
        assert!(dequantize(DType::F32, &[0u8; 16], &mut out).is_err());
    }

    #[test]
    fn thread_pool_path_matches_block_by_block() {
        for dtype in [DType::Q4_0, DType::Q4_K, DType::IQ4_NL] {
            let n = (PARALLEL_MIN_BLOCKS + 3) * dtype.block_elems();
            let src: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 1013) as f32 / 97.0 - 5.0)
                .collect();
            let bb = dtype.block_bytes();
            let mut whole = vec![0u8; n / dtype.block_elems() * bb];
            quantize(dtype, &src, &mut whole).unwrap();
            let mut back = vec![0f32; n];
            dequantize(dtype, &whole, &mut back).unwrap();
            for (b, x) in src.chunks(dtype.block_elems()).enumerate() {
                let mut one = vec![0u8; bb];
                quantize(dtype, x, &mut one).unwrap();
                assert_eq!(&whole[b * bb..(b + 1) * bb], &one[..], "{dtype} block {b}");
                let mut v = vec![0f32; x.len()];
                dequantize(dtype, &one, &mut v).unwrap();
                assert_eq!(
                    &back[b * x.len()..(b + 1) * x.len()],
                    &v[..],
                    "{dtype} block {b}"
                );
            }
        }
    }

    #[test]
    fn non_finite_and_zero_inputs_do_not_panic() {
        let specials = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            f32::MAX,
            f32::MIN_POSITIVE,
            1e-40,
        ];
        for dtype in DType::ALL.into_iter().filter(|d| d.is_quantized()) {
            let be = dtype.block_elems();
            let mut inputs: Vec<Vec<f32>> = vec![vec![0.0; be]];
            for &s in &specials {
                inputs.push(vec![s; be]);
                inputs.push(
                    (0..be)
                        .map(|i| if i % 7 == 3 { s } else { i as f32 * 0.01 - 0.1 })
                        .collect(),
                );
            }
            for x in inputs {
                let mut bytes = vec![0u8; dtype.block_bytes()];
                quantize(dtype, &x, &mut bytes).unwrap_or_else(|e| panic!("{dtype}: {e}"));
                let mut back = vec![0f32; be];
                dequantize(dtype, &bytes, &mut back).unwrap_or_else(|e| panic!("{dtype}: {e}"));
                if x.iter().all(|&v| v == 0.0) {
                    assert!(
                        back.iter().all(|&v| v == 0.0),
                        "{dtype}: zeros must stay zeros"
                    );
                }
            }
        }
    }
}

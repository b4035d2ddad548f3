//! Our reference dequantize/quantize against gguf-py and llama.cpp, on the fixtures made by
//! `tools/fixtures/make_quant_fixtures.py` (provenance in `tests/fixtures/quant/manifest.json`).

use cyb_tensor::quant::{dequantize, quantize};
use cyb_tensor::DType;
use std::path::PathBuf;

const FORMATS: [DType; 15] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q8_1,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::Q8_K,
    DType::TQ1_0,
    DType::TQ2_0,
    DType::IQ4_NL,
];

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/quant")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn stem(dtype: DType) -> String {
    dtype.name().to_lowercase()
}

fn dequantized(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    let n = bytes.len() / dtype.block_bytes() * dtype.block_elems();
    let mut out = vec![0f32; n];
    dequantize(dtype, bytes, &mut out).unwrap_or_else(|e| panic!("{dtype}: {e}"));
    out
}

fn quantized(dtype: DType, src: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; dtype.bytes_for(src.len()).expect("whole blocks")];
    quantize(dtype, src, &mut out).unwrap_or_else(|e| panic!("{dtype}: {e}"));
    out
}

#[test]
fn dequantize_matches_reference_bit_for_bit() {
    for dtype in FORMATS {
        let got = dequantized(dtype, &fixture(&format!("{}.deq_in.bin", stem(dtype))));
        let want = f32s(&fixture(&format!("{}.deq_out.f32", stem(dtype))));
        assert_eq!(got.len(), want.len(), "{dtype}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{dtype}: value {i} (block {}): got {g}, reference {w}",
                i / dtype.block_elems()
            );
        }
    }
}

#[test]
fn quantize_matches_reference_byte_for_byte() {
    for dtype in FORMATS {
        let src = f32s(&fixture(&format!("{}.q_in.f32", stem(dtype))));
        let want = fixture(&format!("{}.q_out.bin", stem(dtype)));
        let got = quantized(dtype, &src);
        assert_eq!(got.len(), want.len(), "{dtype}");
        let bb = dtype.block_bytes();
        for (b, (g, w)) in got.chunks(bb).zip(want.chunks(bb)).enumerate() {
            assert_eq!(
                g, w,
                "{dtype}: block {b} (case {b} of manifest.json) differs"
            );
        }
    }
}

fn rmse(a: &[f32], b: &[f32]) -> f64 {
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum();
    (sum / a.len() as f64).sqrt()
}

/// Round-trip error of our quantizer within 5% of llama.cpp's (what llama-quantize does without
/// an importance matrix), on gaussian rows and on real SmolLM2 weights.
#[test]
fn round_trip_error_within_5_percent_of_llama_cpp() {
    let mut failures = Vec::new();
    for kind in ["random", "real"] {
        let src = f32s(&fixture(&format!("quality_{kind}.f32")));
        for dtype in FORMATS {
            let theirs = fixture(&format!("quality_{kind}.{}.bin", stem(dtype)));
            let ours = quantized(dtype, &src);
            let rmse_theirs = rmse(&src, &dequantized(dtype, &theirs));
            let rmse_ours = rmse(&src, &dequantized(dtype, &ours));
            let identical = ours == theirs;
            println!(
                "{kind:6} {:6}  ours {rmse_ours:.6e}  llama.cpp {rmse_theirs:.6e}  ratio {:.4}  bytes identical: {identical}",
                dtype.name(),
                rmse_ours / rmse_theirs
            );
            if rmse_ours > 1.05 * rmse_theirs {
                failures.push(format!(
                    "{kind} {dtype}: {rmse_ours} > 1.05 x {rmse_theirs}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The quality inputs quantized by llama.cpp for every format (gguf-py made the `q_out`
/// fixtures of the formats it can quantize): our bytes are llama.cpp's too.
#[test]
fn quantize_matches_llama_cpp_byte_for_byte() {
    for kind in ["random", "real"] {
        let src = f32s(&fixture(&format!("quality_{kind}.f32")));
        for dtype in FORMATS {
            let theirs = fixture(&format!("quality_{kind}.{}.bin", stem(dtype)));
            let ours = quantized(dtype, &src);
            let bb = dtype.block_bytes();
            for (b, (o, t)) in ours.chunks(bb).zip(theirs.chunks(bb)).enumerate() {
                assert_eq!(o, t, "{kind} {dtype}: block {b} differs from llama.cpp");
            }
        }
    }
}

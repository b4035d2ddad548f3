//! Quantizes raw little-endian f32 rows into ggml block bytes with cyb-llm's own quantizer
//! (`cyb_tensor::quant::quantize`), for tools/bench/make_bench_models.py, which writes the
//! bytes into a GGUF file with the gguf package.
//!
//! `cargo run -p cyb-cli --example quantize_raw -- DTYPE COLS IN.f32 OUT.bin`
//! (DTYPE: any block type cyb-tensor quantizes, e.g. q4_k, q6_k, q5_0, q8_0).

use cyb_tensor::{quant, DType};
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dtype, cols, input, output] = args.as_slice() else {
        return Err("usage: quantize_raw DTYPE COLS IN.f32 OUT.bin".into());
    };
    let dtype = DType::parse(dtype).ok_or_else(|| format!("unknown dtype {dtype:?}"))?;
    if !dtype.is_quantized() {
        return Err(format!("{dtype} is not a block-quantized type").into());
    }
    let cols: usize = cols.parse()?;
    if cols == 0 || !cols.is_multiple_of(dtype.block_elems()) {
        return Err(format!(
            "rows of {cols} values do not split into {dtype} blocks of {}",
            dtype.block_elems()
        )
        .into());
    }
    let bytes = std::fs::read(input).map_err(|e| format!("{input}: {e}"))?;
    if !bytes.len().is_multiple_of(4 * cols) {
        return Err(format!(
            "{input}: {} bytes are not whole f32 rows of {cols}",
            bytes.len()
        )
        .into());
    }
    let values: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    // Rows are whole blocks, so quantizing the flat array gives the same bytes row by row.
    let n_bytes = dtype
        .bytes_for(values.len())
        .ok_or("tensor too large for its block type")?;
    let mut out = vec![0u8; n_bytes];
    quant::quantize(dtype, &values, &mut out)?;
    std::fs::write(output, &out).map_err(|e| format!("{output}: {e}"))?;
    Ok(())
}

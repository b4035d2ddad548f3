//! Reference dequantize and quantize for every ggml block format.
//!
//! Byte layouts are ggml's (`ggml-common.h`); one file per family. These are the portable
//! oracles; fast kernels live in the backends and are tested against them.

use crate::{DType, Error, Result};

/// Dequantizes whole blocks of `dtype` from `bytes` into `out`
/// (`out.len()` values, `bytes.len() == dtype.bytes_for(out.len())`).
pub fn dequantize(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    check(dtype, bytes.len(), out.len())?;
    Err(Error::UnsupportedOp {
        op: "dequantize".into(),
        backend: "reference".into(),
        input_dtype: dtype,
    })
}

/// Quantizes `src` into whole blocks of `dtype` in `out`.
pub fn quantize(dtype: DType, src: &[f32], out: &mut [u8]) -> Result<()> {
    check(dtype, out.len(), src.len())?;
    Err(Error::UnsupportedOp {
        op: "quantize".into(),
        backend: "reference".into(),
        input_dtype: dtype,
    })
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

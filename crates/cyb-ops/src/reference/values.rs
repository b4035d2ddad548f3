//! Dtype-generic reading and writing for the graph-level ops: values as f64 (F64), f32 (the other
//! float dtypes) or i64 (integer and BOOL dtypes; U64 as its bits), and raw element moves for ops
//! that only rearrange data.

use super::host;
use cyb_tensor::{DType, Error, Result, Tensor};

/// The values of a scalar tensor, in the arithmetic its dtype uses.
pub(super) enum Vals {
    F(Vec<f32>),
    D(Vec<f64>),
    I(Vec<i64>),
}

pub(super) fn read(t: &Tensor) -> Result<Vals> {
    if t.dtype() == DType::F64 {
        Ok(Vals::D(t.to_f64_vec()?))
    } else if t.dtype().is_float() {
        Ok(Vals::F(t.to_f32_vec()?))
    } else {
        Ok(Vals::I(t.to_i64_vec()?))
    }
}

/// A tensor of `dtype` from f32 values (integer dtypes truncate toward zero and saturate).
pub(super) fn write_f32(dims: &[usize], dtype: DType, v: &[f32]) -> Result<Tensor> {
    if dtype.is_float() {
        return Tensor::from_f32_as(dims, v, dtype);
    }
    let ints: Vec<i64> = v
        .iter()
        .map(|&x| if x.is_nan() { 0 } else { x as i64 })
        .collect();
    write_i64(dims, dtype, &ints)
}

/// A tensor of `dtype` from i64 values: integers wrap to the dtype's width, BOOL is `x != 0`,
/// floats convert.
pub(super) fn write_i64(dims: &[usize], dtype: DType, v: &[i64]) -> Result<Tensor> {
    if dtype.is_quantized() {
        return Err(Error::invalid(
            "write",
            format!("{dtype} is not a scalar dtype"),
        ));
    }
    Tensor::from_i64_as(dims, v, dtype)
}

/// A tensor of `dtype` from f64 values (integer dtypes truncate toward zero and saturate).
pub(super) fn write_f64(dims: &[usize], dtype: DType, v: &[f64]) -> Result<Tensor> {
    if dtype.is_quantized() {
        return Err(Error::invalid(
            "write",
            format!("{dtype} is not a scalar dtype"),
        ));
    }
    Tensor::from_f64_as(dims, v, dtype)
}

/// Builds a tensor of `dims` whose element `i` is element `src(i)` of `x` (same dtype), or
/// `fill` (one element's bytes) where `src` gives `None`.
pub(super) fn move_elems(
    op: &str,
    x: &Tensor,
    dims: &[usize],
    fill: Option<&[u8]>,
    mut src: impl FnMut(usize) -> Option<usize>,
) -> Result<Tensor> {
    let bytes = host(op, x)?;
    let es = x.dtype().block_bytes();
    let n: usize = dims.iter().product();
    let mut out = vec![0u8; n * es];
    for (i, o) in out.chunks_exact_mut(es).enumerate() {
        match src(i) {
            Some(j) => {
                let s = bytes.get(j * es..(j + 1) * es).ok_or_else(|| {
                    Error::invalid(op, format!("source element {j} out of range"))
                })?;
                o.copy_from_slice(s);
            }
            None => {
                if let Some(f) = fill {
                    o.copy_from_slice(f);
                }
            }
        }
    }
    Tensor::from_bytes(dims, x.dtype(), &out)
}

/// Row-major strides of `dims`.
pub(super) fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// The coordinates of flat index `flat` in `dims`, written into `idx`.
pub(super) fn unravel(mut flat: usize, dims: &[usize], idx: &mut [usize]) {
    for (i, &d) in dims.iter().enumerate().rev() {
        let d = d.max(1);
        idx[i] = flat % d;
        flat /= d;
    }
}

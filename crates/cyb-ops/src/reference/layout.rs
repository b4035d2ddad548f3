//! Data movement without arithmetic: concat, split, reshape, permute/transpose, slice, and
//! dtype conversion. These work on raw element bytes, so every scalar dtype keeps its bits.

use super::{axis_of, floats, host, Lanes};
use cyb_tensor::{DType, Error, Result, Tensor, TensorInfo};
use half::{bf16, f16};

/// Joins `inputs` along `axis`.
pub(super) fn concat(axis: isize, inputs: &[Tensor], out: &TensorInfo) -> Result<Tensor> {
    let a = axis_of("concat", &inputs[0], axis)?;
    let es = out.dtype.block_bytes();
    let outer: usize = out.shape.dims()[..a].iter().product();
    let parts: Vec<(&[u8], usize)> = inputs
        .iter()
        .map(|t| {
            let chunk = t.dims()[a..].iter().product::<usize>() * es;
            host("concat", t).map(|b| (b, chunk))
        })
        .collect::<Result<_>>()?;
    let mut y = Vec::with_capacity(out.shape.numel() * es);
    for o in 0..outer {
        for (bytes, chunk) in &parts {
            y.extend_from_slice(&bytes[o * chunk..(o + 1) * chunk]);
        }
    }
    Tensor::from_bytes(out.shape.dims(), out.dtype, &y)
}

/// Cuts `x` along `axis` into the pieces described by `outs`.
pub(super) fn split(axis: isize, x: &Tensor, outs: &[TensorInfo]) -> Result<Vec<Tensor>> {
    let a = axis_of("split", x, axis)?;
    let es = x.dtype().block_bytes();
    let bytes = host("split", x)?;
    let outer: usize = x.dims()[..a].iter().product();
    let row = x.dims()[a..].iter().product::<usize>() * es;
    let mut offset = 0;
    let mut pieces = Vec::with_capacity(outs.len());
    for info in outs {
        let chunk = info.shape.dims()[a..].iter().product::<usize>() * es;
        let mut y = Vec::with_capacity(outer * chunk);
        for o in 0..outer {
            let start = o * row + offset;
            y.extend_from_slice(&bytes[start..start + chunk]);
        }
        offset += chunk;
        pieces.push(Tensor::from_bytes(info.shape.dims(), info.dtype, &y)?);
    }
    Ok(pieces)
}

/// Same bytes, new dimensions (shares the storage).
pub(super) fn reshape(x: &Tensor, out: &TensorInfo) -> Result<Tensor> {
    x.reshape(out.shape.dims())
}

/// `y.dim[i] = x.dim[perm[i]]`, elements moved to match.
pub(super) fn permute(perm: &[usize], x: &Tensor, out: &TensorInfo) -> Result<Tensor> {
    let es = x.dtype().block_bytes();
    let bytes = host("permute", x)?;
    let in_strides = x.shape().strides();
    let od = out.shape.dims();
    // Stride in x of each output dimension.
    let strides: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let mut y = Vec::with_capacity(bytes.len());
    for flat in 0..out.shape.numel() {
        let src = super::broadcast_offset(flat, od, &strides) * es;
        y.extend_from_slice(&bytes[src..src + es]);
    }
    Tensor::from_bytes(od, out.dtype, &y)
}

/// Elements `start, start + step, ..` along `axis` (count and clamping from the shape rule).
pub(super) fn slice(
    axis: isize,
    start: isize,
    step: usize,
    x: &Tensor,
    out: &TensorInfo,
) -> Result<Tensor> {
    let a = axis_of("slice", x, axis)?;
    let es = x.dtype().block_bytes();
    let bytes = host("slice", x)?;
    let lanes = Lanes::new(x.dims(), a);
    let first = crate::shape_rule::slice_range(lanes.len, start, isize::MAX, 1).0;
    let count = out.shape.dims()[a];
    let chunk = lanes.inner * es;
    let mut y = Vec::with_capacity(out.shape.numel() * es);
    for o in 0..lanes.outer {
        for t in 0..count {
            let start = ((o * lanes.len) + first + t * step) * chunk;
            y.extend_from_slice(&bytes[start..start + chunk]);
        }
    }
    Tensor::from_bytes(out.shape.dims(), out.dtype, &y)
}

/// Converts `x` to `to`: floats round to nearest even, float → integer truncates toward zero
/// and saturates (NaN → 0), integer → integer saturates, block formats go through f32.
pub(super) fn cast(to: DType, x: &Tensor) -> Result<Tensor> {
    let from = x.dtype();
    if from == to {
        return Ok(x.clone());
    }
    if !from.is_integer() {
        return Tensor::from_f32_as(x.dims(), &floats(x)?, to);
    }
    // Integers go through i64 so large I64 values are not rounded to f32 on the way.
    let v = x.to_i64_vec()?;
    let bytes: Vec<u8> = match to {
        DType::F32 => v.iter().flat_map(|&i| (i as f32).to_le_bytes()).collect(),
        DType::F16 => v
            .iter()
            .flat_map(|&i| f16::from_f64(i as f64).to_le_bytes())
            .collect(),
        DType::BF16 => v
            .iter()
            .flat_map(|&i| bf16::from_f64(i as f64).to_le_bytes())
            .collect(),
        DType::I64 => v.iter().flat_map(|i| i.to_le_bytes()).collect(),
        DType::I32 => v
            .iter()
            .flat_map(|&i| (i.clamp(i32::MIN as i64, i32::MAX as i64) as i32).to_le_bytes())
            .collect(),
        DType::I8 => v
            .iter()
            .map(|&i| i.clamp(i8::MIN as i64, i8::MAX as i64) as i8 as u8)
            .collect(),
        DType::U8 => v.iter().map(|&i| i.clamp(0, 255) as u8).collect(),
        DType::Bool => v.iter().map(|&i| u8::from(i != 0)).collect(),
        q if q.is_quantized() => {
            let f: Vec<f32> = v.iter().map(|&i| i as f32).collect();
            return Tensor::from_f32_as(x.dims(), &f, q);
        }
        other => {
            return Err(Error::invalid(
                "cast",
                format!("no conversion from {from} to {other}"),
            ))
        }
    };
    Tensor::from_bytes(x.dims(), to, &bytes)
}

/// A copy of `cache` `[heads, capacity, d]` with the rows of `new` `[n, heads, d]` written at
/// positions `start..start + n` of every head (shapes checked by the shape rule).
pub(super) fn kv_append(start: usize, cache: &Tensor, new: &Tensor) -> Result<Tensor> {
    let (c, n) = (cache.dims(), new.dims());
    let (heads, cap, d, rows) = (c[0], c[1], c[2], n[0]);
    let mut y = cache.to_f32_vec()?;
    let src = floats(new)?;
    for t in 0..rows {
        for h in 0..heads {
            let from = (t * heads + h) * d;
            let to = (h * cap + start + t) * d;
            y[to..to + d].copy_from_slice(&src[from..from + d]);
        }
    }
    Tensor::from_f32(c, &y)
}

//! Data movement without arithmetic: concat, split, reshape, permute/transpose, slice, and
//! dtype conversion. These work on raw element bytes, so every scalar dtype keeps its bits.

use super::{axis_of, floats, host, Lanes};
use cyb_tensor::{DType, Result, Tensor, TensorInfo};
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

/// Converts `x` to `to`: floats round to nearest even (F64 rounds once, straight to the target),
/// float → integer truncates toward zero and saturates (NaN → 0), integer → integer saturates,
/// block formats go through f32.
pub(super) fn cast(to: DType, x: &Tensor) -> Result<Tensor> {
    let from = x.dtype();
    if from == to {
        return Ok(x.clone());
    }
    if from == DType::F64 {
        let v = x.to_f64_vec()?;
        let bytes: Vec<u8> = match to {
            DType::F16 => v
                .iter()
                .flat_map(|&d| f16::from_f64(d).to_le_bytes())
                .collect(),
            DType::BF16 => v
                .iter()
                .flat_map(|&d| bf16::from_f64(d).to_le_bytes())
                .collect(),
            q if q.is_quantized() => {
                let f: Vec<f32> = v.iter().map(|&d| d as f32).collect();
                return Tensor::from_f32_as(x.dims(), &f, q);
            }
            _ => return Tensor::from_f64_as(x.dims(), &v, to),
        };
        return Tensor::from_bytes(x.dims(), to, &bytes);
    }
    if !from.is_integer() {
        if to == DType::F64 {
            let v: Vec<f64> = floats(x)?.iter().map(|&f| f64::from(f)).collect();
            return Tensor::from_f64_as(x.dims(), &v, to);
        }
        return Tensor::from_f32_as(x.dims(), &floats(x)?, to);
    }
    // Integers go through i128 so neither large I64 nor U64 values are rounded or wrapped on
    // the way.
    let v: Vec<i128> = if from == DType::U64 {
        x.to_i64_vec()?
            .into_iter()
            .map(|i| i128::from(i as u64))
            .collect()
    } else {
        x.to_i64_vec()?.into_iter().map(i128::from).collect()
    };
    if to.is_float() {
        let bytes: Vec<u8> = match to {
            DType::F16 => v
                .iter()
                .flat_map(|&i| f16::from_f64(i as f64).to_le_bytes())
                .collect(),
            DType::BF16 => v
                .iter()
                .flat_map(|&i| bf16::from_f64(i as f64).to_le_bytes())
                .collect(),
            DType::F64 => v.iter().flat_map(|&i| (i as f64).to_le_bytes()).collect(),
            _ => v.iter().flat_map(|&i| (i as f32).to_le_bytes()).collect(),
        };
        return Tensor::from_bytes(x.dims(), to, &bytes);
    }
    if to.is_quantized() {
        let f: Vec<f32> = v.iter().map(|&i| i as f32).collect();
        return Tensor::from_f32_as(x.dims(), &f, to);
    }
    let (lo, hi): (i128, i128) = match to {
        DType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DType::U8 => (0, u8::MAX.into()),
        DType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DType::U16 => (0, u16::MAX.into()),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DType::U32 => (0, u32::MAX.into()),
        DType::U64 => (0, u64::MAX.into()),
        DType::Bool => (i128::MIN, i128::MAX),
        _ => (i64::MIN.into(), i64::MAX.into()),
    };
    let ints: Vec<i64> = v
        .iter()
        .map(|&i| match to {
            DType::Bool => i64::from(i != 0),
            // After the clamp the value fits the target; U64 is stored as its bits.
            _ => i.clamp(lo, hi) as i64,
        })
        .collect();
    Tensor::from_i64_as(x.dims(), &ints, to)
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

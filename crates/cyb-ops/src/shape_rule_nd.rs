//! Shape and dtype rules of the graph-level ops (`Unary` .. `ConvTranspose` in `Op`).

pub(crate) use crate::geometry::{axis_mask, reduced, slice_steps, window_geometry};
use crate::shape_rule::{broadcast_dims, resolve_axis};
use crate::{BinaryFn, Op, PoolKind, UnaryFn};
use cyb_tensor::{DType, Error, Result, Shape, TensorInfo};

pub(crate) fn output_infos(op: &Op, inputs: &[TensorInfo]) -> Result<Vec<TensorInfo>> {
    let name = op.name();
    let dims = |i: usize| inputs[i].shape.dims();
    let out = match op {
        Op::Unary { f } => {
            arity(name, inputs, 1, 1)?;
            let d = inputs[0].dtype;
            let ok = match f {
                UnaryFn::Not => d == DType::Bool,
                UnaryFn::Abs | UnaryFn::Neg | UnaryFn::Sign | UnaryFn::Relu => {
                    scalar(d) && d != DType::Bool
                }
                _ => d.is_float(),
            };
            if !ok {
                return Err(Error::invalid(name, format!("{f:?} does not take {d}")));
            }
            let to = match f {
                UnaryFn::IsNaN | UnaryFn::IsInf { .. } => DType::Bool,
                _ => d,
            };
            vec![info(name, dims(0).to_vec(), to)?]
        }
        Op::Binary { f } => {
            arity(name, inputs, 2, 2)?;
            let (a, b) = (inputs[0].dtype, inputs[1].dtype);
            let ok = match f {
                BinaryFn::And | BinaryFn::Or | BinaryFn::Xor => a == DType::Bool && b == a,
                BinaryFn::Pow => scalar(a) && scalar(b) && a != DType::Bool && b != DType::Bool,
                BinaryFn::ShiftLeft | BinaryFn::ShiftRight => a.is_integer() && b == a,
                BinaryFn::Equal => scalar(a) && b == a,
                _ => scalar(a) && b == a && a != DType::Bool,
            };
            if !ok {
                return Err(Error::invalid(
                    name,
                    format!("{f:?} does not take {a} and {b}"),
                ));
            }
            let to = if f.is_comparison() { DType::Bool } else { a };
            vec![info(name, broadcast_dims(name, dims(0), dims(1))?, to)?]
        }
        Op::Where => {
            arity(name, inputs, 3, 3)?;
            if inputs[0].dtype != DType::Bool {
                return Err(Error::invalid(name, "condition must be BOOL"));
            }
            let d = inputs[1].dtype;
            if !scalar(d) || inputs[2].dtype != d {
                return Err(Error::invalid(
                    name,
                    format!("branches are {d} and {}", inputs[2].dtype),
                ));
            }
            let ab = broadcast_dims(name, dims(1), dims(2))?;
            vec![info(name, broadcast_dims(name, dims(0), &ab)?, d)?]
        }
        Op::Reduce { axes, keepdims, .. } => {
            let x = scalar_one(name, inputs)?;
            let mask = axis_mask(name, x.shape.rank(), axes)?;
            vec![info(
                name,
                reduced(x.shape.dims(), &mask, *keepdims),
                x.dtype,
            )?]
        }
        Op::ArgReduce { axis, keepdims, .. } => {
            let x = scalar_one(name, inputs)?;
            let a = resolve_axis(name, x.shape.rank(), *axis)?;
            if x.shape.dims()[a] == 0 {
                return Err(Error::invalid(name, "arg reduction over an empty axis"));
            }
            let mut mask = vec![false; x.shape.rank()];
            mask[a] = true;
            vec![info(
                name,
                reduced(x.shape.dims(), &mask, *keepdims),
                DType::I64,
            )?]
        }
        Op::Gather { axis } => {
            arity(name, inputs, 2, 2)?;
            ids(name, &inputs[1])?;
            let x = &inputs[0];
            check_scalar(name, x.dtype)?;
            let a = resolve_axis(name, x.shape.rank(), *axis)?;
            let xd = x.shape.dims();
            let mut d = xd[..a].to_vec();
            d.extend_from_slice(dims(1));
            d.extend_from_slice(&xd[a + 1..]);
            vec![info(name, d, x.dtype)?]
        }
        Op::GatherElements { axis } => {
            arity(name, inputs, 2, 2)?;
            ids(name, &inputs[1])?;
            let x = &inputs[0];
            check_scalar(name, x.dtype)?;
            let a = resolve_axis(name, x.shape.rank(), *axis)?;
            let (xd, id) = (x.shape.dims(), dims(1));
            if xd.len() != id.len()
                || xd
                    .iter()
                    .zip(id)
                    .enumerate()
                    .any(|(i, (x, n))| i != a && n > x)
            {
                return Err(Error::shape(name, xd, id));
            }
            vec![info(name, id.to_vec(), x.dtype)?]
        }
        Op::Expand { dims: to } => {
            let x = scalar_one(name, inputs)?;
            vec![info(
                name,
                broadcast_dims(name, x.shape.dims(), to)?,
                x.dtype,
            )?]
        }
        Op::Tile { repeats } => {
            let x = scalar_one(name, inputs)?;
            if repeats.len() != x.shape.rank() {
                return Err(Error::invalid(
                    name,
                    "one repeat count per dimension expected",
                ));
            }
            let d = x
                .shape
                .dims()
                .iter()
                .zip(repeats)
                .map(|(a, b)| mul(name, *a, *b));
            vec![info(name, d.collect::<Result<_>>()?, x.dtype)?]
        }
        Op::SliceNd {
            starts,
            ends,
            axes,
            steps,
        } => {
            let x = scalar_one(name, inputs)?;
            let n = starts.len();
            if ends.len() != n || axes.len() != n || steps.len() != n {
                return Err(Error::invalid(
                    name,
                    "starts, ends, axes and steps differ in length",
                ));
            }
            let mut d = x.shape.dims().to_vec();
            let mut seen = vec![false; d.len()];
            for i in 0..n {
                let a = resolve_axis(name, d.len(), axes[i])?;
                if std::mem::replace(&mut seen[a], true) {
                    return Err(Error::invalid(name, format!("axis {a} repeated")));
                }
                if steps[i] == 0 {
                    return Err(Error::invalid(name, "step 0"));
                }
                d[a] = slice_steps(d[a], starts[i], ends[i], steps[i]).1;
            }
            vec![info(name, d, x.dtype)?]
        }
        Op::Pad { pads, .. } => {
            let x = scalar_one(name, inputs)?;
            let r = x.shape.rank();
            if pads.len() != 2 * r {
                return Err(Error::invalid(
                    name,
                    format!("{} pads for rank {r}", pads.len()),
                ));
            }
            let mut d = Vec::with_capacity(r);
            for (i, &n) in x.shape.dims().iter().enumerate() {
                let v = n as i128 + pads[i] as i128 + pads[i + r] as i128;
                if v < 0 || v > isize::MAX as i128 {
                    return Err(Error::invalid(name, format!("dimension {i} padded to {v}")));
                }
                d.push(v as usize);
            }
            vec![info(name, d, x.dtype)?]
        }
        Op::Conv {
            strides,
            dilations,
            pads,
            group,
            ..
        } => {
            arity(name, inputs, 2, 3)?;
            floats(name, inputs)?;
            let (x, w) = (dims(0), dims(1));
            let k = x.len().saturating_sub(2);
            if k == 0 || w.len() != x.len() || *group == 0 {
                return Err(Error::shape(name, x, w));
            }
            let (c, m) = (x[1], w[0]);
            if c % group != 0 || m % group != 0 || w[1] * group != c {
                return Err(Error::invalid(
                    name,
                    format!("{c} channels, weight {w:?} and group {group} do not fit"),
                ));
            }
            if let Some(b) = inputs.get(2) {
                if b.shape.dims() != [m] {
                    return Err(Error::shape(name, &[m], b.shape.dims()));
                }
            }
            let g = window_geometry(name, &x[2..], &w[2..], strides, dilations, pads, false)?;
            let mut d = vec![x[0], m];
            d.extend(g.out);
            vec![info(name, d, DType::F32)?]
        }
        Op::Pool {
            kind,
            kernel,
            strides,
            dilations,
            pads,
            ceil_mode,
        } => {
            arity(name, inputs, 1, 1)?;
            // Max pooling also takes 8-bit integers (exact in f32) and keeps their dtype.
            let int8 = *kind == PoolKind::Max && matches!(inputs[0].dtype, DType::U8 | DType::I8);
            if !int8 {
                floats(name, inputs)?;
            }
            let x = dims(0);
            if x.len() < 3 {
                return Err(Error::invalid(name, "input must be [n, c, spatial..]"));
            }
            let g = window_geometry(name, &x[2..], kernel, strides, dilations, pads, *ceil_mode)?;
            let mut d = x[..2].to_vec();
            d.extend(g.out);
            let to = if int8 { inputs[0].dtype } else { DType::F32 };
            vec![info(name, d, to)?]
        }
        Op::LogSoftmax { axis } => {
            arity(name, inputs, 1, 1)?;
            floats(name, inputs)?;
            resolve_axis(name, inputs[0].shape.rank(), *axis)?;
            vec![info(name, dims(0).to_vec(), DType::F32)?]
        }
        Op::BatchNorm { .. } => {
            arity(name, inputs, 5, 5)?;
            floats(name, inputs)?;
            let x = dims(0);
            let c = *x
                .get(1)
                .ok_or_else(|| Error::invalid(name, "input rank < 2"))?;
            for i in 1..5 {
                if dims(i) != [c] {
                    return Err(Error::shape(name, &[c], dims(i)));
                }
            }
            vec![info(name, x.to_vec(), DType::F32)?]
        }
        Op::LayerNormNd { axis, .. } => {
            arity(name, inputs, 2, 3)?;
            floats(name, inputs)?;
            let x = dims(0);
            let a = resolve_axis(name, x.len(), *axis)?;
            for i in 1..inputs.len() {
                let b = broadcast_dims(name, &x[a..], dims(i))?;
                if b != x[a..] {
                    return Err(Error::shape(name, &x[a..], dims(i)));
                }
            }
            let mut stat = x.to_vec();
            stat[a..].iter_mut().for_each(|d| *d = 1);
            vec![
                info(name, x.to_vec(), DType::F32)?,
                info(name, stat.clone(), DType::F32)?,
                info(name, stat, DType::F32)?,
            ]
        }
        Op::Trilu { .. } => {
            let x = scalar_one(name, inputs)?;
            if x.shape.rank() < 2 {
                return Err(Error::invalid(name, "input rank < 2"));
            }
            vec![info(name, x.shape.dims().to_vec(), x.dtype)?]
        }
        Op::ConvTranspose {
            strides,
            dilations,
            pads,
            output_padding,
            group,
        } => {
            arity(name, inputs, 2, 3)?;
            floats(name, inputs)?;
            let (x, w) = (dims(0), dims(1));
            let k = x.len().saturating_sub(2);
            let lens_ok = strides.len() == k
                && dilations.len() == k
                && pads.len() == 2 * k
                && output_padding.len() == k;
            if k == 0 || w.len() != x.len() || *group == 0 || !lens_ok {
                return Err(Error::invalid(name, format!("input {x:?}, weight {w:?}")));
            }
            if w[0] != x[1] || x[1] % group != 0 {
                return Err(Error::shape(name, &[x[1]], &w[..1]));
            }
            let m = mul(name, w[1], *group)?;
            let mut d = vec![x[0], m];
            for i in 0..k {
                let full = strides[i] as i128 * (x[i + 2] as i128 - 1)
                    + output_padding[i] as i128
                    + dilations[i] as i128 * (w[i + 2] as i128 - 1)
                    + 1
                    - pads[i] as i128
                    - pads[i + k] as i128;
                if full < 0 || full > u32::MAX as i128 {
                    return Err(Error::invalid(name, format!("output size {full}")));
                }
                d.push(full as usize);
            }
            vec![info(name, d, DType::F32)?]
        }
        Op::QuantizeLinear { axis } | Op::DequantizeLinear { axis } => {
            arity(name, inputs, 2, 3)?;
            let x = &inputs[0];
            let quant = matches!(op, Op::QuantizeLinear { .. });
            let ok_x = if quant {
                x.dtype.is_float()
            } else {
                matches!(x.dtype, DType::U8 | DType::I8 | DType::I32)
            };
            if !ok_x || !inputs[1].dtype.is_float() {
                return Err(Error::invalid(
                    name,
                    format!("input is {}, scale {}", x.dtype, inputs[1].dtype),
                ));
            }
            let s = dims(1);
            if s.iter().product::<usize>() != 1 {
                let a = resolve_axis(name, x.shape.rank(), *axis)?;
                if s != [x.shape.dims()[a]] {
                    return Err(Error::shape(name, &[x.shape.dims()[a]], s));
                }
            }
            let to = match (quant, inputs.get(2)) {
                (true, Some(z)) if matches!(z.dtype, DType::U8 | DType::I8) => z.dtype,
                (true, None) => DType::U8,
                (false, Some(z)) if z.dtype == x.dtype => DType::F32,
                (false, None) => DType::F32,
                (_, Some(z)) => {
                    return Err(Error::invalid(name, format!("zero point is {}", z.dtype)))
                }
            };
            if let Some(z) = inputs.get(2) {
                if z.shape.numel() != inputs[1].shape.numel() {
                    return Err(Error::shape(name, s, z.shape.dims()));
                }
            }
            vec![info(name, x.shape.dims().to_vec(), to)?]
        }
        Op::MatMulInteger => {
            arity(name, inputs, 2, 4)?;
            let (a, b) = (dims(0), dims(1));
            let int8 = |d: DType| matches!(d, DType::U8 | DType::I8);
            if !inputs.iter().all(|i| int8(i.dtype)) {
                return Err(Error::invalid(name, "inputs must be U8 or I8"));
            }
            if a.len() < 2 || b.len() < 2 || a[a.len() - 1] != b[b.len() - 2] {
                return Err(Error::shape(name, a, b));
            }
            let (m, n) = (a[a.len() - 2], b[b.len() - 1]);
            for (i, len) in [(2, m), (3, n)] {
                if let Some(z) = inputs.get(i) {
                    let c = z.shape.numel();
                    if c != 1 && z.shape.dims() != [len] {
                        return Err(Error::shape(name, &[len], z.shape.dims()));
                    }
                }
            }
            let mut d = broadcast_dims(name, &a[..a.len() - 2], &b[..b.len() - 2])?;
            d.extend([m, n]);
            vec![info(name, d, DType::I32)?]
        }
        Op::ScatterElements { axis, .. } => {
            arity(name, inputs, 3, 3)?;
            ids(name, &inputs[1])?;
            let x = &inputs[0];
            check_scalar(name, x.dtype)?;
            resolve_axis(name, x.shape.rank(), *axis)?;
            if dims(1) != dims(2) || dims(1).len() != x.shape.rank() || inputs[2].dtype != x.dtype {
                return Err(Error::shape(name, dims(1), dims(2)));
            }
            vec![info(name, x.shape.dims().to_vec(), x.dtype)?]
        }
        Op::ScatterNd { .. } => {
            arity(name, inputs, 3, 3)?;
            ids(name, &inputs[1])?;
            let x = &inputs[0];
            check_scalar(name, x.dtype)?;
            let (xd, id) = (x.shape.dims(), dims(1));
            let k = *id
                .last()
                .ok_or_else(|| Error::invalid(name, "indices are a scalar"))?;
            if k > xd.len() {
                return Err(Error::shape(name, xd, id));
            }
            let mut want = id[..id.len() - 1].to_vec();
            want.extend_from_slice(&xd[k..]);
            if dims(2) != want.as_slice() || inputs[2].dtype != x.dtype {
                return Err(Error::shape(name, &want, dims(2)));
            }
            vec![info(name, xd.to_vec(), x.dtype)?]
        }
        Op::GatherNd { batch_dims } => {
            arity(name, inputs, 2, 2)?;
            ids(name, &inputs[1])?;
            let x = &inputs[0];
            check_scalar(name, x.dtype)?;
            let (xd, id) = (x.shape.dims(), dims(1));
            let b = *batch_dims;
            let k = *id
                .last()
                .ok_or_else(|| Error::invalid(name, "indices are a scalar"))?;
            if id.len() < b + 1 || xd.len() < b + k || xd[..b] != id[..b] {
                return Err(Error::shape(name, xd, id));
            }
            let mut d = id[..id.len() - 1].to_vec();
            d.extend_from_slice(&xd[b + k..]);
            vec![info(name, d, x.dtype)?]
        }
        _ => return Err(Error::invalid(name, "not a graph-level op")),
    };
    Ok(out)
}

fn scalar(d: DType) -> bool {
    !d.is_quantized()
}

fn check_scalar(op: &str, d: DType) -> Result<()> {
    if !scalar(d) {
        return Err(Error::invalid(op, format!("{d} is a block format")));
    }
    Ok(())
}

fn ids(op: &str, t: &TensorInfo) -> Result<()> {
    if !matches!(t.dtype, DType::I32 | DType::I64) {
        return Err(Error::invalid(
            op,
            format!("indices are {}; I32 or I64 expected", t.dtype),
        ));
    }
    Ok(())
}

fn floats(op: &str, inputs: &[TensorInfo]) -> Result<()> {
    if let Some(t) = inputs.iter().find(|t| !t.dtype.is_float()) {
        return Err(Error::invalid(
            op,
            format!("input is {}; a float type expected", t.dtype),
        ));
    }
    Ok(())
}

fn scalar_one<'a>(op: &str, inputs: &'a [TensorInfo]) -> Result<&'a TensorInfo> {
    arity(op, inputs, 1, 1)?;
    check_scalar(op, inputs[0].dtype)?;
    Ok(&inputs[0])
}

fn arity(op: &str, inputs: &[TensorInfo], lo: usize, hi: usize) -> Result<()> {
    if inputs.len() < lo || inputs.len() > hi {
        return Err(Error::invalid(
            op,
            format!("takes {lo} to {hi} inputs, got {}", inputs.len()),
        ));
    }
    Ok(())
}

fn mul(op: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| Error::invalid(op, "dimension overflows"))
}

fn info(op: &str, dims: Vec<usize>, dtype: DType) -> Result<TensorInfo> {
    let shape = Shape::new(dims).map_err(|e| Error::invalid(op, e.to_string()))?;
    if dtype.bytes_for(shape.numel()).is_none() {
        return Err(Error::invalid(op, format!("{shape} of {dtype} overflows")));
    }
    Ok(TensorInfo { shape, dtype })
}

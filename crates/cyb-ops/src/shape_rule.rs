//! The shape and dtype rule of every op: which inputs it accepts and what it returns.
//!
//! `output_infos` checks everything that can be known without reading data (input count,
//! ranks, dimensions, dtypes, axes, parameters) and returns a specific error naming the op
//! otherwise. The reference runs it before computing; backends use it in `supports`.
//! Only data-dependent checks (an embedding id out of range) are left to execution.

use crate::{Op, RopeScaling, SdpaLayout};
use cyb_tensor::{DType, Error, Result, Shape, TensorInfo};
use std::ops::RangeInclusive;

/// Ok when `op`'s outputs (from [`output_infos`]) fit the host memory available now, else
/// `OutOfMemory` naming the op and the shape. Shapes can come from data (the dims of an
/// `Expand`, the repeats of a `Tile`, a broadcast of two long vectors), so whatever runs ops
/// from a file asks this before computing.
pub fn check_outputs_fit(op: &Op, outs: &[TensorInfo]) -> Result<()> {
    let bytes = outs.iter().try_fold(0u128, |sum, o| {
        cyb_tensor::memory::tensor_bytes(o.shape.dims(), o.dtype).map(|b| sum.saturating_add(b))
    });
    cyb_tensor::memory::check_host_bytes(
        || {
            let shapes: Vec<String> = outs
                .iter()
                .map(|o| format!("{} {:?}", o.dtype, o.shape.dims()))
                .collect();
            format!("op {}: output {}", op.name(), shapes.join(", "))
        },
        bytes.unwrap_or(u128::MAX),
    )
}

/// The shapes and dtypes `op` returns for inputs of these shapes and dtypes.
pub fn output_infos(op: &Op, inputs: &[TensorInfo]) -> Result<Vec<TensorInfo>> {
    let name = op.name();
    let out = match op {
        Op::MatMul { rhs_transposed } => vec![matmul(name, *rhs_transposed, inputs)?],
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            arity(name, inputs, 2..=2)?;
            float(name, inputs, 0)?;
            float(name, inputs, 1)?;
            let dims = broadcast_dims(name, inputs[0].shape.dims(), inputs[1].shape.dims())?;
            vec![f32_info(name, dims)?]
        }
        Op::Scale { .. } | Op::Silu | Op::Gelu { .. } | Op::Relu | Op::Tanh => {
            arity(name, inputs, 1..=1)?;
            float(name, inputs, 0)?;
            vec![f32_info(name, inputs[0].shape.dims().to_vec())?]
        }
        Op::RmsNorm { .. } => vec![norm(name, inputs, 1..=2, 1)?],
        Op::Linear { rhs_transposed, .. } => {
            arity(name, inputs, 3..=3)?;
            let y = matmul(name, *rhs_transposed, &inputs[..2])?;
            float(name, inputs, 2)?;
            let n = y.shape.dims().last().copied().unwrap_or(1);
            if inputs[2].shape.dims() != [n] {
                return Err(Error::shape(name, &[n], inputs[2].shape.dims()));
            }
            vec![y]
        }
        Op::AddRmsNorm { .. } | Op::AddLayerNorm { .. } => {
            let most = if matches!(op, Op::AddRmsNorm { .. }) {
                3
            } else {
                4
            };
            arity(name, inputs, 2..=most)?;
            float(name, inputs, 1)?;
            if inputs[0].shape.dims() != inputs[1].shape.dims() {
                return Err(Error::shape(
                    name,
                    inputs[0].shape.dims(),
                    inputs[1].shape.dims(),
                ));
            }
            let mut rest = vec![inputs[0].clone()];
            rest.extend_from_slice(&inputs[2..]);
            let y = norm(name, &rest, 1..=most - 1, 1)?;
            vec![y.clone(), y]
        }
        Op::LayerNorm { .. } => vec![norm(name, inputs, 1..=3, 1)?],
        Op::GroupNorm { groups, .. } => {
            let info = norm(name, inputs, 1..=3, 2)?;
            let c = inputs[0].shape.dims()[1];
            if *groups == 0 || !c.is_multiple_of(*groups) {
                return Err(Error::invalid(
                    name,
                    format!("{c} channels are not divisible into {groups} groups"),
                ));
            }
            vec![info]
        }
        Op::Rope {
            rot_dims, scaling, ..
        } => vec![rope(name, *rot_dims, scaling, inputs)?],
        Op::Sdpa { scale, layout, .. } => {
            if !scale.is_finite() {
                return Err(Error::invalid(name, format!("scale {scale} is not finite")));
            }
            vec![sdpa(name, *layout, inputs)?]
        }
        Op::Softmax { axis } => {
            arity(name, inputs, 1..=1)?;
            float(name, inputs, 0)?;
            resolve_axis(name, inputs[0].shape.rank(), *axis)?;
            vec![f32_info(name, inputs[0].shape.dims().to_vec())?]
        }
        Op::SwiGlu | Op::GeGlu { .. } => vec![glu(name, inputs)?],
        Op::Embedding => vec![embedding(name, inputs)?],
        Op::Concat { axis } => vec![concat(name, *axis, inputs)?],
        Op::Split { axis, sizes } => split(name, *axis, sizes, inputs)?,
        Op::Reshape { dims } => vec![reshape(name, dims, inputs)?],
        Op::Permute { perm } => {
            let x = scalar_one(name, inputs)?;
            let d = x.shape.dims();
            let mut seen = vec![false; d.len()];
            for &p in perm {
                match seen.get_mut(p) {
                    Some(s) if !*s => *s = true,
                    _ => {
                        return Err(Error::invalid(
                            name,
                            format!("{perm:?} is not a permutation of 0..{}", d.len()),
                        ))
                    }
                }
            }
            if perm.len() != d.len() {
                return Err(Error::invalid(
                    name,
                    format!("{perm:?} is not a permutation of 0..{}", d.len()),
                ));
            }
            let dims = perm.iter().map(|&p| d[p]).collect();
            vec![info(name, dims, x.dtype)?]
        }
        Op::Transpose { a, b } => {
            let x = scalar_one(name, inputs)?;
            let mut dims = x.shape.dims().to_vec();
            let a = resolve_axis(name, dims.len(), *a)?;
            let b = resolve_axis(name, dims.len(), *b)?;
            dims.swap(a, b);
            vec![info(name, dims, x.dtype)?]
        }
        Op::Slice {
            axis,
            start,
            end,
            step,
        } => {
            let x = scalar_one(name, inputs)?;
            let mut dims = x.shape.dims().to_vec();
            let a = resolve_axis(name, dims.len(), *axis)?;
            if *step == 0 {
                return Err(Error::invalid(name, "step must be at least 1"));
            }
            dims[a] = slice_range(dims[a], *start, *end, *step).1;
            vec![info(name, dims, x.dtype)?]
        }
        Op::ArgMax { axis } => {
            let x = numeric_one(name, inputs)?;
            let mut dims = x.shape.dims().to_vec();
            let a = resolve_axis(name, dims.len(), *axis)?;
            if dims[a] == 0 {
                return Err(Error::invalid(name, "argmax over an empty axis"));
            }
            dims.remove(a);
            vec![info(name, dims, DType::I64)?]
        }
        Op::TopK { k, axis, .. } => {
            let x = numeric_one(name, inputs)?;
            let mut dims = x.shape.dims().to_vec();
            let a = resolve_axis(name, dims.len(), *axis)?;
            if *k > dims[a] {
                return Err(Error::invalid(
                    name,
                    format!("k = {k} exceeds the axis length {}", dims[a]),
                ));
            }
            dims[a] = *k;
            vec![f32_info(name, dims.clone())?, info(name, dims, DType::I64)?]
        }
        Op::CumSum { axis, .. } => {
            let x = numeric_one(name, inputs)?;
            resolve_axis(name, x.shape.rank(), *axis)?;
            let to = if x.dtype == DType::F64 || x.dtype.is_integer() {
                x.dtype
            } else {
                DType::F32
            };
            vec![info(name, x.shape.dims().to_vec(), to)?]
        }
        Op::Unary { .. }
        | Op::Binary { .. }
        | Op::Where
        | Op::Reduce { .. }
        | Op::ArgReduce { .. }
        | Op::Gather { .. }
        | Op::GatherElements { .. }
        | Op::Expand { .. }
        | Op::Tile { .. }
        | Op::SliceNd { .. }
        | Op::Pad { .. }
        | Op::Conv { .. }
        | Op::Pool { .. }
        | Op::LogSoftmax { .. }
        | Op::BatchNorm { .. }
        | Op::LayerNormNd { .. }
        | Op::Trilu { .. }
        | Op::ConvTranspose { .. }
        | Op::QuantizeLinear { .. }
        | Op::DequantizeLinear { .. }
        | Op::MatMulInteger
        | Op::ScatterElements { .. }
        | Op::ScatterNd { .. }
        | Op::GatherNd { .. } => crate::shape_rule_nd::output_infos(op, inputs)?,
        Op::Cast { to } => {
            arity(name, inputs, 1..=1)?;
            let x = &inputs[0];
            if to.is_quantized() && !x.shape.last().is_multiple_of(to.block_elems()) {
                return Err(Error::invalid(
                    name,
                    format!(
                        "rows of {} values are not whole {to} blocks of {}",
                        x.shape.last(),
                        to.block_elems()
                    ),
                ));
            }
            vec![info(name, x.shape.dims().to_vec(), *to)?]
        }
        Op::KvAppend { start } => vec![kv_append(name, *start, inputs)?],
    };
    Ok(out)
}

fn kv_append(op: &str, start: usize, inputs: &[TensorInfo]) -> Result<TensorInfo> {
    arity(op, inputs, 2..=2)?;
    let (cache, new) = (&inputs[0], &inputs[1]);
    if cache.dtype != DType::F32 || new.dtype != DType::F32 {
        return Err(Error::invalid(
            op,
            format!(
                "cache and new rows must be F32, got {} and {}",
                cache.dtype, new.dtype
            ),
        ));
    }
    let (c, n) = (cache.shape.dims(), new.shape.dims());
    let &[heads, capacity, d] = c else {
        return Err(Error::invalid(
            op,
            format!("cache must be [heads, capacity, d], got {c:?}"),
        ));
    };
    let rows = n.first().copied().unwrap_or(0);
    if n.len() != 3 || n[1..] != [heads, d] {
        return Err(Error::ShapeMismatch {
            op: format!("{op}: new rows [n, heads, d]"),
            expected: vec![rows, heads, d],
            got: n.to_vec(),
        });
    }
    if start.checked_add(rows).is_none_or(|end| end > capacity) {
        return Err(Error::invalid(
            op,
            format!("{rows} rows at position {start} do not fit a cache of {capacity}"),
        ));
    }
    Ok(cache.clone())
}

/// Broadcasts two shapes numpy-style (aligned at the right; a dimension of 1 stretches).
pub fn broadcast_dims(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for (i, o) in out.iter_mut().enumerate() {
        let da = (i + a.len()).checked_sub(r).map_or(1, |j| a[j]);
        let db = (i + b.len()).checked_sub(r).map_or(1, |j| b[j]);
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(Error::shape(op, a, b)),
        };
    }
    Ok(out)
}

/// Resolves a possibly negative axis; rank-0 tensors have no axis.
pub fn resolve_axis(op: &str, rank: usize, axis: isize) -> Result<usize> {
    let r = rank as isize;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return Err(Error::invalid(
            op,
            format!("axis {axis} out of range for rank {rank}"),
        ));
    }
    Ok(a as usize)
}

/// Python slice semantics for positive `step`: the first index and the element count.
pub fn slice_range(len: usize, start: isize, end: isize, step: usize) -> (usize, usize) {
    let clamp = |i: isize| -> usize {
        let n = len as isize;
        let i = if i < 0 { i + n } else { i };
        i.clamp(0, n) as usize
    };
    let (s, e) = (clamp(start), clamp(end));
    let count = if e > s {
        (e - s).div_ceil(step.max(1))
    } else {
        0
    };
    (s, count)
}

fn info(op: &str, dims: Vec<usize>, dtype: DType) -> Result<TensorInfo> {
    let shape = Shape::new(dims).map_err(|e| Error::invalid(op, e.to_string()))?;
    Ok(TensorInfo { shape, dtype })
}

fn f32_info(op: &str, dims: Vec<usize>) -> Result<TensorInfo> {
    info(op, dims, DType::F32)
}

fn arity(op: &str, inputs: &[TensorInfo], n: RangeInclusive<usize>) -> Result<()> {
    if !n.contains(&inputs.len()) {
        return Err(Error::invalid(
            op,
            format!(
                "takes {} to {} inputs, got {}",
                n.start(),
                n.end(),
                inputs.len()
            ),
        ));
    }
    Ok(())
}

fn float(op: &str, inputs: &[TensorInfo], i: usize) -> Result<()> {
    let d = inputs[i].dtype;
    if !d.is_float() {
        return Err(Error::invalid(
            op,
            format!("input {i} is {d}; F32, F16 or BF16 expected"),
        ));
    }
    Ok(())
}

fn integer_ids(op: &str, inputs: &[TensorInfo], i: usize) -> Result<()> {
    let d = inputs[i].dtype;
    if !matches!(d, DType::I32 | DType::I64) {
        return Err(Error::invalid(
            op,
            format!("input {i} is {d}; I32 or I64 expected"),
        ));
    }
    Ok(())
}

/// One input of a scalar (non-block) dtype, for the layout ops.
fn scalar_one<'a>(op: &str, inputs: &'a [TensorInfo]) -> Result<&'a TensorInfo> {
    arity(op, inputs, 1..=1)?;
    let x = &inputs[0];
    if x.dtype.is_quantized() {
        return Err(Error::invalid(
            op,
            format!("{} is a block format; only scalar dtypes", x.dtype),
        ));
    }
    Ok(x)
}

/// One float or integer input, for the reductions (integers are read as f32).
fn numeric_one<'a>(op: &str, inputs: &'a [TensorInfo]) -> Result<&'a TensorInfo> {
    let x = scalar_one(op, inputs)?;
    if x.dtype == DType::Bool {
        return Err(Error::invalid(op, "BOOL input; a number type expected"));
    }
    Ok(x)
}

/// A float `[.., d]` tensor (at least `min_rank` dims) with optional `[d]` weight and bias,
/// where `d` is the last dimension (or the channel dimension 1 for group norm).
fn norm(
    op: &str,
    inputs: &[TensorInfo],
    n: RangeInclusive<usize>,
    min_rank: usize,
) -> Result<TensorInfo> {
    arity(op, inputs, n)?;
    let x = inputs[0].shape.dims();
    if x.len() < min_rank {
        return Err(Error::invalid(
            op,
            format!("input of rank {} needs rank ≥ {min_rank}", x.len()),
        ));
    }
    let d = if min_rank == 2 { x[1] } else { x[x.len() - 1] };
    for i in 0..inputs.len() {
        float(op, inputs, i)?;
        if i > 0 && inputs[i].shape.dims() != [d] {
            return Err(Error::shape(op, &[d], inputs[i].shape.dims()));
        }
    }
    f32_info(op, x.to_vec())
}

fn matmul(op: &str, rhs_transposed: bool, inputs: &[TensorInfo]) -> Result<TensorInfo> {
    arity(op, inputs, 2..=2)?;
    float(op, inputs, 0)?;
    let (a, b) = (inputs[0].shape.dims(), inputs[1].shape.dims());
    let bd = inputs[1].dtype;
    let b_ok = bd.is_float() || (rhs_transposed && bd.is_quantized());
    if !b_ok {
        return Err(Error::invalid(
            op,
            format!("weight dtype {bd} (rhs_transposed = {rhs_transposed}) is not supported"),
        ));
    }
    if a.len() < 2 || b.len() < 2 {
        return Err(Error::invalid(op, "both inputs need rank ≥ 2"));
    }
    let (m, k) = (a[a.len() - 2], a[a.len() - 1]);
    let (kb, n) = if rhs_transposed {
        (b[b.len() - 1], b[b.len() - 2])
    } else {
        (b[b.len() - 2], b[b.len() - 1])
    };
    if k != kb {
        return Err(Error::shape(op, a, b));
    }
    let mut dims = broadcast_dims(op, &a[..a.len() - 2], &b[..b.len() - 2])?;
    dims.extend([m, n]);
    f32_info(op, dims)
}

fn rope(
    op: &str,
    rot_dims: usize,
    scaling: &RopeScaling,
    inputs: &[TensorInfo],
) -> Result<TensorInfo> {
    arity(op, inputs, 2..=3)?;
    float(op, inputs, 0)?;
    integer_ids(op, inputs, 1)?;
    let x = inputs[0].shape.dims();
    if x.len() < 3 {
        return Err(Error::invalid(
            op,
            "x needs rank ≥ 3: [.., seq, heads, head_dim]",
        ));
    }
    let (seq, head_dim) = (x[x.len() - 3], x[x.len() - 1]);
    if inputs[1].shape.dims() != [seq] {
        return Err(Error::shape(op, &[seq], inputs[1].shape.dims()));
    }
    if !rot_dims.is_multiple_of(2) || rot_dims > head_dim || rot_dims == 0 {
        return Err(Error::invalid(
            op,
            format!("rot_dims {rot_dims} must be even, > 0 and ≤ head_dim {head_dim}"),
        ));
    }
    if let Some(factors) = inputs.get(2) {
        float(op, inputs, 2)?;
        if factors.shape.dims() != [rot_dims / 2] {
            return Err(Error::shape(op, &[rot_dims / 2], factors.shape.dims()));
        }
    }
    // Written as "is valid" tests so a NaN parameter is rejected too.
    let bad = match *scaling {
        RopeScaling::None => None,
        RopeScaling::Linear { factor } => {
            let ok = factor > 0.0;
            (!ok).then_some("factor must be > 0")
        }
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position,
        } => {
            let ok = factor > 0.0
                && low_freq_factor > 0.0
                && high_freq_factor > low_freq_factor
                && original_max_position > 0;
            (!ok).then_some(
                "needs factor > 0, 0 < low_freq_factor < high_freq_factor, original_max_position > 0",
            )
        }
        RopeScaling::Yarn {
            factor,
            original_max_position,
            beta_fast,
            beta_slow,
            ..
        } => {
            let ok =
                factor > 0.0 && beta_fast > 0.0 && beta_slow > 0.0 && original_max_position > 0;
            (!ok).then_some("needs factor, beta_fast, beta_slow and original_max_position > 0")
        }
    };
    if let Some(reason) = bad {
        return Err(Error::invalid(op, format!("{scaling:?}: {reason}")));
    }
    f32_info(op, x.to_vec())
}

fn sdpa(op: &str, layout: SdpaLayout, inputs: &[TensorInfo]) -> Result<TensorInfo> {
    arity(op, inputs, 3..=4)?;
    for i in 0..inputs.len() {
        float(op, inputs, i)?;
    }
    let (q, k, v) = (
        inputs[0].shape.dims(),
        inputs[1].shape.dims(),
        inputs[2].shape.dims(),
    );
    let r = q.len();
    if r < 3 || k.len() != r || v.len() != r {
        return Err(Error::invalid(
            op,
            format!("q, k, v need one rank ≥ 3, got {q:?}, {k:?}, {v:?}"),
        ));
    }
    // The axes of the heads and of the sequence.
    let (ha, la) = match layout {
        SdpaLayout::HeadMajor => (r - 3, r - 2),
        SdpaLayout::TokenMajor => (r - 2, r - 3),
    };
    let (hq, lq, d) = (q[ha], q[la], q[r - 1]);
    let (hkv, lk) = (k[ha], k[la]);
    let shapes_fit = q[..r - 3] == k[..r - 3]
        && k[..r - 3] == v[..r - 3]
        && k[r - 1] == d
        && v[ha] == hkv
        && v[la] == lk
        && hkv > 0
        && hq % hkv == 0;
    if !shapes_fit {
        return Err(Error::shape(op, q, k));
    }
    let mut out = q.to_vec();
    out[r - 1] = v[r - 1];
    if let Some(mask) = inputs.get(3) {
        let mut scores = q[..r - 3].to_vec();
        scores.extend([hq, lq, lk]);
        let m = mask.shape.dims();
        if m.len() > scores.len() || broadcast_dims(op, &scores, m)? != scores {
            return Err(Error::shape(op, &scores, m));
        }
    }
    f32_info(op, out)
}

fn glu(op: &str, inputs: &[TensorInfo]) -> Result<TensorInfo> {
    arity(op, inputs, 1..=2)?;
    for i in 0..inputs.len() {
        float(op, inputs, i)?;
    }
    let mut dims = inputs[0].shape.dims().to_vec();
    if inputs.len() == 2 {
        if inputs[1].shape.dims() != dims {
            return Err(Error::shape(op, &dims, inputs[1].shape.dims()));
        }
    } else {
        match dims.last_mut() {
            Some(last) if *last % 2 == 0 => *last /= 2,
            _ => {
                return Err(Error::invalid(
                    op,
                    format!("one fused input needs an even last dimension, got {dims:?}"),
                ))
            }
        }
    }
    f32_info(op, dims)
}

fn embedding(op: &str, inputs: &[TensorInfo]) -> Result<TensorInfo> {
    arity(op, inputs, 2..=2)?;
    integer_ids(op, inputs, 1)?;
    let t = &inputs[0];
    if t.shape.rank() != 2 || t.dtype.is_integer() {
        return Err(Error::invalid(
            op,
            format!("table must be a rank-2 float or block tensor, got {t:?}"),
        ));
    }
    let mut dims = inputs[1].shape.dims().to_vec();
    dims.push(t.shape.dims()[1]);
    f32_info(op, dims)
}

fn concat(op: &str, axis: isize, inputs: &[TensorInfo]) -> Result<TensorInfo> {
    let first = inputs
        .first()
        .ok_or_else(|| Error::invalid(op, "takes at least one input"))?;
    let a = resolve_axis(op, first.shape.rank(), axis)?;
    let mut dims = first.shape.dims().to_vec();
    dims[a] = 0;
    for x in inputs {
        scalar_one(op, std::slice::from_ref(x))?;
        if x.dtype != first.dtype {
            return Err(Error::invalid(
                op,
                format!("dtypes differ: {} and {}", first.dtype, x.dtype),
            ));
        }
        let d = x.shape.dims();
        let same_rest = d.len() == dims.len()
            && d.iter()
                .zip(first.shape.dims())
                .enumerate()
                .all(|(i, (p, q))| i == a || p == q);
        if !same_rest {
            return Err(Error::shape(op, first.shape.dims(), d));
        }
        dims[a] = dims[a]
            .checked_add(d[a])
            .ok_or_else(|| Error::invalid(op, "concatenated length overflows"))?;
    }
    info(op, dims, first.dtype)
}

fn split(op: &str, axis: isize, sizes: &[usize], inputs: &[TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = scalar_one(op, inputs)?;
    let a = resolve_axis(op, x.shape.rank(), axis)?;
    let total = sizes.iter().try_fold(0usize, |s, &n| s.checked_add(n));
    if total != Some(x.shape.dims()[a]) {
        return Err(Error::invalid(
            op,
            format!(
                "sizes {sizes:?} do not sum to the axis length {}",
                x.shape.dims()[a]
            ),
        ));
    }
    sizes
        .iter()
        .map(|&n| {
            let mut dims = x.shape.dims().to_vec();
            dims[a] = n;
            info(op, dims, x.dtype)
        })
        .collect()
}

fn reshape(op: &str, dims: &[isize], inputs: &[TensorInfo]) -> Result<TensorInfo> {
    arity(op, inputs, 1..=1)?;
    let x = &inputs[0];
    let numel = x.shape.numel();
    let mut inferred = None;
    let mut known = 1usize;
    for (i, &d) in dims.iter().enumerate() {
        match d {
            -1 if inferred.is_none() => inferred = Some(i),
            d if d >= 0 => {
                known = known
                    .checked_mul(d as usize)
                    .ok_or_else(|| Error::invalid(op, format!("{dims:?} overflows")))?;
            }
            _ => {
                return Err(Error::invalid(
                    op,
                    format!("{dims:?}: only one -1 and no other negative size allowed"),
                ))
            }
        }
    }
    let mut out: Vec<usize> = dims.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(i) = inferred {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(Error::shape(op, x.shape.dims(), &out));
        }
        out[i] = numel / known;
    } else if known != numel {
        return Err(Error::shape(op, x.shape.dims(), &out));
    }
    let be = x.dtype.block_elems();
    if be > 1 && !out.last().copied().unwrap_or(1).is_multiple_of(be) {
        return Err(Error::invalid(
            op,
            format!("{out:?} would split {} blocks of {be} values", x.dtype),
        ));
    }
    info(op, out, x.dtype)
}

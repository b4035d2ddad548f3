//! Ops that only move elements, for any dtype with a fixed element size: `SliceNd` (each
//! output row one run of bytes where its step along the last axis is 1), `Concat` (each
//! input's block under one index of the leading dims one copy) and `Pad` (each output row
//! its input row's runs between the padding; constant padding of F32 only). The same bytes the
//! reference moves one element at a time.

use cyb_ops::{Op, PadMode};
use cyb_tensor::{AlignedBuf, DType, Error, Result, Shape, Storage, Tensor, TensorInfo};
use std::sync::Arc;

/// Bytes of one element, for dtypes that have whole elements (not block formats).
fn elem_bytes(dtype: DType) -> Option<usize> {
    (!dtype.is_quantized()).then(|| dtype.block_bytes())
}

pub(crate) fn supports(op: &Op, inputs: &[TensorInfo]) -> bool {
    match op {
        Op::SliceNd { .. } => {
            matches!(inputs, [x] if x.shape.rank() > 0 && elem_bytes(x.dtype).is_some())
        }
        Op::Pad { mode, .. } => {
            matches!(inputs, [x] if x.shape.rank() > 0 && elem_bytes(x.dtype).is_some()
                && (x.dtype == DType::F32 || !matches!(mode, PadMode::Constant { .. })))
        }
        Op::Concat { .. } => inputs.first().is_some_and(|x| {
            elem_bytes(x.dtype).is_some() && inputs.iter().all(|i| i.dtype == x.dtype)
        }),
        _ => false,
    }
}

pub(crate) fn execute(op: &Op, inputs: &[Tensor]) -> Result<Tensor> {
    let infos: Vec<TensorInfo> = inputs.iter().map(Tensor::info).collect();
    let out = cyb_ops::output_infos(op, &infos)?;
    let od = out[0].shape.dims();
    let dtype = inputs[0].dtype();
    let es = elem_bytes(dtype).ok_or_else(|| Error::invalid(op.name(), "not whole elements"))?;
    let n: usize = od.iter().product();
    cyb_tensor::memory::check_tensor(op.name(), od, dtype)?;
    // Every byte is written below.
    let mut buf = AlignedBuf::for_overwrite(n * es);
    let dst = buf.as_bytes_mut();
    match op {
        Op::SliceNd {
            starts,
            ends,
            axes,
            steps,
        } => slice_nd(&inputs[0], (starts, ends, axes, steps), od, es, dst)?,
        Op::Concat { axis } => concat(inputs, *axis, od, es, dst)?,
        Op::Pad { pads, mode } => pad(&inputs[0], pads, *mode, od, es, dst)?,
        _ => return Err(Error::invalid(op.name(), "not a layout op")),
    }
    Tensor::new(Shape::new(od)?, dtype, Storage::Host(Arc::new(buf)))
}

/// The next output row's index over the leading dims `pos` of `od` (row-major order).
fn next_row(pos: &mut [usize], od: &[usize]) {
    for k in (0..pos.len()).rev() {
        pos[k] += 1;
        if pos[k] < od[k] {
            return;
        }
        pos[k] = 0;
    }
}

fn bytes<'a>(op: &str, t: &'a Tensor) -> Result<&'a [u8]> {
    t.host_bytes()
        .ok_or_else(|| Error::invalid(op, "input not in host memory"))
}

fn slice_nd(
    x: &Tensor,
    (starts, ends, axes, steps): (&[isize], &[isize], &[isize], &[isize]),
    od: &[usize],
    es: usize,
    dst: &mut [u8],
) -> Result<()> {
    let xd = x.dims();
    let r = xd.len();
    let (mut first, mut step) = (vec![0isize; r], vec![1isize; r]);
    for (i, &axis) in axes.iter().enumerate() {
        let a = cyb_ops::resolve_axis("slice_nd", r, axis)?;
        first[a] = cyb_ops::slice_steps(xd[a], starts[i], ends[i], steps[i]).0;
        step[a] = steps[i];
    }
    if dst.is_empty() {
        return Ok(());
    }
    let src = bytes("slice_nd", x)?;
    // Element strides of the input.
    let xs: Vec<isize> = Shape::new(xd)?
        .strides()
        .iter()
        .map(|&s| s as isize)
        .collect();
    let row = od[r - 1];
    let mut pos = vec![0usize; r - 1];
    for out_row in dst.chunks_exact_mut(row * es) {
        // The row's first element in the input.
        let base = (0..r - 1)
            .map(|k| (first[k] + pos[k] as isize * step[k]) * xs[k])
            .sum::<isize>()
            + first[r - 1];
        let at = |j: usize| -> Result<usize> {
            usize::try_from(base + j as isize * step[r - 1])
                .ok()
                .filter(|&e| (e + 1) * es <= src.len())
                .map(|e| e * es)
                .ok_or_else(|| Error::invalid("slice_nd", "element outside the input"))
        };
        if step[r - 1] == 1 {
            let s = at(0)?;
            let run = src
                .get(s..s + row * es)
                .ok_or_else(|| Error::invalid("slice_nd", "row outside the input"))?;
            out_row.copy_from_slice(run);
        } else {
            for (j, o) in out_row.chunks_exact_mut(es).enumerate() {
                let s = at(j)?;
                o.copy_from_slice(&src[s..s + es]);
            }
        }
        next_row(&mut pos, od);
    }
    Ok(())
}

fn concat(inputs: &[Tensor], axis: isize, od: &[usize], es: usize, dst: &mut [u8]) -> Result<()> {
    let a = cyb_ops::resolve_axis("concat", od.len(), axis)?;
    let outer: usize = od[..a].iter().product();
    let srcs: Vec<(&[u8], usize)> = inputs
        .iter()
        .map(|t| {
            let block = t.dims()[a..].iter().product::<usize>() * es;
            Ok((bytes("concat", t)?, block))
        })
        .collect::<Result<_>>()?;
    let mut at = 0;
    for o in 0..outer {
        for &(src, block) in &srcs {
            let run = src
                .get(o * block..(o + 1) * block)
                .ok_or_else(|| Error::invalid("concat", "input shorter than its shape"))?;
            dst[at..at + block].copy_from_slice(run);
            at += block;
        }
    }
    Ok(())
}

/// The input index under output index `p` of a dim of `n` with `begin` padding, or `None` for a
/// padding value (the reference's mapping).
fn pad_source(p: usize, begin: isize, n: usize, mode: PadMode) -> Option<usize> {
    let n = n as isize;
    let q = p as isize - begin;
    if (0..n).contains(&q) {
        return Some(q as usize);
    }
    match mode {
        PadMode::Constant { .. } => None,
        PadMode::Edge => Some(q.clamp(0, n - 1) as usize),
        PadMode::Reflect if n == 1 => Some(0),
        PadMode::Reflect => {
            let period = 2 * (n - 1);
            let r = q.rem_euclid(period);
            Some(if r >= n { period - r } else { r } as usize)
        }
    }
}

fn pad(
    x: &Tensor,
    pads: &[isize],
    mode: PadMode,
    od: &[usize],
    es: usize,
    dst: &mut [u8],
) -> Result<()> {
    let xd = x.dims();
    let r = xd.len();
    if pads.len() != 2 * r {
        return Err(Error::invalid(
            "pad",
            format!("{} pads for rank {r}", pads.len()),
        ));
    }
    if dst.is_empty() {
        return Ok(());
    }
    if !matches!(mode, PadMode::Constant { .. }) && xd.contains(&0) {
        return Err(Error::invalid(
            "pad",
            "reflect/edge padding of an empty dimension",
        ));
    }
    let fill: Vec<u8> = match mode {
        PadMode::Constant { value } => value.to_le_bytes().to_vec(),
        _ => vec![0; es],
    };
    let src = bytes("pad", x)?;
    let (row, n_last) = (od[r - 1], xd[r - 1]);
    // The last dim's sources as runs: (output start, length, first input index or padding).
    let mut runs: Vec<(usize, usize, Option<usize>)> = Vec::new();
    for j in 0..row {
        let s = pad_source(j, pads[r - 1], n_last, mode);
        match runs.last_mut() {
            Some((start, len, Some(f))) if s == Some(*f + (j - *start)) => *len += 1,
            Some((_, len, None)) if s.is_none() => *len += 1,
            _ => runs.push((j, 1, s)),
        }
    }
    let mut pos = vec![0usize; r - 1];
    for out_row in dst.chunks_exact_mut(row * es) {
        // The input row under this output row, unless a leading dim falls in the padding.
        let mut base = Some(0usize);
        for k in 0..r - 1 {
            base = match (base, pad_source(pos[k], pads[k], xd[k], mode)) {
                (Some(b), Some(i)) => Some(b * xd[k] + i),
                _ => None,
            };
        }
        for &(start, len, first) in &runs {
            let out = &mut out_row[start * es..(start + len) * es];
            match (base, first) {
                (Some(b), Some(f)) => {
                    let at = (b * n_last + f) * es;
                    let run = src
                        .get(at..at + len * es)
                        .ok_or_else(|| Error::invalid("pad", "row outside the input"))?;
                    out.copy_from_slice(run);
                }
                _ => out
                    .chunks_exact_mut(es)
                    .for_each(|o| o.copy_from_slice(&fill)),
            }
        }
        next_row(&mut pos, od);
    }
    Ok(())
}

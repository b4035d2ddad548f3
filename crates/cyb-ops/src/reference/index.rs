//! Data-moving graph ops: `Gather`, `GatherElements`, `Expand`, `Tile`, `SliceNd`, `Pad`,
//! `Trilu`. They copy whole elements, so every scalar dtype works unchanged.

use super::values::{move_elems, strides, unravel};
use super::{axis_of, broadcast_offset, broadcast_strides};
use crate::shape_rule_nd::slice_steps;
use crate::PadMode;
use cyb_tensor::{Error, Result, Tensor, TensorInfo};

/// Index values, negative ones counted from the end of a dim of `len`; out of range is an error.
fn indices(op: &str, idx: &Tensor, len: usize) -> Result<Vec<usize>> {
    idx.to_i64_vec()?
        .into_iter()
        .map(|i| {
            let j = if i < 0 { i + len as i64 } else { i };
            if j < 0 || j >= len as i64 {
                return Err(Error::invalid(
                    op,
                    format!("index {i} out of range for {len}"),
                ));
            }
            Ok(j as usize)
        })
        .collect()
}

pub(super) fn gather(axis: isize, x: &Tensor, idx: &Tensor, out: &TensorInfo) -> Result<Tensor> {
    let a = axis_of("gather", x, axis)?;
    let d = x.dims();
    let ids = indices("gather", idx, d[a])?;
    let inner: usize = d[a + 1..].iter().product();
    let (n_ids, len) = (ids.len().max(1), d[a]);
    move_elems("gather", x, out.shape.dims(), None, |i| {
        let (o, rest) = (i / (n_ids * inner).max(1), i % (n_ids * inner).max(1));
        let (k, n) = (rest / inner.max(1), rest % inner.max(1));
        Some((o * len + ids[k]) * inner + n)
    })
}

pub(super) fn gather_elements(
    axis: isize,
    x: &Tensor,
    idx: &Tensor,
    out: &TensorInfo,
) -> Result<Tensor> {
    let a = axis_of("gather_elements", x, axis)?;
    let xd = x.dims();
    let ids = indices("gather_elements", idx, xd[a])?;
    let (od, xs) = (idx.dims().to_vec(), strides(xd));
    let mut pos = vec![0; od.len()];
    let src: Vec<usize> = (0..ids.len())
        .map(|i| {
            unravel(i, &od, &mut pos);
            pos[a] = ids[i];
            pos.iter().zip(&xs).map(|(p, s)| p * s).sum()
        })
        .collect();
    move_elems("gather_elements", x, out.shape.dims(), None, |i| {
        src.get(i).copied()
    })
}

pub(super) fn expand(x: &Tensor, out: &TensorInfo) -> Result<Tensor> {
    let od = out.shape.dims();
    let st = broadcast_strides(x.dims(), od);
    move_elems("expand", x, od, None, |i| {
        Some(broadcast_offset(i, od, &st))
    })
}

pub(super) fn tile(x: &Tensor, out: &TensorInfo) -> Result<Tensor> {
    let (xd, od) = (x.dims().to_vec(), out.shape.dims());
    let xs = strides(&xd);
    let mut pos = vec![0; od.len()];
    move_elems("tile", x, od, None, |i| {
        unravel(i, od, &mut pos);
        Some(
            pos.iter()
                .zip(&xd)
                .zip(&xs)
                .map(|((p, d), s)| (p % d) * s)
                .sum(),
        )
    })
}

pub(super) fn slice_nd(
    starts: &[isize],
    ends: &[isize],
    axes: &[isize],
    steps: &[isize],
    x: &Tensor,
    out: &TensorInfo,
) -> Result<Tensor> {
    let xd = x.dims();
    let r = xd.len();
    let (mut first, mut step) = (vec![0isize; r], vec![1isize; r]);
    for i in 0..starts.len() {
        let a = axis_of("slice_nd", x, axes[i])?;
        first[a] = slice_steps(xd[a], starts[i], ends[i], steps[i]).0;
        step[a] = steps[i];
    }
    let (od, xs) = (out.shape.dims(), strides(xd));
    let mut pos = vec![0; r];
    move_elems("slice_nd", x, od, None, |i| {
        unravel(i, od, &mut pos);
        let mut off = 0isize;
        for k in 0..r {
            off += (first[k] + pos[k] as isize * step[k]) * xs[k] as isize;
        }
        usize::try_from(off).ok()
    })
}

pub(super) fn pad(pads: &[isize], mode: PadMode, x: &Tensor, out: &TensorInfo) -> Result<Tensor> {
    let xd = x.dims().to_vec();
    let r = xd.len();
    let od = out.shape.dims();
    let fill = match mode {
        PadMode::Constant { value } => {
            let t = super::values::write_f32(&[1], x.dtype(), &[value])?;
            t.host_bytes().map(<[u8]>::to_vec)
        }
        _ => None,
    };
    if !matches!(mode, PadMode::Constant { .. }) && xd.contains(&0) && out.shape.numel() > 0 {
        return Err(Error::invalid(
            "pad",
            "reflect/edge padding of an empty dimension",
        ));
    }
    let xs = strides(&xd);
    let mut pos = vec![0; r];
    move_elems("pad", x, od, fill.as_deref(), |i| {
        unravel(i, od, &mut pos);
        let mut off = 0usize;
        for k in 0..r {
            let n = xd[k] as isize;
            let mut p = pos[k] as isize - pads[k];
            if p < 0 || p >= n {
                match mode {
                    PadMode::Constant { .. } => return None,
                    PadMode::Edge => p = p.clamp(0, n - 1),
                    PadMode::Reflect => {
                        if n == 1 {
                            p = 0;
                        } else {
                            let period = 2 * (n - 1);
                            p = p.rem_euclid(period);
                            if p >= n {
                                p = period - p;
                            }
                        }
                    }
                }
            }
            off += p as usize * xs[k];
        }
        Some(off)
    })
}

pub(super) fn trilu(upper: bool, k: i64, x: &Tensor, out: &TensorInfo) -> Result<Tensor> {
    let d = x.dims();
    let (rows, cols) = (d[d.len() - 2], d[d.len() - 1]);
    let zero = vec![0u8; x.dtype().block_bytes()];
    move_elems("trilu", x, out.shape.dims(), Some(&zero), |i| {
        let (r, c) = ((i / cols.max(1)) % rows.max(1), i % cols.max(1));
        let diff = c as i64 - r as i64;
        let keep = if upper { diff >= k } else { diff <= k };
        keep.then_some(i)
    })
}

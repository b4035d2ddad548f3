//! `ScatterElements`, `ScatterNd` and `GatherNd`: index-driven writes and reads.

use super::axis_of;
use super::values::{move_elems, read, strides, unravel, write_f32, write_f64, write_i64, Vals};
use crate::ScatterReduction;
use cyb_tensor::{Error, Result, Tensor, TensorInfo};

fn index(op: &str, i: i64, len: usize) -> Result<usize> {
    let j = if i < 0 { i + len as i64 } else { i };
    if j < 0 || j >= len as i64 {
        return Err(Error::invalid(
            op,
            format!("index {i} out of range for {len}"),
        ));
    }
    Ok(j as usize)
}

fn combine<T: Copy + PartialOrd + std::ops::Add<Output = T> + std::ops::Mul<Output = T>>(
    r: ScatterReduction,
    old: T,
    new: T,
) -> T {
    match r {
        ScatterReduction::None => new,
        ScatterReduction::Add => old + new,
        ScatterReduction::Mul => old * new,
        ScatterReduction::Max => {
            if new > old {
                new
            } else {
                old
            }
        }
        ScatterReduction::Min => {
            if new < old {
                new
            } else {
                old
            }
        }
    }
}

/// Applies `(target flat index, update flat index)` pairs to `data` with `r`.
fn apply(
    r: ScatterReduction,
    data: &Tensor,
    upd: &Tensor,
    pairs: &[(usize, usize)],
) -> Result<Tensor> {
    match (read(data)?, read(upd)?) {
        (Vals::F(mut y), Vals::F(u)) => {
            for &(t, s) in pairs {
                y[t] = combine(r, y[t], u[s]);
            }
            write_f32(data.dims(), data.dtype(), &y)
        }
        (Vals::D(mut y), Vals::D(u)) => {
            for &(t, s) in pairs {
                y[t] = combine(r, y[t], u[s]);
            }
            write_f64(data.dims(), data.dtype(), &y)
        }
        (Vals::I(mut y), Vals::I(u)) => {
            for &(t, s) in pairs {
                y[t] = match r {
                    ScatterReduction::Add => y[t].wrapping_add(u[s]),
                    ScatterReduction::Mul => y[t].wrapping_mul(u[s]),
                    _ => combine(r, y[t], u[s]),
                };
            }
            write_i64(data.dims(), data.dtype(), &y)
        }
        _ => Err(Error::invalid("scatter", "data and updates differ in kind")),
    }
}

pub(super) fn scatter_elements(
    axis: isize,
    r: ScatterReduction,
    inputs: &[Tensor],
) -> Result<Tensor> {
    let (data, idx, upd) = (&inputs[0], &inputs[1], &inputs[2]);
    let a = axis_of("scatter_elements", data, axis)?;
    let (dd, id) = (data.dims(), idx.dims());
    let ds = strides(dd);
    let ids = idx.to_i64_vec()?;
    let mut pos = vec![0; id.len()];
    let mut pairs = Vec::with_capacity(ids.len());
    for (i, &v) in ids.iter().enumerate() {
        unravel(i, id, &mut pos);
        pos[a] = index("scatter_elements", v, dd[a])?;
        if pos.iter().zip(dd).any(|(p, d)| p >= d) {
            return Err(Error::invalid(
                "scatter_elements",
                "index position outside data",
            ));
        }
        pairs.push((pos.iter().zip(&ds).map(|(p, s)| p * s).sum(), i));
    }
    apply(r, data, upd, &pairs)
}

/// Flat offsets into `data` of the index tuples in `idx` (`[.., k]`), over `batch` leading dims
/// shared by both, and the size of the slice each tuple selects.
fn tuples(op: &str, data: &[usize], idx: &Tensor, batch: usize) -> Result<(Vec<usize>, usize)> {
    let id = idx.dims();
    let k = id[id.len() - 1];
    let slice: usize = data[batch + k..].iter().product();
    let ds = strides(data);
    let v = idx.to_i64_vec()?;
    let per_batch: usize = id[batch..id.len() - 1].iter().product();
    let n_tuples: usize = id[..id.len() - 1].iter().product();
    let mut offs = Vec::with_capacity(n_tuples);
    let mut bpos = vec![0; batch];
    for t in 0..n_tuples {
        unravel(t / per_batch.max(1), &data[..batch], &mut bpos);
        let mut off: usize = bpos.iter().zip(&ds).map(|(p, s)| p * s).sum();
        for (j, &x) in v[t * k..(t + 1) * k].iter().enumerate() {
            off += index(op, x, data[batch + j])? * ds[batch + j];
        }
        offs.push(off);
    }
    Ok((offs, slice))
}

pub(super) fn scatter_nd(r: ScatterReduction, inputs: &[Tensor]) -> Result<Tensor> {
    let (data, idx, upd) = (&inputs[0], &inputs[1], &inputs[2]);
    let (offs, slice) = tuples("scatter_nd", data.dims(), idx, 0)?;
    let pairs: Vec<(usize, usize)> = offs
        .iter()
        .enumerate()
        .flat_map(|(t, &o)| (0..slice).map(move |e| (o + e, t * slice + e)))
        .collect();
    apply(r, data, upd, &pairs)
}

pub(super) fn gather_nd(batch: usize, inputs: &[Tensor], out: &TensorInfo) -> Result<Tensor> {
    let (data, idx) = (&inputs[0], &inputs[1]);
    let (offs, slice) = tuples("gather_nd", data.dims(), idx, batch)?;
    move_elems("gather_nd", data, out.shape.dims(), None, |i| {
        offs.get(i / slice.max(1)).map(|o| o + i % slice.max(1))
    })
}

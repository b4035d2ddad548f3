//! Reductions along an axis: argmax, top-k (integer inputs read as f32) and running sums (in
//! the input's own arithmetic).

use super::values::{read, write_f32, write_f64, write_i64, Vals};
use super::{axis_of, floats, Lanes};
use cyb_tensor::{Result, Tensor};
use rayon::prelude::*;
use std::cmp::Ordering;

/// Index of the first largest value along `axis` (NaN counts as larger than any number).
pub(super) fn argmax(axis: isize, x_t: &Tensor) -> Result<Tensor> {
    let x = floats(x_t)?;
    let a = axis_of("argmax", x_t, axis)?;
    let lanes = Lanes::new(x_t.dims(), a);
    let idx: Vec<i64> = (0..lanes.count())
        .into_par_iter()
        .map(|lane| {
            let mut best = 0;
            for i in 1..lanes.len {
                if nan_largest(x[lanes.index(lane, i)], x[lanes.index(lane, best)])
                    == Ordering::Greater
                {
                    best = i;
                }
            }
            best as i64
        })
        .collect();
    let mut dims = x_t.dims().to_vec();
    dims.remove(a);
    Tensor::from_i64(&dims, &idx)
}

/// The `k` largest (or smallest) values along `axis`, sorted, ties broken by lower index.
pub(super) fn top_k(k: usize, axis: isize, largest: bool, x_t: &Tensor) -> Result<Vec<Tensor>> {
    let x = floats(x_t)?;
    let a = axis_of("top_k", x_t, axis)?;
    let lanes = Lanes::new(x_t.dims(), a);
    let picks: Vec<Vec<usize>> = (0..lanes.count())
        .into_par_iter()
        .map(|lane| {
            let mut order: Vec<usize> = (0..lanes.len).collect();
            // A stable sort keeps equal values in index order.
            order.sort_by(|&i, &j| {
                let c = nan_largest(x[lanes.index(lane, i)], x[lanes.index(lane, j)]);
                if largest {
                    c.reverse()
                } else {
                    c
                }
            });
            order.truncate(k);
            order
        })
        .collect();
    let out_lanes = Lanes { len: k, ..lanes };
    let mut values = vec![0f32; out_lanes.count() * k];
    let mut indices = vec![0i64; values.len()];
    for (lane, pick) in picks.iter().enumerate() {
        for (t, &i) in pick.iter().enumerate() {
            values[out_lanes.index(lane, t)] = x[lanes.index(lane, i)];
            indices[out_lanes.index(lane, t)] = i as i64;
        }
    }
    let mut dims = x_t.dims().to_vec();
    dims[a] = k;
    Ok(vec![
        Tensor::from_f32(&dims, &values)?,
        Tensor::from_i64(&dims, &indices)?,
    ])
}

/// Running sum along `axis`, inclusive or exclusive, forwards or from the end.
pub(super) fn cumsum(axis: isize, exclusive: bool, reverse: bool, x_t: &Tensor) -> Result<Tensor> {
    let lanes = Lanes::new(x_t.dims(), axis_of("cumsum", x_t, axis)?);
    let dims = x_t.dims();
    match read(x_t)? {
        Vals::F(x) => {
            let y = scan(&x, lanes, exclusive, reverse, |a, b| a + b);
            write_f32(dims, x_t.dtype(), &y)
        }
        Vals::D(x) => {
            let y = scan(&x, lanes, exclusive, reverse, |a, b| a + b);
            write_f64(dims, x_t.dtype(), &y)
        }
        Vals::I(x) => {
            let y = scan(&x, lanes, exclusive, reverse, i64::wrapping_add);
            write_i64(dims, x_t.dtype(), &y)
        }
    }
}

/// A running `add` along every lane, in lane order or reversed, inclusive or exclusive.
fn scan<T: Copy + Default + Send + Sync>(
    x: &[T],
    lanes: Lanes,
    exclusive: bool,
    reverse: bool,
    add: impl Fn(T, T) -> T + Sync,
) -> Vec<T> {
    let sums: Vec<Vec<T>> = (0..lanes.count())
        .into_par_iter()
        .map(|lane| {
            let order: Vec<usize> = if reverse {
                (0..lanes.len).rev().collect()
            } else {
                (0..lanes.len).collect()
            };
            let mut acc = T::default();
            let mut out = vec![T::default(); lanes.len];
            for i in order {
                let v = x[lanes.index(lane, i)];
                if exclusive {
                    out[i] = acc;
                    acc = add(acc, v);
                } else {
                    acc = add(acc, v);
                    out[i] = acc;
                }
            }
            out
        })
        .collect();
    let mut y = vec![T::default(); x.len()];
    for (lane, vals) in sums.iter().enumerate() {
        for (i, v) in vals.iter().enumerate() {
            y[lanes.index(lane, i)] = *v;
        }
    }
    y
}

/// A total order on f32 where NaN is larger than every number (and equal to NaN).
fn nan_largest(a: f32, b: f32) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

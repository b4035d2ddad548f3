//! `Reduce` over any set of axes, `ArgReduce`, `LogSoftmax`, and the normalisations that
//! reduce over more than the last dim (`BatchNorm`, `LayerNormNd`).

use super::real::{reduce_f32, reduce_f64};
use super::values::{read, strides, unravel, write_f32, write_f64, write_i64, Vals};
use super::{axis_of, floats, Lanes};
use crate::shape_rule_nd::axis_mask;
use crate::ReduceFn;
use cyb_tensor::{DType, Result, Tensor, TensorInfo};

/// For each output element of a reduction, the input flat indices it combines (in order).
fn groups(dims: &[usize], mask: &[bool]) -> (Vec<usize>, Vec<usize>) {
    // Outer = kept dims, inner = reduced dims; both enumerated row-major.
    let kept: Vec<usize> = (0..dims.len()).filter(|&i| !mask[i]).collect();
    let red: Vec<usize> = (0..dims.len()).filter(|&i| mask[i]).collect();
    let st = strides(dims);
    let base_of = |ks: &[usize], d: &[usize]| -> Vec<usize> {
        let sub: Vec<usize> = ks.iter().map(|&k| d[k]).collect();
        let n: usize = sub.iter().product();
        let mut idx = vec![0; sub.len()];
        (0..n)
            .map(|f| {
                unravel(f, &sub, &mut idx);
                ks.iter().zip(&idx).map(|(&k, &i)| i * st[k]).sum()
            })
            .collect()
    };
    (base_of(&kept, dims), base_of(&red, dims))
}

pub(super) fn reduce(f: ReduceFn, axes: &[isize], x: &Tensor, out: &TensorInfo) -> Result<Tensor> {
    let mask = axis_mask("reduce", x.dims().len(), axes)?;
    let (outer, inner) = groups(x.dims(), &mask);
    let od = out.shape.dims();
    match read(x)? {
        Vals::F(v) => {
            let y: Vec<f32> = outer
                .iter()
                .map(|&o| reduce_f32(f, inner.iter().map(|&i| v[o + i]), inner.len()))
                .collect();
            write_f32(od, out.dtype, &y)
        }
        Vals::D(v) => {
            let y: Vec<f64> = outer
                .iter()
                .map(|&o| reduce_f64(f, inner.iter().map(|&i| v[o + i]), inner.len()))
                .collect();
            write_f64(od, out.dtype, &y)
        }
        Vals::I(v) => {
            let unsigned = x.dtype() == DType::U64;
            let y: Vec<i64> = outer
                .iter()
                .map(|&o| {
                    let it = inner.iter().map(|&i| v[o + i]);
                    match f {
                        ReduceFn::Sum => it.fold(0i64, i64::wrapping_add),
                        ReduceFn::Mean => {
                            it.fold(0i64, i64::wrapping_add) / (inner.len().max(1) as i64)
                        }
                        ReduceFn::Max if unsigned => it.map(|x| x as u64).max().unwrap_or(0) as i64,
                        ReduceFn::Min if unsigned => {
                            it.map(|x| x as u64).min().unwrap_or(u64::MAX) as i64
                        }
                        ReduceFn::Max => it.max().unwrap_or(i64::MIN),
                        ReduceFn::Min => it.min().unwrap_or(i64::MAX),
                        ReduceFn::Prod => it.fold(1i64, i64::wrapping_mul),
                        ReduceFn::L1 => it.fold(0i64, |a, b| a.wrapping_add(b.wrapping_abs())),
                        ReduceFn::SumSquare => {
                            it.fold(0i64, |a, b| a.wrapping_add(b.wrapping_mul(b)))
                        }
                        _ => {
                            let fl: Vec<f32> = it.map(|x| x as f32).collect();
                            reduce_f32(f, fl.into_iter(), inner.len()) as i64
                        }
                    }
                })
                .collect();
            write_i64(od, out.dtype, &y)
        }
    }
}

pub(super) fn arg_reduce(
    axis: isize,
    max: bool,
    select_last: bool,
    x: &Tensor,
    out: &TensorInfo,
) -> Result<Tensor> {
    let a = axis_of("arg_reduce", x, axis)?;
    let lanes = Lanes::new(x.dims(), a);
    let v = x.to_f32_vec()?;
    let better = |c: f32, b: f32| {
        if b.is_nan() {
            return false;
        }
        if c.is_nan() {
            return true;
        }
        if max {
            c > b || (select_last && c == b)
        } else {
            c < b || (select_last && c == b)
        }
    };
    let y: Vec<i64> = (0..lanes.count())
        .map(|l| {
            let mut best = 0;
            for i in 1..lanes.len {
                if better(v[lanes.index(l, i)], v[lanes.index(l, best)]) {
                    best = i;
                }
            }
            best as i64
        })
        .collect();
    write_i64(out.shape.dims(), DType::I64, &y)
}

pub(super) fn log_softmax(axis: isize, x: &Tensor) -> Result<Tensor> {
    let a = axis_of("log_softmax", x, axis)?;
    let lanes = Lanes::new(x.dims(), a);
    let v = floats(x)?;
    let mut y = vec![0f32; v.len()];
    for l in 0..lanes.count() {
        let m = (0..lanes.len)
            .map(|i| v[lanes.index(l, i)])
            .fold(f32::NEG_INFINITY, f32::max);
        let s: f32 = (0..lanes.len)
            .map(|i| (v[lanes.index(l, i)] - m).exp())
            .sum();
        let ls = s.ln();
        for i in 0..lanes.len {
            let k = lanes.index(l, i);
            y[k] = v[k] - m - ls;
        }
    }
    Tensor::from_f32(x.dims(), &y)
}

pub(super) fn batch_norm(eps: f32, inputs: &[Tensor]) -> Result<Tensor> {
    let x = &inputs[0];
    let v = floats(x)?;
    let p: Vec<Vec<f32>> = inputs[1..]
        .iter()
        .map(|t| t.to_f32_vec())
        .collect::<Result<_>>()?;
    let (scale, bias, mean, var) = (&p[0], &p[1], &p[2], &p[3]);
    let d = x.dims();
    let c = d[1];
    let inner: usize = d[2..].iter().product();
    let y: Vec<f32> = v
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let ch = (i / inner.max(1)) % c.max(1);
            (x - mean[ch]) / (var[ch] + eps).sqrt() * scale[ch] + bias[ch]
        })
        .collect();
    Tensor::from_f32(d, &y)
}

pub(super) fn layer_norm_nd(axis: isize, eps: f32, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = &inputs[0];
    let a = axis_of("layer_norm_nd", x, axis)?;
    let d = x.dims();
    let row: usize = d[a..].iter().product();
    let rows: usize = d[..a].iter().product();
    let v = floats(x)?;
    let expand = |t: &Tensor| -> Result<Vec<f32>> {
        let e = super::super::reference::execute(
            &crate::Op::Expand {
                dims: d[a..].to_vec(),
            },
            std::slice::from_ref(t),
        )?;
        e[0].to_f32_vec()
    };
    let w = expand(&inputs[1])?;
    let b = match inputs.get(2) {
        Some(t) => expand(t)?,
        None => vec![0.0; row],
    };
    let mut y = vec![0f32; v.len()];
    let (mut mu, mut inv) = (vec![0f32; rows], vec![0f32; rows]);
    for r in 0..rows {
        let xs = &v[r * row..(r + 1) * row];
        let m = xs.iter().sum::<f32>() / row as f32;
        let var = xs.iter().map(|x| (x - m) * (x - m)).sum::<f32>() / row as f32;
        let is = 1.0 / (var + eps).sqrt();
        for (i, &xv) in xs.iter().enumerate() {
            y[r * row + i] = (xv - m) * is * w[i] + b[i];
        }
        mu[r] = m;
        inv[r] = is;
    }
    let mut sd = d.to_vec();
    sd[a..].iter_mut().for_each(|s| *s = 1);
    Ok(vec![
        Tensor::from_f32(d, &y)?,
        Tensor::from_f32(&sd, &mu)?,
        Tensor::from_f32(&sd, &inv)?,
    ])
}

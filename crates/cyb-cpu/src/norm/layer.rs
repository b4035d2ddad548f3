//! Layer normalisation (`Op::LayerNorm`) and the fused residual add + layer norm
//! (`Op::AddLayerNorm`) of encoders: rows spread over the pool, the row sums kept in 16
//! lanes so they vectorize (a different summation order from the reference's, within its
//! rounding; the same for every thread count and kernel set).

use crate::par::pool::{split, DisjointOut};
use crate::par::{f32_tensor, wide, Par};
use cyb_tensor::{AlignedBuf, Error, Result, Tensor};

const LANES: usize = 16;

/// Σ `f(x)` over `xs`, in `LANES` partial sums added pairwise at the end.
#[inline(always)]
fn lane_sum(xs: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            acc[l] += f(c[l]);
        }
    }
    for (a, &v) in acc.iter_mut().zip(rest) {
        *a += f(v);
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            acc[l] += acc[l + width];
        }
    }
    acc[0]
}

/// One row: `y = (x - mean) / sqrt(var + eps) · w + b`.
#[inline(always)]
fn norm_row(x: &[f32], y: &mut [f32], w: Option<&[f32]>, b: Option<&[f32]>, eps: f32) {
    let d = x.len() as f32;
    let mean = lane_sum(x, |v| v) / d;
    let var = lane_sum(x, |v| (v - mean) * (v - mean)) / d;
    let inv_std = 1.0 / (var + eps).sqrt();
    match (w, b) {
        (Some(w), Some(b)) => {
            for (((o, &v), &wi), &bi) in y.iter_mut().zip(x).zip(w).zip(b) {
                *o = (v - mean) * inv_std * wi + bi;
            }
        }
        (Some(w), None) => {
            for ((o, &v), &wi) in y.iter_mut().zip(x).zip(w) {
                *o = (v - mean) * inv_std * wi;
            }
        }
        (None, Some(b)) => {
            for ((o, &v), &bi) in y.iter_mut().zip(x).zip(b) {
                *o = (v - mean) * inv_std + bi;
            }
        }
        (None, None) => {
            for (o, &v) in y.iter_mut().zip(x) {
                *o = (v - mean) * inv_std;
            }
        }
    }
}

/// The optional `[d]` weight / bias input `i` as host floats.
fn param(op: &str, inputs: &[Tensor], i: usize, d: usize) -> Result<Option<Vec<f32>>> {
    let Some(t) = inputs.get(i) else {
        return Ok(None);
    };
    let v = t.as_f32()?.to_vec();
    if v.len() != d {
        return Err(Error::invalid(
            op,
            format!("input {i} has {} values, the rows have {d}", v.len()),
        ));
    }
    Ok(Some(v))
}

pub(crate) fn layer_norm(par: Par<'_>, eps: f32, inputs: &[Tensor]) -> Result<Tensor> {
    let x = inputs[0].as_f32()?;
    let x = &*x;
    let d = inputs[0].dims().last().copied().unwrap_or(0);
    let w = param("layer_norm", inputs, 1, d)?;
    let b = param("layer_norm", inputs, 2, d)?;
    let (w, b) = (w.as_deref(), b.as_deref());
    par.make(
        inputs[0].dims(),
        d,
        #[inline(always)]
        |row, y| {
            if d > 0 {
                for (ys, xs) in y.chunks_mut(d).zip(x[row * d..].chunks(d)) {
                    norm_row(xs, ys, w, b, eps);
                }
            }
        },
    )
}

/// Outputs `s = a + b` and `LayerNorm(s, w, bias)`, each row summed and normalised while in
/// cache.
pub(crate) fn add_layer_norm(par: Par<'_>, eps: f32, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (a, b) = (inputs[0].as_f32()?, inputs[1].as_f32()?);
    let (a, b) = (&*a, &*b);
    let dims = inputs[0].dims();
    if a.len() != b.len() {
        return Err(Error::invalid(
            "add_layer_norm",
            format!("the addends have {} and {} values", a.len(), b.len()),
        ));
    }
    let d = dims.last().copied().unwrap_or(0);
    let w = param("add_layer_norm", inputs, 2, d)?;
    let bias = param("add_layer_norm", inputs, 3, d)?;
    let (w, bias) = (w.as_deref(), bias.as_deref());
    let mut s_buf = AlignedBuf::for_overwrite(a.len() * 4);
    let mut y_buf = AlignedBuf::for_overwrite(a.len() * 4);
    if let Some(rows) = a.len().checked_div(d) {
        let s_out = DisjointOut::new(bytemuck::cast_slice_mut(s_buf.as_bytes_mut()));
        let y_out = DisjointOut::new(bytemuck::cast_slice_mut(y_buf.as_bytes_mut()));
        let threads = if a.len() < 32 * 1024 {
            1
        } else {
            par.pool.threads()
        };
        let set = par.set;
        let job = |t: usize| {
            if t >= threads {
                return;
            }
            let r = split(rows, threads, t);
            let span = r.start * d..r.end * d;
            // SAFETY: `split` gives each thread index its own rows of both outputs.
            let (s, y) = unsafe { (s_out.slice(span.clone()), y_out.slice(span.clone())) };
            let (ar, br) = (&a[span.clone()], &b[span]);
            wide(
                set,
                #[inline(always)]
                || {
                    for (((sr, yr), ar), br) in s
                        .chunks_mut(d)
                        .zip(y.chunks_mut(d))
                        .zip(ar.chunks(d))
                        .zip(br.chunks(d))
                    {
                        for ((o, &p), &q) in sr.iter_mut().zip(ar).zip(br) {
                            *o = p + q;
                        }
                        norm_row(sr, yr, w, bias, eps);
                    }
                },
            );
        };
        if threads == 1 {
            job(0);
        } else {
            par.pool.run(&job);
        }
    }
    Ok(vec![f32_tensor(dims, s_buf)?, f32_tensor(dims, y_buf)?])
}

//! RMS, layer and group normalisation.

use super::floats;
use cyb_tensor::{Result, Tensor};
use rayon::prelude::*;

/// `y = x / sqrt(mean(x²) + eps) · (w + weight_offset)` over the last dimension.
pub(super) fn rms_norm(eps: f32, weight_offset: f32, inputs: &[Tensor]) -> Result<Tensor> {
    let x = floats(&inputs[0])?;
    let d = inputs[0].shape().last();
    let w = optional(inputs, 1, d, 1.0)?;
    let mut y = vec![0f32; x.len()];
    if d > 0 {
        y.par_chunks_mut(d)
            .zip(x.par_chunks(d))
            .for_each(|(ys, xs)| {
                let sum_sq: f32 = xs.iter().fold(0.0, |s, v| s + v * v);
                let inv_rms = 1.0 / (sum_sq / d as f32 + eps).sqrt();
                for ((o, v), wi) in ys.iter_mut().zip(xs).zip(&w) {
                    *o = v * inv_rms * (wi + weight_offset);
                }
            });
    }
    Tensor::from_f32(inputs[0].dims(), &y)
}

/// `y = (x - mean) / sqrt(var + eps) · w + b` over the last dimension (biased variance).
pub(super) fn layer_norm(eps: f32, inputs: &[Tensor]) -> Result<Tensor> {
    let x = floats(&inputs[0])?;
    let d = inputs[0].shape().last();
    let w = optional(inputs, 1, d, 1.0)?;
    let b = optional(inputs, 2, d, 0.0)?;
    let mut y = vec![0f32; x.len()];
    if d > 0 {
        y.par_chunks_mut(d)
            .zip(x.par_chunks(d))
            .for_each(|(ys, xs)| {
                let (mean, inv_std) = moments(xs.iter().copied(), d, eps);
                for (i, (o, v)) in ys.iter_mut().zip(xs).enumerate() {
                    *o = (v - mean) * inv_std * w[i] + b[i];
                }
            });
    }
    Tensor::from_f32(inputs[0].dims(), &y)
}

/// Group norm of `x` `[n, c, *]`: each group of `c / groups` channels of one sample is
/// normalised over all its values, then scaled and shifted per channel.
pub(super) fn group_norm(groups: usize, eps: f32, inputs: &[Tensor]) -> Result<Tensor> {
    let x = floats(&inputs[0])?;
    let dims = inputs[0].dims();
    let c = dims[1];
    let spatial: usize = dims[2..].iter().product();
    let w = optional(inputs, 1, c, 1.0)?;
    let b = optional(inputs, 2, c, 0.0)?;
    let group_len = (c / groups) * spatial;
    let mut y = vec![0f32; x.len()];
    if group_len > 0 {
        // Groups are contiguous: sample-major, then channel, then spatial.
        y.par_chunks_mut(group_len)
            .zip(x.par_chunks(group_len))
            .enumerate()
            .for_each(|(g, (ys, xs))| {
                let (mean, inv_std) = moments(xs.iter().copied(), group_len, eps);
                let first_channel = (g % groups) * (c / groups);
                for (i, (o, v)) in ys.iter_mut().zip(xs).enumerate() {
                    let ch = first_channel + i / spatial;
                    *o = (v - mean) * inv_std * w[ch] + b[ch];
                }
            });
    }
    Tensor::from_f32(dims, &y)
}

/// Mean and `1 / sqrt(biased variance + eps)` of `n` values, in two passes in index order.
fn moments(values: impl Iterator<Item = f32> + Clone, n: usize, eps: f32) -> (f32, f32) {
    let mean = values.clone().fold(0.0, |s, v| s + v) / n as f32;
    let var = values.fold(0.0, |s, v| s + (v - mean) * (v - mean)) / n as f32;
    (mean, 1.0 / (var + eps).sqrt())
}

/// Input `i` as f32, or `len` copies of `fill` when it is absent.
fn optional(inputs: &[Tensor], i: usize, len: usize, fill: f32) -> Result<Vec<f32>> {
    match inputs.get(i) {
        Some(t) => Ok(floats(t)?.into_owned()),
        None => Ok(vec![fill; len]),
    }
}

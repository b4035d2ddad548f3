//! Rotary position embeddings: both pair layouts and the frequency scalings.
//!
//! Frequencies, angles, cos and sin are computed in f64 and rounded to f32 once, so the table
//! is exact to f32 precision whatever the position; the rotation itself is f32.

use super::floats;
use crate::{RopeLayout, RopeScaling};
use cyb_tensor::{Result, Tensor};
use rayon::prelude::*;
use std::f64::consts::PI;

pub(super) fn rope(
    layout: RopeLayout,
    rot_dims: usize,
    base: f32,
    scaling: &RopeScaling,
    inputs: &[Tensor],
) -> Result<Tensor> {
    let x = floats(&inputs[0])?;
    let positions = inputs[1].to_i64_vec()?;
    let dims = inputs[0].dims();
    let r = dims.len();
    let (seq, heads, head_dim) = (dims[r - 3], dims[r - 2], dims[r - 1]);
    let (inv_freq, attn_factor) = frequencies(rot_dims, base as f64, scaling);
    let half = rot_dims / 2;
    // cos/sin per (position, pair), shared by every head.
    let table: Vec<(f32, f32)> = positions
        .iter()
        .flat_map(|&pos| {
            inv_freq.iter().map(move |f| {
                let theta = pos as f64 * f;
                (
                    (theta.cos() * attn_factor) as f32,
                    (theta.sin() * attn_factor) as f32,
                )
            })
        })
        .collect();
    let mut y = x.to_vec();
    if head_dim > 0 {
        y.par_chunks_mut(head_dim).enumerate().for_each(|(row, v)| {
            let s = (row / heads.max(1)) % seq.max(1);
            for (i, &(c, sn)) in table[s * half..(s + 1) * half].iter().enumerate() {
                let (a, b) = match layout {
                    RopeLayout::Normal => (2 * i, 2 * i + 1),
                    RopeLayout::Neox => (i, i + half),
                };
                let (x0, x1) = (v[a], v[b]);
                v[a] = x0 * c - x1 * sn;
                v[b] = x0 * sn + x1 * c;
            }
        });
    }
    Tensor::from_f32(dims, &y)
}

/// The inverse frequency of each of the `rot_dims / 2` pairs after scaling, and the factor
/// applied to cos and sin (YaRN's attention factor, else 1). Public so backends that precompute
/// cos/sin caches use exactly the reference's frequencies.
pub fn frequencies(rot_dims: usize, base: f64, scaling: &RopeScaling) -> (Vec<f64>, f64) {
    let d = rot_dims as f64;
    let plain: Vec<f64> = (0..rot_dims / 2)
        .map(|i| base.powf(-((2 * i) as f64) / d))
        .collect();
    match *scaling {
        RopeScaling::None => (plain, 1.0),
        RopeScaling::Linear { factor } => (plain.iter().map(|f| f / factor as f64).collect(), 1.0),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position,
        } => {
            let (factor, lo, hi) = (
                factor as f64,
                low_freq_factor as f64,
                high_freq_factor as f64,
            );
            let orig = original_max_position as f64;
            let (low_w, high_w) = (orig / lo, orig / hi);
            let inv = plain
                .iter()
                .map(|&f| {
                    let w = 2.0 * PI / f;
                    if w < high_w {
                        f
                    } else if w > low_w {
                        f / factor
                    } else {
                        let s = (orig / w - lo) / (hi - lo);
                        (1.0 - s) * f / factor + s * f
                    }
                })
                .collect();
            (inv, 1.0)
        }
        RopeScaling::Yarn {
            factor,
            original_max_position,
            beta_fast,
            beta_slow,
            attn_factor,
        } => {
            let factor = factor as f64;
            let orig = original_max_position as f64;
            // The (fractional) pair dimension that turns `rotations` times over the original context.
            let dim_of =
                |rotations: f64| d * (orig / (rotations * 2.0 * PI)).ln() / (2.0 * base.ln());
            let low = dim_of(beta_fast as f64).floor().max(0.0);
            let mut high = dim_of(beta_slow as f64).ceil().min(d - 1.0);
            if low == high {
                high += 0.001;
            }
            let inv = plain
                .iter()
                .enumerate()
                .map(|(i, &f)| {
                    let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                    let extrap_w = 1.0 - ramp;
                    (f / factor) * (1.0 - extrap_w) + f * extrap_w
                })
                .collect();
            let mscale = match attn_factor {
                Some(a) => a as f64,
                None if factor > 1.0 => 0.1 * factor.ln() + 1.0,
                None => 1.0,
            };
            (inv, mscale)
        }
    }
}

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
    let (mut inv_freq, attn_factor) = frequencies(rot_dims, base as f64, scaling);
    if let Some(factors) = inputs.get(2) {
        for (f, &div) in inv_freq.iter_mut().zip(floats(factors)?.iter()) {
            *f /= div as f64;
        }
    }
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

#[cfg(test)]
mod tests {
    use crate::{reference::execute, Op, RopeLayout, RopeScaling};
    use cyb_tensor::Tensor;

    fn rope_of(scaling: RopeScaling, factors: Option<&[f32]>) -> Vec<f32> {
        let x: Vec<f32> = (0..3 * 2 * 8)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) / 3.0)
            .collect();
        let mut inputs = vec![
            Tensor::from_f32(&[3, 2, 8], &x).unwrap(),
            Tensor::from_i64(&[3], &[0, 5, 17]).unwrap(),
        ];
        if let Some(f) = factors {
            inputs.push(Tensor::from_f32(&[4], f).unwrap());
        }
        let op = Op::Rope {
            layout: RopeLayout::Neox,
            rot_dims: 8,
            base: 500_000.0,
            scaling,
        };
        execute(&op, &inputs).unwrap()[0].to_f32_vec().unwrap()
    }

    #[test]
    fn freq_factors_divide_the_frequencies() {
        // Dividing every pair by 4 is linear scaling by 4.
        let linear = rope_of(RopeScaling::Linear { factor: 4.0 }, None);
        assert_eq!(rope_of(RopeScaling::None, Some(&[4.0; 4])), linear);
        // Llama 3 factors computed from the spec's formula reproduce `RopeScaling::Llama3`
        // (wavelengths 2π·500000^(i/4): 6.3 blends, the others are divided by the factor 8).
        let w0 = 2.0 * std::f64::consts::PI;
        let smooth = (16.0 / w0 - 1.0) / (4.0 - 1.0);
        let f0 = (1.0 / ((1.0 - smooth) / 8.0 + smooth)) as f32;
        let llama3 = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position: 16,
        };
        let want = rope_of(llama3, None);
        let got = rope_of(RopeScaling::None, Some(&[f0, 8.0, 8.0, 8.0]));
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        assert_ne!(got, rope_of(RopeScaling::None, None));
    }
}

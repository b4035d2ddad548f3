//! Softmax and the pointwise activations (silu, gelu, relu, tanh) and gated units (swiglu, geglu).

use super::{axis_of, floats, Lanes};
use crate::{GeluApprox, Op};
use cyb_tensor::{Result, Tensor};
use rayon::prelude::*;

/// `exp(x_i - max) / Σ exp(x_j - max)` along `axis`.
pub(super) fn softmax(axis: isize, x_t: &Tensor) -> Result<Tensor> {
    let x = floats(x_t)?;
    let lanes = Lanes::new(x_t.dims(), axis_of("softmax", x_t, axis)?);
    let results: Vec<Vec<f32>> = (0..lanes.count())
        .into_par_iter()
        .map(|lane| {
            let v: Vec<f32> = (0..lanes.len).map(|i| x[lanes.index(lane, i)]).collect();
            // A lane of all -inf gives max = -inf and (-inf) - (-inf) = NaN, as in PyTorch.
            let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = v.iter().map(|x| (x - max).exp()).collect();
            let sum = e.iter().fold(0.0, |s, x| s + x);
            e.iter().map(|x| x / sum).collect()
        })
        .collect();
    let mut y = vec![0f32; x.len()];
    for (lane, vals) in results.iter().enumerate() {
        for (i, v) in vals.iter().enumerate() {
            y[lanes.index(lane, i)] = *v;
        }
    }
    Tensor::from_f32(x_t.dims(), &y)
}

pub(super) fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

pub(super) fn gelu(x: f32, approx: GeluApprox) -> f32 {
    match approx {
        GeluApprox::Erf => 0.5 * x * (1.0 + erf(x / std::f32::consts::SQRT_2)),
        GeluApprox::Tanh => {
            let k = (2.0 / std::f32::consts::PI).sqrt();
            0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
        }
    }
}

/// `silu`, `gelu`, `relu`, `tanh`, applied to every element.
pub(super) fn unary(op: &Op, x_t: &Tensor) -> Result<Tensor> {
    let f = |v: f32| match op {
        Op::Silu => silu(v),
        Op::Gelu { approx } => gelu(v, *approx),
        Op::Tanh => v.tanh(),
        _ => v.max(0.0),
    };
    let y: Vec<f32> = floats(x_t)?.par_iter().map(|&v| f(v)).collect();
    Tensor::from_f32(x_t.dims(), &y)
}

/// `act(gate) · up`, from two inputs or from one `[.., 2n]` input split in halves.
pub(super) fn glu(op: &Op, inputs: &[Tensor]) -> Result<Tensor> {
    let act = |v: f32| match op {
        Op::GeGlu { approx } => gelu(v, *approx),
        _ => silu(v),
    };
    let mut dims = inputs[0].dims().to_vec();
    let first = floats(&inputs[0])?;
    let y: Vec<f32> = match inputs.get(1) {
        Some(up_t) => {
            let up = floats(up_t)?;
            first
                .par_iter()
                .zip(up.par_iter())
                .map(|(&g, &u)| act(g) * u)
                .collect()
        }
        None => {
            let n = dims.last().copied().unwrap_or(0) / 2;
            if let Some(last) = dims.last_mut() {
                *last = n;
            }
            if n == 0 {
                Vec::new()
            } else {
                first
                    .par_chunks(2 * n)
                    .flat_map_iter(|row| {
                        let (g, u) = row.split_at(n);
                        g.iter()
                            .zip(u)
                            .map(|(&g, &u)| act(g) * u)
                            .collect::<Vec<_>>()
                    })
                    .collect()
            }
        }
    };
    Tensor::from_f32(&dims, &y)
}

/// The error function, computed in f64 (Abramowitz–Stegun 7.1.26 is too coarse for a 1e-5
/// reference, so this uses the series below |x| < 2.5 and the continued fraction above).
pub(super) fn erf(x: f32) -> f32 {
    erf64(x as f64) as f32
}

pub(super) fn erf64(x: f64) -> f64 {
    let ax = x.abs();
    let r = if ax < 2.5 {
        // erf(x) = 2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1))
        let mut term = ax;
        let mut sum = ax;
        let x2 = ax * ax;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -x2 / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else if ax < 6.0 {
        // erfc(x) = exp(-x²)/√π · 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...)))) (Lentz, evaluated backwards)
        let mut f = 0.0;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (ax + f);
        }
        1.0 - (-ax * ax).exp() / std::f64::consts::PI.sqrt() / (ax + f)
    } else {
        1.0
    };
    r.copysign(x)
}

#[cfg(test)]
mod tests {
    use super::erf;
    use crate::{reference::execute, Op};
    use cyb_tensor::Tensor;

    #[test]
    fn tanh_matches_known_values() {
        let x = Tensor::from_f32(&[4], &[0.0, 0.5, -2.0, 30.0]).unwrap();
        let y = execute(&Op::Tanh, &[x]).unwrap()[0].to_f32_vec().unwrap();
        for (got, want) in y.iter().zip([0.0f32, 0.462_117_16, -0.964_027_6, 1.0]) {
            assert!((got - want).abs() < 1e-7, "{got} vs {want}");
        }
    }

    #[test]
    fn erf_matches_known_values() {
        // Values from the error function tables (Abramowitz & Stegun, table 7.1).
        for (x, want) in [
            (0.0f32, 0.0f32),
            (0.5, 0.520_499_9),
            (1.0, 0.842_700_8),
            (2.0, 0.995_322_3),
            (3.0, 0.999_977_9),
            (-1.5, -0.966_105_1),
        ] {
            assert!((erf(x) - want).abs() < 2e-7, "erf({x}) = {}", erf(x));
        }
    }
}

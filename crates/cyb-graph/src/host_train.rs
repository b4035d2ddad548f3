//! The optimizer steps of ONNX's `ai.onnx.preview.training` domain (Adagrad, Adam, Momentum):
//! inputs `R` (learning rate), `T` (step count), then the tensors `X…`, their gradients `G…`
//! and the optimizer's state (`H…`; `V…`, `H…`; `V…`); outputs the new `X…` then the new
//! state, in that order. Computed in f64, written in each tensor's own dtype.

use crate::host_op::{req, HostRun};
use cyb_tensor::{Error, Result, Tensor};

const OP: &str = "optimizer";

/// One optimizer and its attributes (ONNX's names and defaults).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Optimizer {
    Adagrad {
        decay_factor: f32,
        epsilon: f32,
        norm_coefficient: f32,
    },
    Adam {
        alpha: f32,
        beta: f32,
        epsilon: f32,
        norm_coefficient: f32,
        norm_coefficient_post: f32,
    },
    Momentum {
        alpha: f32,
        beta: f32,
        norm_coefficient: f32,
        nesterov: bool,
    },
}

impl Optimizer {
    /// Tensors per optimized variable: X, G and the state tensors.
    fn per_variable(&self) -> usize {
        match self {
            Optimizer::Adam { .. } => 4,
            _ => 3,
        }
    }
}

/// One variable's step: `x`, `g` and its state in, the new `x` and state out.
fn step(o: &Optimizer, lr: f64, t: i64, x: f64, g: f64, s: &mut [f64]) -> f64 {
    match *o {
        Optimizer::Adagrad {
            decay_factor,
            epsilon,
            norm_coefficient,
        } => {
            let r = lr / (1.0 + t as f64 * f64::from(decay_factor));
            let g = f64::from(norm_coefficient) * x + g;
            s[0] += g * g;
            x - r * g / (s[0].sqrt() + f64::from(epsilon))
        }
        Optimizer::Adam {
            alpha,
            beta,
            epsilon,
            norm_coefficient,
            norm_coefficient_post,
        } => {
            let (a, b) = (f64::from(alpha), f64::from(beta));
            let g = f64::from(norm_coefficient) * x + g;
            s[0] = a * s[0] + (1.0 - a) * g;
            s[1] = b * s[1] + (1.0 - b) * g * g;
            let h = s[1].sqrt() + f64::from(epsilon);
            let r = if t > 0 {
                let t = t as f64;
                lr * (1.0 - b.powf(t)).sqrt() / (1.0 - a.powf(t))
            } else {
                lr
            };
            (1.0 - f64::from(norm_coefficient_post)) * (x - r * (s[0] / h))
        }
        Optimizer::Momentum {
            alpha,
            beta,
            norm_coefficient,
            nesterov,
        } => {
            let a = f64::from(alpha);
            let g = f64::from(norm_coefficient) * x + g;
            let b = if t > 0 { f64::from(beta) } else { 1.0 };
            s[0] = a * s[0] + b * g;
            if nesterov {
                x - lr * (g + a * s[0])
            } else {
                x - lr * s[0]
            }
        }
    }
}

pub(crate) fn optimizer(
    r: &mut HostRun,
    o: &Optimizer,
    inputs: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let k = o.per_variable();
    let rest = inputs.len().saturating_sub(2);
    if rest == 0 || !rest.is_multiple_of(k) {
        return Err(Error::invalid(
            OP,
            format!(
                "{} inputs; R, T and {k} tensors per variable expected",
                inputs.len()
            ),
        ));
    }
    let n = rest / k;
    let host = |r: &HostRun, i: usize| -> Result<Tensor> { r.d.to_host(req(OP, inputs, i)?) };
    let scalar = |v: Option<f64>| v.ok_or_else(|| Error::invalid(OP, "R or T is empty"));
    let lr = scalar(host(r, 0)?.to_f64_vec()?.first().copied())?;
    let t = scalar(host(r, 1)?.to_f64_vec()?.first().copied())? as i64;
    let mut new_x = Vec::with_capacity(n);
    let mut new_state: Vec<Vec<Tensor>> = vec![Vec::with_capacity(n); k - 2];
    for v in 0..n {
        let x_t = host(r, 2 + v)?;
        let x = x_t.to_f64_vec()?;
        let g = host(r, 2 + n + v)?.to_f64_vec()?;
        let states: Vec<Tensor> = (0..k - 2)
            .map(|j| host(r, 2 + (2 + j) * n + v))
            .collect::<Result<_>>()?;
        let mut st: Vec<Vec<f64>> = states
            .iter()
            .map(Tensor::to_f64_vec)
            .collect::<Result<_>>()?;
        if g.len() != x.len() || st.iter().any(|s| s.len() != x.len()) {
            return Err(Error::invalid(
                OP,
                format!(
                    "variable {v}: gradient and state must match X's {} values",
                    x.len()
                ),
            ));
        }
        let mut y = vec![0f64; x.len()];
        let mut s = vec![0f64; k - 2];
        for i in 0..x.len() {
            for (sj, col) in s.iter_mut().zip(&st) {
                *sj = col[i];
            }
            y[i] = step(o, lr, t, x[i], g[i], &mut s);
            for (col, sj) in st.iter_mut().zip(&s) {
                col[i] = *sj;
            }
        }
        new_x.push(Tensor::from_f64_as(x_t.dims(), &y, x_t.dtype())?);
        for ((out, col), old) in new_state.iter_mut().zip(&st).zip(&states) {
            out.push(Tensor::from_f64_as(old.dims(), col, old.dtype())?);
        }
    }
    Ok(new_x
        .into_iter()
        .chain(new_state.into_iter().flatten())
        .collect())
}

//! RMS normalisation (`Op::RmsNorm`) and the fused residual add + RMS norm (`Op::AddRmsNorm`)
//! of the decoder layers: rows spread over the pool, each row summed in index order as the
//! reference does.

use crate::elementwise::{binary, make};
use crate::par::Par;
use cyb_tensor::{Result, Tensor};

/// RMS norm of each row (rows split over the pool; each row summed in index order, as the
/// reference does, whatever the split).
pub(crate) fn rms_norm(par: Par<'_>, eps: f32, offset: f32, inputs: &[Tensor]) -> Result<Tensor> {
    let x = inputs[0].as_f32()?;
    let x = &*x;
    let d = inputs[0].dims().last().copied().unwrap_or(0);
    let w = inputs.get(1).map(Tensor::as_f32).transpose()?;
    let w = w.as_deref();
    if d == 0 {
        return make(inputs[0].dims(), |_| Ok(()));
    }
    par.make(
        inputs[0].dims(),
        d,
        #[inline(always)]
        |row, y| {
            for (ys, xs) in y.chunks_mut(d).zip(x[row * d..].chunks(d)) {
                let sum_sq: f32 = xs.iter().fold(0.0, |s, v| s + v * v);
                let inv_rms = 1.0 / (sum_sq / d as f32 + eps).sqrt();
                match w {
                    Some(w) => {
                        for ((o, v), wi) in ys.iter_mut().zip(xs).zip(w.iter()) {
                            *o = v * inv_rms * (wi + offset);
                        }
                    }
                    None => {
                        for (o, v) in ys.iter_mut().zip(xs) {
                            *o = v * inv_rms * (1.0 + offset);
                        }
                    }
                }
            }
        },
    )
}

/// `Op::AddRmsNorm`: the sum and its norm from one call (what `Add` then `RmsNorm` compute).
pub(crate) fn add_rms_norm(
    par: Par<'_>,
    eps: f32,
    offset: f32,
    inputs: &[Tensor],
) -> Result<Vec<Tensor>> {
    let s = binary(par, &inputs[0], &inputs[1], inputs[0].dims(), |p, q| p + q)?;
    let mut norm_in = vec![s.clone()];
    norm_in.extend(inputs.get(2).cloned());
    let y = rms_norm(par, eps, offset, &norm_in)?;
    Ok(vec![s, y])
}

//! Scaled dot-product attention with the variants models need: causal or bidirectional,
//! additive mask, grouped-query heads, sliding window, logit softcap and ALiBi.

use super::{broadcast_strides, f32_out, floats};
use crate::SdpaLayout;
use cyb_tensor::{Result, Shape, Tensor, TensorInfo};
use rayon::prelude::*;

/// The scalar parameters of `Op::Sdpa`.
pub(super) struct SdpaParams {
    pub layout: SdpaLayout,
    pub scale: f32,
    pub causal: bool,
    pub sliding_window: Option<usize>,
    pub softcap: Option<f32>,
    pub alibi_max_bias: Option<f32>,
}

pub(super) fn sdpa(p: &SdpaParams, inputs: &[Tensor], out: &TensorInfo) -> Result<Tensor> {
    if p.layout == SdpaLayout::HeadMajor {
        return sdpa_heads(p, inputs, out);
    }
    // Token-major: the same attention on the inputs with heads and positions swapped.
    let swap = |t: &Tensor| -> Result<Tensor> {
        let r = t.dims().len();
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 3, r - 2);
        let dims: Vec<usize> = perm.iter().map(|&a| t.dims()[a]).collect();
        let info = TensorInfo {
            shape: Shape::new(dims)?,
            dtype: t.dtype(),
        };
        super::layout::permute(&perm, t, &info)
    };
    let mut heads = inputs[..3].iter().map(swap).collect::<Result<Vec<_>>>()?;
    heads.extend(inputs.get(3).cloned());
    let mut dims = out.shape.dims().to_vec();
    let r = dims.len();
    dims.swap(r - 3, r - 2);
    let info = TensorInfo {
        shape: Shape::new(dims)?,
        dtype: out.dtype,
    };
    swap(&sdpa_heads(p, &heads, &info)?)
}

fn sdpa_heads(p: &SdpaParams, inputs: &[Tensor], out: &TensorInfo) -> Result<Tensor> {
    let (q, k, v) = (
        floats(&inputs[0])?,
        floats(&inputs[1])?,
        floats(&inputs[2])?,
    );
    let mask = inputs.get(3).map(floats).transpose()?;
    let (qd, kd, vd) = (inputs[0].dims(), inputs[1].dims(), inputs[2].dims());
    let r = qd.len();
    let (hq, lq, d) = (qd[r - 3], qd[r - 2], qd[r - 1]);
    let (hkv, lk, dv) = (kd[r - 3], kd[r - 2], vd[r - 1]);
    let group = hq / hkv;
    // Strides of the mask inside the score tensor [.., hq, lq, lk].
    let mut score_dims = qd[..r - 1].to_vec();
    score_dims.push(lk);
    let mask_strides = inputs
        .get(3)
        .map(|m| broadcast_strides(m.dims(), &score_dims));
    let slopes = p.alibi_max_bias.map(|m| alibi_slopes(m, hq));

    let mut y = vec![0f32; out.shape.numel()];
    if dv == 0 {
        return f32_out(out, &y);
    }
    y.par_chunks_mut(dv).enumerate().for_each(|(row, y_row)| {
        // row = (batch · hq + h) · lq + i
        let i = row % lq;
        let h = (row / lq) % hq;
        let batch = row / (lq * hq);
        let kv_head = batch * hkv + h / group;
        let q_row = &q[row * d..(row + 1) * d];
        let pos = lk as i64 - lq as i64 + i as i64;
        let mut scores: Vec<Option<f32>> = Vec::with_capacity(lk);
        for j in 0..lk {
            let jj = j as i64;
            let outside_window =
                |w: usize| jj <= pos.saturating_sub(i64::try_from(w).unwrap_or(i64::MAX));
            let hidden = (p.causal && jj > pos) || p.sliding_window.is_some_and(outside_window);
            if hidden {
                scores.push(None);
                continue;
            }
            let k_row = &k[(kv_head * lk + j) * d..][..d];
            let mut s = q_row
                .iter()
                .zip(k_row)
                .fold(0f32, |acc, (a, b)| acc + a * b)
                * p.scale;
            if let Some(c) = p.softcap {
                s = c * (s / c).tanh();
            }
            if let Some(slopes) = &slopes {
                s += slopes[h] * (jj - pos) as f32;
            }
            if let (Some(m), Some(ms)) = (&mask, &mask_strides) {
                s += m[super::broadcast_offset(row * lk + j, &score_dims, ms)];
            }
            // A -inf score (from the mask) drops the key like an excluded one.
            scores.push((s != f32::NEG_INFINITY).then_some(s));
        }
        let max = scores
            .iter()
            .flatten()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            return; // every key excluded: the row stays zero
        }
        let e: Vec<f32> = scores
            .iter()
            .map(|s| s.map_or(0.0, |s| (s - max).exp()))
            .collect();
        let sum = e.iter().fold(0f32, |a, b| a + b);
        for (j, ej) in e.iter().enumerate() {
            if scores[j].is_none() {
                continue; // skipped rather than weighted 0, so a non-finite v cannot leak in
            }
            let pj = ej / sum;
            let v_row = &v[(kv_head * lk + j) * dv..][..dv];
            for (o, vv) in y_row.iter_mut().zip(v_row) {
                *o += pj * vv;
            }
        }
    });
    f32_out(out, &y)
}

/// ALiBi slopes for `heads` heads: with `n` the largest power of two ≤ heads, head `h < n`
/// gets `2^(-max_bias·(h+1)/n)`; the remaining heads take the odd-numbered slopes of the
/// `2n`-head sequence, `2^(-max_bias·(2(h-n)+1)/(2n))`.
pub fn alibi_slopes(max_bias: f32, heads: usize) -> Vec<f32> {
    let n = if heads == 0 {
        1
    } else {
        1usize << heads.ilog2()
    };
    let m = max_bias as f64;
    (0..heads)
        .map(|h| {
            let e = if h < n {
                (h + 1) as f64 / n as f64
            } else {
                (2 * (h - n) + 1) as f64 / (2 * n) as f64
            };
            2f64.powf(-m * e) as f32
        })
        .collect()
}

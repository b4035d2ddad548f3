//! Loss nodes of ONNX models exported with their training loss: negative log-likelihood and
//! softmax cross-entropy. Computed on the host in f32 (they end graphs, on small tensors).

use crate::host_op::{cast_to, HostRun};
use cyb_ops::Op;
use cyb_tensor::{Error, Result, Tensor};

/// How per-element losses are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LossReduction {
    /// One loss per target element.
    None,
    Sum,
    /// Sum divided by the sum of the weights applied (ignored targets weigh 0).
    Mean,
}

/// `loss[n, d..] = -logp[n, target[n, d..], d..] · weight[target]`, ignored targets give 0.
/// `logp` is `[n, c, d..]`, `target` `[n, d..]` (integers), `weight` `[c]`.
pub(crate) fn nll(
    r: &mut HostRun,
    logp: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    reduction: LossReduction,
    ignore_index: Option<i64>,
) -> Result<Tensor> {
    let op = "nll_loss";
    let x = r.d.to_host(logp)?.to_f32_vec()?;
    let t = r.d.to_host(target)?.to_i64_vec()?;
    let w = match weight {
        Some(w) => Some(r.d.to_host(w)?.to_f32_vec()?),
        None => None,
    };
    let xd = logp.dims();
    if xd.len() < 2
        || target.dims().len() + 1 != xd.len()
        || target.dims()[0] != xd[0]
        || target.dims()[1..] != xd[2..]
    {
        return Err(Error::shape(op, xd, target.dims()));
    }
    let c = xd[1];
    let inner: usize = xd[2..].iter().product();
    let mut loss = vec![0f32; t.len()];
    let mut wsum = 0f32;
    for (i, &ti) in t.iter().enumerate() {
        if Some(ti) == ignore_index {
            continue;
        }
        let cls = usize::try_from(ti)
            .ok()
            .filter(|&k| k < c)
            .ok_or_else(|| Error::invalid(op, format!("target {ti} outside 0..{c}")))?;
        let wt = w.as_ref().map_or(Ok(1.0), |w| {
            w.get(cls)
                .copied()
                .ok_or_else(|| Error::invalid(op, "weight shorter than classes"))
        })?;
        let (n, s) = (i / inner.max(1), i % inner.max(1));
        loss[i] = -x[(n * c + cls) * inner + s] * wt;
        wsum += wt;
    }
    let out = match reduction {
        LossReduction::None => Tensor::from_f32(target.dims(), &loss)?,
        LossReduction::Sum => Tensor::from_f32(&[], &[loss.iter().sum()])?,
        LossReduction::Mean => Tensor::from_f32(&[], &[loss.iter().sum::<f32>() / wsum])?,
    };
    cast_to(r, out, logp.dtype())
}

/// Softmax cross-entropy: `log_softmax` over dim 1, then [`nll`]. Returns the loss and the log
/// probabilities.
pub(crate) fn softmax_cross_entropy(
    r: &mut HostRun,
    scores: &Tensor,
    labels: &Tensor,
    weight: Option<&Tensor>,
    reduction: LossReduction,
    ignore_index: Option<i64>,
) -> Result<Vec<Tensor>> {
    let logp = r.one(&Op::LogSoftmax { axis: 1 }, std::slice::from_ref(scores))?;
    let loss = nll(r, &logp, labels, weight, reduction, ignore_index)?;
    let logp = cast_to(r, logp, scores.dtype())?;
    Ok(vec![loss, logp])
}

//! The fused ops of the graph's fusion pass, defined as the ops they replace run in sequence
//! (so a fused graph on the reference is bit-identical to the unfused one).

use super::execute;
use crate::{LinearAct, Op};
use cyb_tensor::{Error, Result, Tensor};

fn first(mut outs: Vec<Tensor>, op: &str) -> Result<Tensor> {
    if outs.is_empty() {
        return Err(Error::invalid(op, "internal: a step gave no output"));
    }
    Ok(outs.swap_remove(0))
}

/// `act(a · w + bias)`: `MatMul`, `Add`, then the activation op.
pub(super) fn linear(rhs_transposed: bool, act: LinearAct, inputs: &[Tensor]) -> Result<Tensor> {
    let y = first(
        execute(&Op::MatMul { rhs_transposed }, &inputs[..2])?,
        "linear",
    )?;
    let y = first(execute(&Op::Add, &[y, inputs[2].clone()])?, "linear")?;
    match act.op() {
        Some(act) => first(execute(&act, &[y])?, "linear"),
        None => Ok(y),
    }
}

/// `s = a + b` and `norm(s, ...)` for `AddRmsNorm` / `AddLayerNorm`.
pub(super) fn add_norm(op: &Op, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let norm = match op {
        Op::AddRmsNorm { eps, weight_offset } => Op::RmsNorm {
            eps: *eps,
            weight_offset: *weight_offset,
        },
        Op::AddLayerNorm { eps } => Op::LayerNorm { eps: *eps },
        other => return Err(Error::invalid(other.name(), "internal: not an add-norm op")),
    };
    let s = first(execute(&Op::Add, &inputs[..2])?, op.name())?;
    let mut norm_in = vec![s.clone()];
    norm_in.extend_from_slice(&inputs[2..]);
    let y = first(execute(&norm, &norm_in)?, op.name())?;
    Ok(vec![s, y])
}

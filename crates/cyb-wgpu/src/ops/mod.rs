//! Which ops run on the GPU, and the host side of each kernel launch (shapes → parameters).
//! An op outside this list answers `supports == false`, and the dispatcher runs it elsewhere.

mod attention;
mod layout;
pub(crate) mod matmul;
mod pointwise;

pub(crate) use attention::{RopeRecipe, RopeSource};
pub(crate) use layout::materialize_input;

use crate::backend::{State, WgpuBackend};
use cyb_ops::Op;
use cyb_tensor::{DType, Result, Tensor, TensorInfo};

/// Largest element count a kernel indexes with 32-bit integers.
const MAX_ELEMS: usize = u32::MAX as usize / 4;

fn fits(infos: &[TensorInfo]) -> bool {
    infos.iter().all(|i| i.shape.numel() <= MAX_ELEMS)
}

/// True for dtypes the copy kernel moves (4-byte scalars).
pub(crate) fn word_dtype(d: DType) -> bool {
    matches!(d, DType::F32 | DType::I32)
}

pub(crate) fn supports(gpu: &WgpuBackend, op: &Op, inputs: &[TensorInfo]) -> bool {
    if !fits(inputs) {
        return false;
    }
    let all_f32 = |n: usize| inputs.len() == n && inputs.iter().all(|i| i.dtype == DType::F32);
    match op {
        Op::MatMul { rhs_transposed } => matmul::supports(gpu, *rhs_transposed, inputs),
        Op::Embedding => matmul::supports_embedding(gpu, inputs),
        Op::Add | Op::Sub | Op::Mul | Op::Div => all_f32(2) && pointwise::broadcastable(inputs),
        Op::Scale { .. } | Op::Silu | Op::Gelu { .. } | Op::Relu | Op::Tanh => all_f32(1),
        Op::SwiGlu | Op::GeGlu { .. } => {
            all_f32(1) || (all_f32(2) && inputs[0].shape == inputs[1].shape)
        }
        Op::RmsNorm { .. } => all_f32(2),
        Op::AddRmsNorm { .. } => all_f32(3),
        Op::LayerNorm { .. } => (1..=3).any(all_f32),
        Op::Softmax { axis } => {
            all_f32(1)
                && cyb_ops::resolve_axis("softmax", inputs[0].shape.rank(), *axis).ok()
                    == Some(inputs[0].shape.rank().saturating_sub(1))
        }
        Op::ArgMax { axis } => {
            all_f32(1)
                && cyb_ops::resolve_axis("argmax", inputs[0].shape.rank(), *axis).ok()
                    == Some(inputs[0].shape.rank().saturating_sub(1))
        }
        Op::Rope { .. } => attention::supports_rope(inputs),
        Op::Sdpa { .. } => attention::supports_sdpa(op, inputs),
        Op::Reshape { .. } => true,
        Op::Permute { .. } | Op::Transpose { .. } | Op::Slice { .. } | Op::Split { .. } => {
            inputs.len() == 1 && word_dtype(inputs[0].dtype) && inputs[0].shape.rank() <= 4
        }
        Op::KvAppend { .. } => all_f32(2),
        Op::Concat { .. } => {
            !inputs.is_empty()
                && inputs
                    .iter()
                    .all(|i| word_dtype(i.dtype) && i.shape.rank() <= 4)
        }
        _ => false,
    }
}

/// Records `op`; `None` when it cannot run here after all (an input needed on the host is not).
pub(crate) fn execute(
    gpu: &WgpuBackend,
    st: &mut State,
    op: &Op,
    inputs: &[Tensor],
    outs: &[TensorInfo],
) -> Result<Option<Vec<Tensor>>> {
    let one = |t: Tensor| Ok(Some(vec![t]));
    match op {
        Op::MatMul { .. } => one(matmul::matmul(gpu, st, inputs, &outs[0])?),
        Op::Embedding => match matmul::embedding(gpu, st, inputs, &outs[0])? {
            Some(t) => one(t),
            None => Ok(None),
        },
        Op::Rope { .. } => match attention::rope(gpu, st, op, inputs, &outs[0])? {
            Some(t) => one(t),
            None => Ok(None),
        },
        Op::Sdpa { .. } => one(attention::sdpa(gpu, st, op, inputs, &outs[0])?),
        Op::Reshape { .. } | Op::Permute { .. } | Op::Transpose { .. } | Op::Slice { .. } => {
            one(layout::single(gpu, st, op, &inputs[0], &outs[0])?)
        }
        Op::KvAppend { start } => one(layout::kv_append(gpu, st, *start, &inputs[0], &inputs[1])?),
        Op::Concat { axis } => one(layout::concat(gpu, st, *axis, inputs, &outs[0])?),
        Op::Split { axis, .. } => Ok(Some(layout::split(gpu, st, *axis, &inputs[0], outs)?)),
        Op::AddRmsNorm { eps, weight_offset } => Ok(Some(pointwise::add_rms_norm(
            gpu,
            st,
            (*eps, *weight_offset),
            inputs,
            &outs[0],
        )?)),
        _ => one(pointwise::execute(gpu, st, op, inputs, &outs[0])?),
    }
}

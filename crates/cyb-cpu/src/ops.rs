//! Elementwise and normalisation ops of the decode loop (placeholder).
use cyb_ops::Op;
use cyb_tensor::{Result, Tensor, TensorInfo};

pub(crate) fn supports(_op: &Op, _inputs: &[TensorInfo]) -> bool {
    false
}

pub(crate) fn execute(op: &Op, _inputs: &[Tensor]) -> Result<Tensor> {
    Err(cyb_tensor::Error::invalid(
        op.name(),
        "not implemented on cpu",
    ))
}

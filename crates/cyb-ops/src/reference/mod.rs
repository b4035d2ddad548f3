//! The CPU reference: one file per op family.

use crate::Op;
use cyb_tensor::{DType, Error, Result, Tensor};

/// Runs `op` on host tensors and returns its outputs.
pub fn execute(op: &Op, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    Err(Error::UnsupportedOp {
        op: op.name().into(),
        backend: "reference".into(),
        input_dtype: inputs.first().map(|t| t.dtype()).unwrap_or(DType::F32),
    })
}

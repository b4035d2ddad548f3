//! The CPU reference as a backend: the last link of every fallback chain. It runs every op
//! `cyb_ops::reference` implements, on host memory, and is the oracle for every other backend.

use crate::{Backend, ExecContext};
use cyb_ops::Op;
use cyb_tensor::{DType, Error, Result, Tensor, TensorInfo};

/// The portable reference backend (`cyb_ops::reference`).
#[derive(Debug, Default, Clone, Copy)]
pub struct ReferenceBackend;

impl Backend for ReferenceBackend {
    fn name(&self) -> &str {
        "reference"
    }

    fn supports(&self, op: &Op, inputs: &[TensorInfo]) -> bool {
        cyb_ops::output_infos(op, inputs).is_ok()
    }

    fn host_memory(&self) -> bool {
        true
    }

    fn execute(&self, op: &Op, inputs: &[Tensor], _ctx: &mut ExecContext) -> Result<Vec<Tensor>> {
        if let Some(t) = inputs.iter().find(|t| t.host_bytes().is_none()) {
            return Err(Error::invalid(
                op.name(),
                format!(
                    "reference backend got an input on device {}",
                    t.storage().location()
                ),
            ));
        }
        cyb_ops::reference::execute(op, inputs)
    }

    fn alloc(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::zeros(shape, dtype)
    }

    fn upload(&self, data: &[u8], shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::from_bytes(shape, dtype, data)
    }

    fn download_f32(&self, t: &Tensor) -> Result<Vec<f32>> {
        t.to_f32_vec()
    }

    fn download(&self, t: &Tensor) -> Result<Tensor> {
        match t.host_bytes() {
            Some(_) => Ok(t.clone()),
            None => Err(Error::invalid(
                "download",
                format!(
                    "tensor lives on {}, not on the host",
                    t.storage().location()
                ),
            )),
        }
    }
}

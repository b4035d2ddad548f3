//! The contract every backend implements (spec/execution-contract, "Backend trait").

use cyb_ops::Op;
use cyb_tensor::{DType, Result, Tensor, TensorInfo};

/// Per-call state a backend may use while executing ops of one forward step.
#[derive(Debug, Default)]
pub struct ExecContext {
    /// Index of the current forward step (incremented by `Dispatcher::begin_step`).
    pub step: u64,
}

/// A place where ops run: the CPU reference, the fast CPU kernels, a GPU.
///
/// Inputs given to `execute` are either host tensors or buffers this backend made; the
/// dispatcher moves anything else before calling.
pub trait Backend: Send + Sync {
    /// Identity for logs and dispatch records (`"reference"`, `"cpu"`, `"wgpu"`).
    fn name(&self) -> &str;

    /// True if this backend implements `op` for inputs of these shapes and dtypes. When it
    /// answers false the dispatcher falls back to the next backend of the chain.
    fn supports(&self, op: &Op, inputs: &[TensorInfo]) -> bool;

    /// True if this backend computes directly on host memory (CPU backends): host and mmap
    /// tensors are then passed as they are, with no upload.
    fn host_memory(&self) -> bool;

    /// Runs one op. An `Error::UnsupportedOp` is treated like `supports == false`: the
    /// dispatcher falls back. Any other error is final.
    fn execute(&self, op: &Op, inputs: &[Tensor], ctx: &mut ExecContext) -> Result<Vec<Tensor>>;

    /// A zero-filled tensor in this backend's memory.
    fn alloc(&self, shape: &[usize], dtype: DType) -> Result<Tensor>;

    /// Copies raw bytes (f32, f16, packed quant blocks, ...) from host memory to this backend.
    fn upload(&self, data: &[u8], shape: &[usize], dtype: DType) -> Result<Tensor>;

    /// Copies a host tensor to this backend. The dispatcher calls this (not `upload`) when it
    /// moves an input, so a backend can see the storage: shared, read-only storage (a weight in
    /// a file mapping) may be kept resident across steps, keyed by its owner, which the backend
    /// then holds on to so the memory cannot be reused under the same address.
    fn upload_tensor(&self, t: &Tensor) -> Result<Tensor> {
        let bytes = t.host_bytes().ok_or_else(|| {
            cyb_tensor::Error::invalid(
                "upload",
                format!(
                    "tensor lives on {}, not on the host",
                    t.storage().location()
                ),
            )
        })?;
        self.upload(bytes, t.dims(), t.dtype())
    }

    /// Copies a tensor of this backend to host memory as f32 (dequantizing if needed).
    fn download_f32(&self, t: &Tensor) -> Result<Vec<f32>>;

    /// Copies a tensor of this backend to host memory as a host tensor of the same dtype.
    fn download(&self, t: &Tensor) -> Result<Tensor>;

    /// Called when a forward step begins; a GPU backend may start recording a batch here.
    fn begin_step(&self, _ctx: &mut ExecContext) -> Result<()> {
        Ok(())
    }

    /// Called when a forward step ends; a GPU backend submits what it recorded.
    fn end_step(&self, _ctx: &mut ExecContext) -> Result<()> {
        Ok(())
    }
}

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

    /// True if one matmul over weights stacked along their output rows (a layer's q/k/v, or
    /// gate/up) runs faster here than the separate matmuls, so a model may stack them when it
    /// loads. A preference, never a condition of correctness.
    fn prefers_stacked_projections(&self) -> bool {
        false
    }

    /// Frees what this backend keeps for shared weights that nobody else holds any more:
    /// device copies, repacked or panel forms. Called when a model is dropped, so that its
    /// memory returns.
    fn release_unowned(&self) {}

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

    /// Device memory this backend holds now and at most so far (`None` for backends in host
    /// memory): weights, KV caches, activations and scratch.
    fn device_memory(&self) -> Option<DeviceMemory> {
        None
    }

    /// Called when a forward step begins; a GPU backend may start recording a batch here.
    fn begin_step(&self, _ctx: &mut ExecContext) -> Result<()> {
        Ok(())
    }

    /// Called when a forward step ends; a GPU backend submits what it recorded.
    fn end_step(&self, _ctx: &mut ExecContext) -> Result<()> {
        Ok(())
    }

    /// Starts recording the work the current step gives this backend, so that the step can
    /// later run again without the model, the dispatcher or the op code (`plan_replay`). Call
    /// after `begin_step`. False when this backend does not replay steps.
    fn begin_capture(&self) -> bool {
        false
    }

    /// Ends the recording `begin_capture` started; `output` is the step's result (still on
    /// this backend). `None` when the step did something a replay could not repeat (read a
    /// result back to the host, uploaded a weight).
    fn end_capture(&self, _output: &Tensor) -> Option<Recording> {
        None
    }

    /// A replay plan from the recordings of consecutive steps of one session, each with the
    /// host inputs the step was given (the same inputs, in the same order, as `replay` gets);
    /// `output` is the last step's result. `None` when the recordings do not show one step
    /// that only its host inputs and its position change (then the caller runs steps as
    /// usual).
    fn plan_replay(
        &self,
        _steps: Vec<(Recording, Vec<Vec<u8>>)>,
        _output: &Tensor,
    ) -> Result<Option<Recording>> {
        Ok(None)
    }

    /// Runs a planned step again, `steps` steps after the first recorded one (negative:
    /// before it), with new host `inputs`; returns the step's output. Call between
    /// `begin_step` and `end_step`.
    fn replay(&self, _plan: &Recording, _steps: i64, _inputs: &[&[u8]]) -> Result<Tensor> {
        Err(cyb_tensor::Error::invalid(
            self.name(),
            "this backend does not replay steps",
        ))
    }
}

/// What a backend recorded of a step, or a plan made of such recordings: opaque to the caller,
/// given back to the backend that made it.
pub type Recording = Box<dyn std::any::Any + Send + Sync>;

/// Bytes of device memory a backend holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Held now.
    pub current: u64,
    /// The most held at once since the backend was made .
    pub peak: u64,
}

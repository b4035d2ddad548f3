//! `CpuBackend`: the fast CPU implementation of the ops that dominate inference; every other op
//! answers `supports == false` and falls back to the reference, on the same host memory.

use crate::features::KernelSet;
use crate::matmul::quant_act::ActPrecision;
use crate::options::CpuOptions;
use crate::par::pool::ThreadPool;
use crate::par::Par;
use crate::{attention, conv, elementwise, layout, matmul, norm};
use cyb_backend::{Backend, ExecContext};
use cyb_ops::Op;
use cyb_tensor::{DType, Error, Result, Tensor, TensorInfo};

/// The fast CPU backend (`"cpu"`).
pub struct CpuBackend {
    set: KernelSet,
    act: ActPrecision,
    pool: ThreadPool,
    /// Quantized activations and repacked weights of the matmuls.
    scratch: matmul::Scratch,
    /// Time per op, with `CpuOptions::profile`.
    profile: Option<crate::profile::OpProfile>,
}

impl CpuBackend {
    /// The backend [`CpuOptions::from_env`] describes (the defaults unless its environment
    /// variables are set).
    pub fn new() -> Result<CpuBackend> {
        CpuBackend::from_options(&CpuOptions::from_env()?)
    }

    /// The backend `options` describe; an `Error::BackendInit` when this CPU cannot run the
    /// kernel set they name.
    pub fn from_options(options: &CpuOptions) -> Result<CpuBackend> {
        let set = options.kernel_set()?;
        let threads = options
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let mut scratch = matmul::Scratch::default();
        scratch.amx = options.amx;
        scratch.invariant = options.batch_invariant;
        Ok(CpuBackend {
            set,
            act: options
                .activations
                .unwrap_or(ActPrecision::default_for(set)),
            pool: ThreadPool::new(threads.max(1)),
            scratch,
            profile: options.profile.then(crate::profile::OpProfile::default),
        })
    }

    /// A backend using kernel set `set` and `threads` threads (the caller included), with the
    /// set's default activations (`ActPrecision::default_for`).
    pub fn with_options(set: KernelSet, threads: usize) -> Result<CpuBackend> {
        CpuBackend::from_options(&CpuOptions {
            kernels: Some(set),
            threads: Some(threads),
            ..CpuOptions::default()
        })
    }

    /// A backend using kernel set `set`, `threads` threads and `act` activation levels for the
    /// quantized matmuls.
    pub fn with_activations(
        set: KernelSet,
        threads: usize,
        act: ActPrecision,
    ) -> Result<CpuBackend> {
        CpuBackend::from_options(&CpuOptions {
            kernels: Some(set),
            threads: Some(threads),
            activations: Some(act),
            ..CpuOptions::default()
        })
    }

    pub fn kernel_set(&self) -> KernelSet {
        self.set
    }

    pub fn activations(&self) -> ActPrecision {
        self.act
    }

    /// Bytes held in derived copies of weights (repacked blocks, float panels); they go when
    /// the weights' owner does and `release_unowned` runs.
    pub fn cached_weight_bytes(&self) -> usize {
        self.scratch.cached_bytes()
    }

    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// This backend with prefill-sized quantized matmuls on AMX tiles (`true`, the default
    /// where the CPU has AMX-INT8) or on the VNNI kernels (`false`);
    /// both give bit-identical results.
    pub fn with_amx(mut self, on: bool) -> CpuBackend {
        self.scratch.amx = on;
        self
    }

    /// Runs one op (`execute` without the profile).
    fn run(&self, op: &Op, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let infos: Vec<TensorInfo> = inputs.iter().map(Tensor::info).collect();
        if !self.supports(op, &infos) {
            return Err(Error::UnsupportedOp {
                op: op.name().into(),
                backend: "cpu".into(),
                input_dtype: infos.first().map_or(DType::F32, |i| i.dtype),
            });
        }
        let par = Par {
            pool: &self.pool,
            set: self.set,
        };
        let out = match op {
            Op::MatMul { .. } => {
                let (a, w) = (&inputs[0], &inputs[1]);
                matmul::matmul(self.set, self.act, &self.pool, &self.scratch, a, w, None)?
            }
            Op::Linear { act, .. } => {
                let (a, w) = (&inputs[0], &inputs[1]);
                let bias = inputs[2].as_f32()?;
                let linear = Some((&*bias, *act));
                matmul::matmul(self.set, self.act, &self.pool, &self.scratch, a, w, linear)?
            }
            Op::AddRmsNorm { eps, weight_offset } => {
                return norm::add_rms_norm(par, *eps, *weight_offset, inputs);
            }
            Op::RmsNorm { eps, weight_offset } => {
                norm::rms_norm(par, *eps, *weight_offset, inputs)?
            }
            Op::AddLayerNorm { eps } => return norm::add_layer_norm(par, *eps, inputs),
            Op::LayerNorm { eps } => norm::layer_norm(par, *eps, inputs)?,
            Op::Sdpa { .. } => attention::sdpa(op, par, inputs, self.scratch.invariant)?,
            Op::Conv { .. } => {
                conv::conv(self.set, self.act, &self.pool, &self.scratch, op, inputs)?
            }
            Op::ConvTranspose { .. } => conv::conv_transpose(par, op, inputs)?,
            Op::Pool { .. } => conv::pool(par, op, inputs)?,
            Op::SliceNd { .. } | Op::Concat { .. } | Op::Pad { .. } => layout::execute(op, inputs)?,
            _ => elementwise::execute(op, inputs, par)?,
        };
        Ok(vec![out])
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }

    fn supports(&self, op: &Op, inputs: &[TensorInfo]) -> bool {
        supports(self.set, op, inputs)
    }

    fn host_memory(&self) -> bool {
        true
    }

    fn release_unowned(&self) {
        self.scratch.release_unowned();
    }

    /// Small models' q/k/v and gate/up matmuls are each one call on the thread pool instead of
    /// three or two.
    fn prefers_stacked_projections(&self) -> bool {
        true
    }

    fn execute(&self, op: &Op, inputs: &[Tensor], _ctx: &mut ExecContext) -> Result<Vec<Tensor>> {
        let Some(profile) = &self.profile else {
            return self.run(op, inputs);
        };
        let t0 = std::time::Instant::now();
        let out = self.run(op, inputs)?;
        profile.add(op, inputs, &out, t0.elapsed());
        Ok(out)
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

/// Whether the cpu backend with kernel set `set` runs `op` on inputs like these (what
/// `Backend::supports` answers; it needs no CPU that runs `set`, so the support table of
/// docs/ops.md can list every set).
pub fn supports(set: KernelSet, op: &Op, inputs: &[TensorInfo]) -> bool {
    if cyb_ops::output_infos(op, inputs).is_err() {
        return false;
    }
    match op {
        Op::MatMul { rhs_transposed } => matmul::supports(set, *rhs_transposed, inputs),
        Op::Linear { rhs_transposed, .. } => {
            inputs.len() == 3
                && inputs[2].dtype == DType::F32
                && matmul::supports(set, *rhs_transposed, &inputs[..2])
        }
        Op::Sdpa { .. } => attention::supports(set, op, inputs),
        Op::Conv { .. } => conv::supports(set, op, inputs),
        Op::ConvTranspose { .. } => conv::supports_transpose(op, inputs),
        Op::Pool { .. } => conv::supports_pool(op, inputs),
        Op::SliceNd { .. } | Op::Concat { .. } | Op::Pad { .. } => layout::supports(op, inputs),
        Op::LayerNorm { .. }
        | Op::AddLayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::AddRmsNorm { .. } => inputs.iter().all(|i| i.dtype == DType::F32),
        _ => elementwise::supports(op, inputs),
    }
}

/// Registers `"cpu"` with cyb-backend's registry so `--backend cpu` (and the default chain)
/// can create it. Idempotent.
pub fn register() {
    cyb_backend::register_backend(
        "cpu",
        "fast CPU kernels (AVX-512 VNNI / AVX2 / portable, picked at run time; quantized dot \
         products on the GGUF blocks); the default backend",
        || Ok(std::sync::Arc::new(CpuBackend::new()?)),
    );
}

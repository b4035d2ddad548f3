//! cyb-wgpu: the portable GPU backend. WGSL kernels run on any adapter wgpu opens (Vulkan,
//! Metal, DX12, GL); CI runs them on Mesa's software Vulkan (lavapipe).
//!
//! It implements `cyb_backend::Backend` and knows nothing of models or file formats: weights
//! arrive as packed bytes (GGUF block layouts) through `upload`, and the kernels unpack them.

mod backend;
mod context;
mod gpu_time;
mod host_time;
mod kernels;
mod launch;
mod memory;
mod ops;
mod options;
mod profile;
mod replay;
mod submit;

pub use backend::WgpuBackend;
pub use context::{adapters, auto_adapter, AdapterReport};
pub use kernels::WEIGHT_DTYPES;
pub use options::{WgpuOptions, ENV_VARS};

/// Registers `"wgpu"` (also reachable as `"wgpu+rs"`) with cyb-backend's registry. Idempotent.
pub fn register() {
    cyb_backend::register_backend(
        "wgpu",
        "portable GPU through wgpu (Vulkan / Metal / DX12 / GL; WGSL kernels; \
         CYB_WGPU_ADAPTER picks the adapter)",
        || Ok(std::sync::Arc::new(WgpuBackend::new()?)),
    );
}

/// One line per adapter found, with its limits, for `cyb-llm backends`.
pub fn describe_adapters() -> Vec<String> {
    adapters().iter().map(AdapterReport::summary).collect()
}

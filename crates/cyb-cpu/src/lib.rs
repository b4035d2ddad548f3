//! cyb-cpu: the fast CPU backend (`"cpu"`).
//!
//! Kernels are picked once at start-up by CPU feature detection (AVX-512 VNNI, AVX2, NEON on
//! aarch64, or the portable fallback every kernel has); quantized matmuls work on the packed GGUF blocks with
//! 16-bit (default) or 8-bit activations and integer dot products; a persistent thread pool splits outputs (never
//! reductions) so results do not depend on the thread count. Ops it does not implement fall
//! back to the CPU reference, which is also the oracle its tests compare against.
//!
//! This crate knows ops and tensors; it must not know about models or file formats.
//! `unsafe` lives only in the kernel files (`*_x86.rs`, `*_arm.rs`) and the thread pool.

// The repacked, AMX and packed-panel GEMM paths run on x86-64 only; elsewhere their shared
// parts are compiled but unused.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

mod act_quads;
#[cfg(target_arch = "x86_64")]
mod amx_x86;
mod attention;
mod backend;
mod features;
mod gemm;
#[cfg(target_arch = "x86_64")]
mod gemm_avx2;
#[cfg(target_arch = "x86_64")]
mod gemm_kq_x86;
#[cfg(target_arch = "x86_64")]
mod gemm_x86;
mod math;
mod matmul;
mod matmul_float;
#[cfg(target_arch = "x86_64")]
mod matmul_float_x86;
mod matmul_kquant;
#[cfg(target_arch = "x86_64")]
mod matmul_kquant16_x86;
#[cfg(target_arch = "x86_64")]
mod matmul_kquant_x86;
mod matmul_q16;
#[cfg(target_arch = "x86_64")]
mod matmul_q16_x86;
mod matmul_q4;
#[cfg(target_arch = "x86_64")]
mod matmul_q4_x86;
#[cfg(target_arch = "aarch64")]
mod neon_arm;
mod norm;
mod ops;
mod options;
mod par;
mod pool;
mod profile;
mod quant_act;
mod repack;
mod sgemm;
#[cfg(target_arch = "x86_64")]
mod sgemm_x86;
#[cfg(target_arch = "x86_64")]
mod wide_x86;

pub use backend::{register, supports, CpuBackend};
pub use features::KernelSet;
pub use options::{CpuOptions, ENV_VARS};
pub use quant_act::ActPrecision;

/// Whether this CPU and OS run the AMX-INT8 prefill kernels (the AVX-512 kernel set uses them
/// for quantized matmuls of 8 or more rows).
pub fn amx_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        KernelSet::Avx512.is_available() && amx_x86::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

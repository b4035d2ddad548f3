//! cyb-cpu: the fast CPU backend (`"cpu"`).
//!
//! Kernels are picked once at start-up by CPU feature detection (AVX-512 VNNI, AVX2, NEON on
//! aarch64, or the portable fallback every kernel has); quantized matmuls work on the packed GGUF blocks with
//! 16-bit (default) or 8-bit activations and integer dot products; a persistent thread pool splits outputs (never
//! reductions) so results do not depend on the thread count. Ops it does not implement fall
//! back to the CPU reference, which is also the oracle its tests compare against.
//!
//! This crate knows ops and tensors; it must not know about models or file formats.
//!
//! Kernels are filed by op, then by instruction set: a folder per op family whose `mod.rs`
//! picks the kernel for the kernel set, beside one file per instruction set.
//!
//! - `matmul/`: `MatMul` and `Linear`. `mod.rs` chooses the path; `rows/` the per-row kernels
//!   on the weight's own blocks (`legacy.rs`, `kquant.rs`, `q16.rs`, `float.rs`, each beside its
//!   `*_x86.rs` / `*_avx2.rs` kernels, and `neon.rs`); `gemm/` the GEMM on repacked weights
//!   (`repack.rs`, `act_quads.rs`, kernels `avx512.rs`, `avx512_kq.rs`, `amx.rs`, `avx2.rs`);
//!   `sgemm/` the float GEMM on packed panels (`x86.rs`); `blocks.rs` the packed-block decoders
//!   (scales, nibbles, high bits) every kernel set shares; `quant_act.rs` the quantized
//!   activations.
//! - `attention/`: `Sdpa` (`avx512.rs`: the decode kernels).
//! - `conv.rs`: `Conv` as the float GEMM over the gathered input windows (im2col).
//! - `norm/`: `LayerNorm` (`layer.rs`) and `RmsNorm` (`rms.rs`) with their fused adds.
//! - `elementwise/`: arithmetic, activations, RoPE, embedding, layout ops.
//! - `par/`: the thread pool (`pool.rs`) and the helpers that spread ops over it.
//!
//! Dispatchers import kernels; kernels import only shared leaves and data types (`blocks.rs`,
//! `quant_act.rs`, `gemm/act_quads.rs`, `gemm/avx512_base.rs`, `rows/x86_base.rs`,
//! `sgemm/tile.rs`; `gemm/avx512.rs` also the K-quant kernels of `gemm/avx512_kq.rs`), never a
//! dispatcher, so no two files import each other, even through others. `unsafe` lives in the
//! kernel files (those named for an instruction set), the thread pool, and the GEMM drivers and
//! dispatchers that call kernels and write disjoint parts of an output.

// The repacked, AMX and packed-panel GEMM paths run on x86-64 only; elsewhere their shared
// parts are compiled but unused.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

mod attention;
mod backend;
mod conv;
mod elementwise;
mod features;
mod layout;
mod math;
mod matmul;
mod norm;
mod options;
mod par;
mod profile;

pub use backend::{register, supports, CpuBackend};
pub use features::KernelSet;
pub use matmul::quant_act::ActPrecision;
pub use options::{CpuOptions, ENV_VARS};

/// Whether this CPU and OS run the AMX-INT8 prefill kernels (the AVX-512 kernel set uses them
/// for quantized matmuls of 8 or more rows).
pub fn amx_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        KernelSet::Avx512.is_available() && matmul::gemm::amx::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

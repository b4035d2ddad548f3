//! The per-row matmul kernels: up to four weight rows against up to four activation rows per
//! call, on the weight's own blocks (no repacking). One file per weight family picks the kernel
//! for a kernel set and holds the portable one: `legacy.rs` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0),
//! `kquant.rs` (the K-quants and the ternary formats), both against 8-bit activations;
//! `q16.rs` (both families against 16-bit activations); `float.rs` (F32, F16, BF16). The
//! instruction-set kernels sit beside them: `legacy_x86.rs`, `q16_x86.rs`, `kquant_avx2.rs`,
//! `kquant16_avx2.rs`, `float_x86.rs` (x86-64, sharing `x86_base.rs`) and `neon.rs` (aarch64,
//! every family). The block decoders they share are in `../blocks.rs`.

pub(super) mod float;
#[cfg(target_arch = "x86_64")]
pub(super) mod float_x86;
pub(super) mod kquant;
#[cfg(target_arch = "x86_64")]
mod kquant16_avx2;
#[cfg(target_arch = "x86_64")]
mod kquant_avx2;
pub(super) mod legacy;
#[cfg(target_arch = "x86_64")]
mod legacy_x86;
#[cfg(target_arch = "aarch64")]
mod neon;
pub(super) mod q16;
#[cfg(target_arch = "x86_64")]
mod q16_x86;
#[cfg(target_arch = "x86_64")]
mod x86_base;

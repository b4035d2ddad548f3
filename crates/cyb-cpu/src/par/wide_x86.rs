//! Runs portable Rust compiled for the wider vector units this CPU has: the closure is
//! inlined into a function built with AVX2 or AVX-512 enabled, so its plain loops (written
//! with fixed-width lane arrays) auto-vectorize to 8 or 16 lanes instead of SSE2's 4.
//! Results are the same as the portable build's: only independent lanes are widened, no
//! reduction is reordered.

use crate::features::KernelSet;

#[target_feature(enable = "avx2,fma")]
fn avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
fn avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// `f()`, compiled for `set` when this CPU has it.
#[inline(always)]
pub(crate) fn wide<R>(set: KernelSet, f: impl FnOnce() -> R) -> R {
    match set {
        // SAFETY: `is_available` checked this CPU has every feature the callee enables.
        KernelSet::Avx512 if set.is_available() => unsafe { avx512(f) },
        // SAFETY: as above.
        KernelSet::Avx2 if set.is_available() => unsafe { avx2(f) },
        _ => f(),
    }
}

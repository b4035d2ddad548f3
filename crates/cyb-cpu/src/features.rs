//! Which kernel set this CPU can run, decided once at start-up from CPU feature detection.
//!
//! `CpuOptions::kernels` (`CYB_CPU_KERNELS=portable|avx2|avx512|neon`) lowers the choice (tests
//! use it to exercise every path on one machine); asking for a set the CPU lacks is an error
//! rather than a crash.

use cyb_tensor::Result;

/// A family of kernels. Every kernel has a portable version; the others need the CPU features
/// listed by [`KernelSet::is_available`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum KernelSet {
    /// Plain Rust, any CPU.
    Portable,
    /// x86-64 AVX2 + FMA + F16C: `maddubs`/`madd` integer dot products.
    Avx2,
    /// AVX2 plus AVX-512 (F, BW, VL) with VNNI: `vpdpbusd` integer dot products.
    Avx512,
    /// aarch64 NEON (Advanced SIMD): widening `smull` integer dot products, 8-bit activations.
    Neon,
}

impl KernelSet {
    pub fn name(self) -> &'static str {
        match self {
            KernelSet::Portable => "portable",
            KernelSet::Avx2 => "avx2",
            KernelSet::Avx512 => "avx512",
            KernelSet::Neon => "neon",
        }
    }

    pub fn parse(s: &str) -> Option<KernelSet> {
        match s.trim().to_ascii_lowercase().as_str() {
            "portable" => Some(KernelSet::Portable),
            "avx2" => Some(KernelSet::Avx2),
            "avx512" => Some(KernelSet::Avx512),
            "neon" => Some(KernelSet::Neon),
            _ => None,
        }
    }

    /// True when this CPU has every feature the set's kernels are compiled for.
    pub fn is_available(self) -> bool {
        match self {
            KernelSet::Portable => true,
            #[cfg(target_arch = "x86_64")]
            KernelSet::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            KernelSet::Avx512 => {
                KernelSet::Avx2.is_available()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "aarch64")]
            KernelSet::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Every set this CPU can run, slowest first.
    pub fn available() -> Vec<KernelSet> {
        [
            KernelSet::Portable,
            KernelSet::Avx2,
            KernelSet::Avx512,
            KernelSet::Neon,
        ]
        .into_iter()
        .filter(|k| k.is_available())
        .collect()
    }

    /// The best set this CPU runs.
    pub fn detect() -> Result<KernelSet> {
        Ok(KernelSet::available()
            .last()
            .copied()
            .unwrap_or(KernelSet::Portable))
    }
}

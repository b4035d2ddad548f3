//! The backends under test: every one this build has and this machine can start.

use cyb_backend::Backend;
use cyb_cpu::{CpuBackend, CpuOptions, KernelSet};
use std::sync::Arc;

/// One backend configuration the suite runs every case on.
pub struct Target {
    /// For messages: `"cpu avx512"`, `"wgpu llvmpipe (LLVM ...)"`.
    pub name: String,
    /// Whether results must not depend on the thread count: then `twin` is the same backend
    /// with one thread, and its results must be bit-identical.
    pub twin: Option<Arc<dyn Backend>>,
    pub backend: Arc<dyn Backend>,
}

/// Every target of this build on this machine, and a line for each one that could not start
/// (a missing GPU adapter; under CI that is a failure of the caller's choosing).
pub fn targets() -> (Vec<Target>, Vec<String>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for set in KernelSet::available() {
        let mut amx = vec![false];
        if set == KernelSet::Avx512 && cyb_cpu::amx_available() {
            amx.push(true);
        }
        for amx in amx {
            let options = |threads| CpuOptions {
                kernels: Some(set),
                threads: Some(threads),
                amx,
                ..CpuOptions::default()
            };
            let make = |threads| CpuBackend::from_options(&options(threads));
            match (make(3), make(1)) {
                (Ok(three), Ok(one)) => found.push(Target {
                    name: format!("cpu {}{}", set.name(), if amx { " + AMX" } else { "" }),
                    twin: Some(Arc::new(one)),
                    backend: Arc::new(three),
                }),
                (Err(e), _) | (_, Err(e)) => missing.push(format!("cpu {}: {e}", set.name())),
            }
        }
    }
    #[cfg(feature = "wgpu")]
    match cyb_wgpu::WgpuBackend::new() {
        Ok(gpu) => found.push(Target {
            name: format!("wgpu {}", gpu.adapter().summary()),
            twin: None,
            backend: Arc::new(gpu),
        }),
        Err(e) => missing.push(format!("wgpu: {e}")),
    }
    (found, missing)
}

/// Fails loudly under CI (environment variable `CI` set) when a target is missing, so CI never
/// passes by skipping; elsewhere prints what was skipped.
pub fn require_all(missing: &[String]) {
    for m in missing {
        if std::env::var_os("CI").is_some() {
            panic!("CI is set and a backend cannot start: {m} (install mesa-vulkan-drivers)");
        }
        eprintln!("SKIPPED: {m}");
    }
}

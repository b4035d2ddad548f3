//! `WgpuOptions`: everything that sets up the wgpu backend, filled by the CLI or the runtime API;
//! [`WgpuOptions::from_env`] is the one place the backend reads environment variables
//! ([`ENV_VARS`] lists them; docs/backends/wgpu.md shows the table).

use cyb_tensor::Result;

/// How a [`WgpuBackend`](crate::WgpuBackend) is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgpuOptions {
    /// Part of the adapter's name, driver or API (as `cyb-llm backends` lists them); `None`:
    /// the best adapter found (hardware first).
    pub adapter: Option<String>,
    /// Prefill matmuls on cooperative matrices (tensor cores) where the adapter has them
    /// (default on).
    pub cooperative_matrices: bool,
    /// Reductions on subgroup operations where the adapter has them (default on).
    pub subgroups: bool,
    /// Decode steps recorded once and replayed while their shapes stay the same (default on).
    pub replay: bool,
    /// Kernels compiled with wgpu's shader runtime checks (bounds checks; a debugging knob).
    pub shader_checks: bool,
    /// Every launch submitted and waited for on its own, wall time per kernel printed at exit
    /// (a profiling knob; it serializes the GPU).
    pub profile: bool,
    /// GPU timestamps per step (`Some(false)`) or per kernel (`Some(true)`), printed at exit,
    /// where the adapter has timestamp queries (a profiling knob).
    pub gpu_time: Option<bool>,
    /// Host time spent in the backend per call, printed at exit (a profiling knob).
    pub host_time: bool,
    /// Device memory by kind (weights, kept buffers, frame buffers) at the peak, printed at
    /// exit (a profiling knob).
    pub memory_report: bool,
}

impl Default for WgpuOptions {
    fn default() -> WgpuOptions {
        WgpuOptions {
            adapter: None,
            cooperative_matrices: true,
            subgroups: true,
            replay: true,
            shader_checks: false,
            profile: false,
            gpu_time: None,
            host_time: false,
            memory_report: false,
        }
    }
}

/// The environment variables [`WgpuOptions::from_env`] reads, with what each sets.
pub const ENV_VARS: &[(&str, &str)] = &[
    (
        "CYB_WGPU_ADAPTER",
        "`adapter`: part of an adapter's name, driver or API",
    ),
    (
        "CYB_WGPU_COOPMAT",
        "`cooperative_matrices`: `0` keeps prefill off tensor cores",
    ),
    (
        "CYB_WGPU_SUBGROUPS",
        "`subgroups`: `0` reduces through workgroup memory only",
    ),
    ("CYB_WGPU_REPLAY", "`replay`: `0` records every decode step"),
    (
        "CYB_WGPU_CHECKS",
        "`shader_checks`: `1` compiles kernels with bounds checks",
    ),
    (
        "CYB_WGPU_PROFILE",
        "`profile`: `1` waits for every launch and prints time per kernel at exit",
    ),
    (
        "CYB_WGPU_GPU_TIME",
        "`gpu_time`: `1` GPU time per step, `kernels` per kernel, at exit",
    ),
    (
        "CYB_WGPU_HOST_TIME",
        "`host_time`: `1` prints the backend's host time per call at exit",
    ),
    (
        "CYB_WGPU_MEMORY",
        "`memory_report`: `1` prints device memory by kind at exit",
    ),
];

impl WgpuOptions {
    /// The defaults, changed by whichever of [`ENV_VARS`] are set (an empty value counts as
    /// unset).
    pub fn from_env() -> Result<WgpuOptions> {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let on = |name: &str, default: bool| var(name).map_or(default, |v| v != "0");
        Ok(WgpuOptions {
            adapter: var("CYB_WGPU_ADAPTER"),
            cooperative_matrices: on("CYB_WGPU_COOPMAT", true),
            subgroups: on("CYB_WGPU_SUBGROUPS", true),
            replay: on("CYB_WGPU_REPLAY", true),
            shader_checks: var("CYB_WGPU_CHECKS").is_some_and(|v| v == "1"),
            profile: on("CYB_WGPU_PROFILE", false),
            gpu_time: var("CYB_WGPU_GPU_TIME")
                .filter(|v| v != "0")
                .map(|v| v == "kernels"),
            host_time: on("CYB_WGPU_HOST_TIME", false),
            memory_report: on("CYB_WGPU_MEMORY", false),
        })
    }
}

//! `CpuOptions`: everything that sets up the cpu backend, filled by the CLI's flags or the
//! runtime API; [`CpuOptions::from_env`] is the one place the backend reads environment
//! variables ([`ENV_VARS`] lists them; docs/backends/cpu.md shows the table).

use crate::features::KernelSet;
use crate::matmul::quant_act::ActPrecision;
use cyb_tensor::{Error, Result};

/// How a [`CpuBackend`](crate::CpuBackend) is set up. `None` fields take the machine's
/// default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuOptions {
    /// Threads of the pool, the caller included (default: every available core).
    pub threads: Option<usize>,
    /// Kernel set (default: the best this CPU runs).
    pub kernels: Option<KernelSet>,
    /// Activation levels of the quantized matmuls (default: the kernel set's,
    /// [`ActPrecision::default_for`]).
    pub activations: Option<ActPrecision>,
    /// Prefill-sized quantized matmuls on AMX tiles where the CPU has AMX-INT8 (default on);
    /// off, they run on the VNNI kernels, bit-identically.
    pub amx: bool,
    /// Every matmul computes each output row the same way whatever the number of rows it is
    /// given (default off): a sequence's results then do not depend on which others share its
    /// forward steps. Float weights take the packed GEMM even for one row (decode reads them
    /// somewhat slower), and no kernel is chosen by the row count.
    pub batch_invariant: bool,
    /// Wall time per op kind, printed when the backend is dropped (a profiling knob).
    pub profile: bool,
}

impl Default for CpuOptions {
    fn default() -> CpuOptions {
        CpuOptions {
            threads: None,
            kernels: None,
            activations: None,
            amx: true,
            batch_invariant: false,
            profile: false,
        }
    }
}

/// The environment variables [`CpuOptions::from_env`] reads, with what each sets.
pub const ENV_VARS: &[(&str, &str)] = &[
    (
        "CYB_THREADS",
        "`threads`: a positive integer (the CLI's `-t`/`--threads` wins over it)",
    ),
    (
        "CYB_CPU_KERNELS",
        "`kernels`: `avx512`, `avx2`, `neon` or `portable`, one this CPU runs",
    ),
    (
        "CYB_CPU_ACT",
        "`activations`: `q16` or `q8` levels for the quantized matmuls",
    ),
    ("CYB_CPU_AMX", "`amx`: `0` runs prefill on the VNNI kernels"),
    (
        "CYB_CPU_BATCH_INVARIANT",
        "`batch_invariant`: `1` makes each row's result independent of the batch",
    ),
    (
        "CYB_CPU_PROFILE",
        "`profile`: `1` prints wall time per op kind at exit",
    ),
];

impl CpuOptions {
    /// The defaults, changed by whichever of [`ENV_VARS`] are set (an empty value counts as
    /// unset). A value that does not parse is an `Error::BackendInit` naming it.
    pub fn from_env() -> Result<CpuOptions> {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let bad = |name: &str, v: &str, want: &str| Error::BackendInit {
            backend: "cpu".into(),
            reason: format!("{name}={v:?} is not {want}"),
        };
        let mut o = CpuOptions::default();
        if let Some(v) = var("CYB_THREADS") {
            let t = v.parse::<usize>().ok().filter(|&t| t > 0);
            o.threads = Some(t.ok_or_else(|| bad("CYB_THREADS", &v, "a positive integer"))?);
        }
        if let Some(v) = var("CYB_CPU_KERNELS") {
            let set = KernelSet::parse(&v);
            o.kernels = Some(set.ok_or_else(|| bad("CYB_CPU_KERNELS", &v, "a kernel set"))?);
        }
        if let Some(v) = var("CYB_CPU_ACT") {
            let act = ActPrecision::parse(&v);
            o.activations = Some(act.ok_or_else(|| bad("CYB_CPU_ACT", &v, "q16 or q8"))?);
        }
        if let Some(v) = var("CYB_CPU_AMX") {
            o.amx = v != "0";
        }
        if let Some(v) = var("CYB_CPU_BATCH_INVARIANT") {
            o.batch_invariant = v != "0";
        }
        if let Some(v) = var("CYB_CPU_PROFILE") {
            o.profile = v != "0";
        }
        Ok(o)
    }

    /// The kernel set these options pick: the one named (an `Error::BackendInit` if this CPU
    /// cannot run it), else the best available.
    pub fn kernel_set(&self) -> Result<KernelSet> {
        match self.kernels {
            None => KernelSet::detect(),
            Some(set) if set.is_available() => Ok(set),
            Some(set) => Err(Error::BackendInit {
                backend: "cpu".into(),
                reason: format!(
                    "this CPU cannot run the {} kernels (it runs: {})",
                    set.name(),
                    KernelSet::available()
                        .iter()
                        .map(|k| k.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        }
    }
}

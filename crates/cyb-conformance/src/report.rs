//! `docs/ops.md`: for every op and dtype of the conformance cases, whether each backend runs it
//! natively or falls back.
//!
//! The cpu columns come from [`cyb_cpu::supports`], which needs no CPU that runs the set, so the
//! table is the same on every x86-64 machine. The wgpu column asks a live adapter; what the
//! kernels accept does not depend on the adapter at these sizes.

use crate::Case;
use cyb_backend::Backend;
use cyb_cpu::KernelSet;
use cyb_tensor::{Tensor, TensorInfo};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A backend column: its heading and its answer for one case.
pub struct Column<'a> {
    pub heading: String,
    pub supports: Box<dyn Fn(&Case) -> bool + 'a>,
}

/// The cpu backend's x86-64 kernel sets, best first (NEON is checked under emulation by
/// tools/test_aarch64.sh, not listed here).
pub fn cpu_columns() -> Vec<Column<'static>> {
    [KernelSet::Avx512, KernelSet::Avx2, KernelSet::Portable]
        .into_iter()
        .map(|set| Column {
            heading: format!("cpu {}", set.name()),
            supports: Box::new(move |c: &Case| cyb_cpu::supports(set, &c.op, &infos(c))),
        })
        .collect()
}

/// A column answered by a live backend.
pub fn backend_column<'a>(heading: &str, backend: &'a dyn Backend) -> Column<'a> {
    Column {
        heading: heading.to_string(),
        supports: Box::new(move |c: &Case| backend.supports(&c.op, &infos(c))),
    }
}

fn infos(c: &Case) -> Vec<TensorInfo> {
    c.inputs.iter().map(Tensor::info).collect()
}

/// The page: one row per (op, dtype), one column per backend; a cell is `native`, `falls back`,
/// or, when only some shape classes run natively, those classes.
pub fn ops_md(cases: &[Case], columns: &[Column<'_>]) -> String {
    // (op family, op, dtype) → the cases, in table order.
    let mut rows: BTreeMap<(&str, &str, String), Vec<&Case>> = BTreeMap::new();
    for c in cases {
        let key = (
            crate::cases::family(&c.op),
            c.op.name(),
            c.dtype.to_string(),
        );
        rows.entry(key).or_default().push(c);
    }
    let mut s = String::new();
    s.push_str(
        "# Ops by backend\n\n\
         Generated from the conformance cases (`crates/cyb-conformance/src/cases/`) by\n\
         `cargo run -p cyb-conformance --bin ops-doc > docs/ops.md`; a test fails when this\n\
         file is stale, so do not edit it by hand.\n\n\
         Every op runs on the CPU reference (`cyb-ops`), the last backend of every chain. A cell\n\
         says what the other backends do with the cases of that op and input dtype (the weight's\n\
         dtype for matmuls and lookups): **native** (the backend runs every case, and the suite\n\
         checks it against the reference at the op's tolerance), **falls back** (the backend\n\
         declines and the dispatcher sends the op down the chain; `--verbose` shows it), or which\n\
         shape classes it runs natively when it runs only some. The cpu columns are the x86-64\n\
         kernel sets (NEON is tested under emulation by `tools/test_aarch64.sh`); wgpu's is the\n\
         same on every adapter at these sizes. See `docs/backends/` for each backend.\n\n",
    );
    let mut head = String::from("| family | op | dtype | cases |");
    let mut rule = String::from("|---|---|---|---:|");
    for col in columns {
        let _ = write!(head, " {} |", col.heading);
        rule.push_str("---|");
    }
    let _ = writeln!(s, "{head}\n{rule}");
    for ((family, op, dtype), cases) in &rows {
        let _ = write!(s, "| {family} | `{op}` | {dtype} | {} |", cases.len());
        for col in columns {
            let (native, declined): (Vec<&Case>, Vec<&Case>) =
                cases.iter().partition(|c| (col.supports)(c));
            let classes = |v: &[&Case]| {
                let mut names: Vec<&str> = v.iter().map(|c| c.shape).collect();
                names.dedup();
                names.join(", ")
            };
            let cell = if declined.is_empty() {
                "native".to_string()
            } else if native.is_empty() {
                "falls back".to_string()
            } else if native.len() >= declined.len() {
                format!("native except {}", classes(&declined))
            } else {
                format!("native for {} only", classes(&native))
            };
            let _ = write!(s, " {cell} |");
        }
        s.push('\n');
    }
    s
}

/// The page for this build: the cpu columns, and wgpu's from an adapter (an error when none
/// opens, since the page must list it).
pub fn current_page() -> Result<String, String> {
    let cases = crate::cases::all();
    #[cfg(feature = "wgpu")]
    let gpu = cyb_wgpu::WgpuBackend::new().map_err(|e| {
        format!("the wgpu column needs an adapter ({e}); install mesa-vulkan-drivers")
    })?;
    #[allow(unused_mut)]
    let mut columns: Vec<Column<'_>> = cpu_columns();
    #[cfg(feature = "wgpu")]
    columns.push(backend_column("wgpu", &gpu));
    Ok(ops_md(&cases, &columns))
}

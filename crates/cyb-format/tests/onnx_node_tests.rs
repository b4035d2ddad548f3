//! ONNX's own conformance tests (Debian's `libonnx-testdata`, ONNX 1.12: the operator cases of
//! `node/`, and the small models of `pytorch-converted/`, `pytorch-operator/` and `simple/`):
//! every case is imported, run on the CPU reference through the dispatcher, and
//! compared with ONNX's expected outputs at the tolerances ONNX's backend tests use
//! (rtol 1e-3, atol 1e-7). A case passes only on a match; an import error, run error, panic or
//! mismatch is a failure with its reason. CI fails when fewer cases than recorded in `SUITES` pass, or
//! (with `CI=true`) when the test data is not installed.
//!
//! `cargo test -p cyb-format --test onnx_node_tests -- --ignored write_support_doc` rewrites
//! docs/onnx-support.md from the results.

use cyb_backend::Dispatcher;
mod prepared;
use cyb_format::onnx::{decode_model, read_tensor_pb};
use cyb_graph::Executor;
use cyb_tensor::{DType, Tensor};
use prepared::load_onnx;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The suites of libonnx-testdata that run, with the cases that pass today in each; the test
/// fails if a change makes fewer pass.
const SUITES: &[(&str, usize)] = &[
    ("node", 877),
    ("pytorch-converted", 82),
    ("pytorch-operator", 35),
    ("simple", 7),
];

/// Ops whose outputs are random draws: ONNX's expected values come from numpy's generator,
/// which no other implementation reproduces, so such cases are reported, never compared.
const RANDOM_OPS: &[&str] = &[
    "Bernoulli",
    "Multinomial",
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
];

/// Cases whose expected data disagrees with the current ONNX spec, with the reason; they
/// fail with that reason in front.
const DOCUMENTED: &[(&str, &str)] = &[
    (
        "test_cast_FLOAT_to_BFLOAT16",
        "ONNX 1.12 made this data by truncating to BFLOAT16; the spec rounds to nearest even, as we do",
    ),
    (
        "test_adam_multiple",
        "ONNX 1.12 computed this data with epsilon 1e-2, but the node leaves epsilon at the spec's default 1e-6, which we use",
    ),
];

const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-7;

fn data_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("ONNX_TEST_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/libonnx-testdata/data"));
    if dir.join("node").is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "ONNX test data not found at {} (apt-get install libonnx-testdata)",
        dir.display()
    );
    eprintln!(
        "skipping: {} is missing (apt-get install libonnx-testdata)",
        dir.display()
    );
    None
}

#[derive(Debug)]
enum Outcome {
    Pass,
    Fail(String),
}

struct Case {
    name: String,
    op: String,
    outcome: Outcome,
}

fn sorted_files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<(usize, PathBuf)> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .filter_map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    let idx = n.strip_prefix(prefix)?.strip_suffix(".pb")?.parse().ok()?;
                    Some((idx, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

/// ONNX 1.12's test data stores BFLOAT16 tensors as UINT16 bit patterns: such a tensor is read
/// as BF16 where the model says BF16 (same bytes, same shape).
fn as_bf16_if(t: Tensor, want_bf16: bool) -> Tensor {
    if !want_bf16 || t.dtype() != DType::U16 {
        return t;
    }
    match t.host_bytes() {
        Some(b) => Tensor::from_bytes(t.dims(), DType::BF16, b).unwrap_or(t),
        None => t,
    }
}

fn compare(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.dims() != want.dims() {
        return Err(format!(
            "shape {:?}, expected {:?}",
            got.dims(),
            want.dims()
        ));
    }
    let want = as_bf16_if(want.clone(), got.dtype() == DType::BF16);
    if got.dtype() != want.dtype() {
        return Err(format!("dtype {}, expected {}", got.dtype(), want.dtype()));
    }
    if want.dtype().is_float() {
        let (g, w) = (
            got.to_f64_vec().map_err(|e| e.to_string())?,
            want.to_f64_vec().map_err(|e| e.to_string())?,
        );
        for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
            let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= ATOL + RTOL * b.abs();
            if !ok {
                return Err(format!("element {i}: {a}, expected {b}"));
            }
        }
    } else {
        let g = got
            .to_i64_vec()
            .map_err(|e| format!("output is {}: {e}", got.dtype()))?;
        let w = want.to_i64_vec().map_err(|e| e.to_string())?;
        if let Some(i) = (0..w.len()).find(|&i| g[i] != w[i]) {
            return Err(format!("element {i}: {}, expected {}", g[i], w[i]));
        }
    }
    Ok(())
}

/// The dispatcher the cases run through: the CPU reference, or with `cpu` the fast CPU backend
/// first (falling back to the reference for what it does not implement).
fn dispatcher(cpu: bool) -> Dispatcher {
    if !cpu {
        return Dispatcher::reference();
    }
    match cyb_cpu::CpuBackend::new() {
        Ok(b) => Dispatcher::new(vec![std::sync::Arc::new(b)]),
        Err(e) => panic!("cpu backend: {e}"),
    }
}

fn run_case(dir: &Path, cpu: bool) -> Outcome {
    let outcome = run_case_inner(dir, cpu);
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    match (outcome, DOCUMENTED.iter().find(|(n, _)| *n == name)) {
        (Outcome::Fail(why), Some((_, doc))) => Outcome::Fail(format!("documented: {doc} ({why})")),
        (o, _) => o,
    }
}

fn run_case_inner(dir: &Path, cpu: bool) -> Outcome {
    let model = dir.join("model.onnx");
    if let Ok(m) = decode_model(&model) {
        let ops = m.graph.map(|g| g.node).unwrap_or_default();
        if let Some(n) = ops
            .iter()
            .find(|n| RANDOM_OPS.contains(&n.op_type.as_str()))
        {
            return Outcome::Fail(format!(
                "random output ({}): ONNX's expected values are numpy draws, not comparable",
                n.op_type
            ));
        }
    }
    let g = match load_onnx(&model) {
        Ok(g) => g,
        Err(e) => return Outcome::Fail(format!("import: {e}")),
    };
    let d = dispatcher(cpu);
    let ex = match Executor::new(&g, &d) {
        Ok(x) => x,
        Err(e) => return Outcome::Fail(format!("plan: {e}")),
    };
    let mut sets: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    sets.sort();
    if sets.is_empty() {
        return Outcome::Fail("no test_data_set".into());
    }
    for set in sets {
        let mut inputs = HashMap::new();
        for (i, p) in sorted_files(&set, "input_").iter().enumerate() {
            match read_tensor_pb(p) {
                Ok((name, t)) => {
                    let name = if name.is_empty() {
                        g.inputs
                            .get(i)
                            .map(|&id| g.name_of(id).to_string())
                            .unwrap_or_default()
                    } else {
                        name
                    };
                    let bf16 = g
                        .value_id(&name)
                        .and_then(|id| g.values.get(id))
                        .and_then(|v| v.ty.as_ref())
                        .is_some_and(|ty| ty.dtype == DType::BF16);
                    inputs.insert(name, as_bf16_if(t, bf16));
                }
                Err(e) => return Outcome::Fail(format!("input data: {e}")),
            }
        }
        let outs = match ex.run(&inputs) {
            Ok((o, _)) => o,
            Err(e) => return Outcome::Fail(format!("run: {e}")),
        };
        let want = sorted_files(&set, "output_");
        if want.len() != outs.len() {
            return Outcome::Fail(format!("{} outputs, expected {}", outs.len(), want.len()));
        }
        for (p, (name, got)) in want.iter().zip(&outs) {
            let w = match read_tensor_pb(p) {
                Ok((_, t)) => t,
                Err(e) => return Outcome::Fail(format!("expected data: {e}")),
            };
            if let Err(e) = compare(got, &w) {
                return Outcome::Fail(format!("mismatch in {name}: {e}"));
            }
        }
    }
    Outcome::Pass
}

fn op_label(dir: &Path) -> String {
    match decode_model(&dir.join("model.onnx")) {
        Ok(m) => {
            let mut ops: Vec<String> = m
                .graph
                .map(|g| g.node.into_iter().map(|n| n.op_type).collect())
                .unwrap_or_default();
            ops.sort();
            ops.dedup();
            if ops.len() == 1 {
                ops.remove(0)
            } else {
                format!("(function expansion) {}", ops.join("+"))
            }
        }
        Err(_) => "(unreadable model)".into(),
    }
}

fn run_all(dir: &Path, cpu: bool) -> Vec<Case> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.path())
                .filter(|p| p.join("model.onnx").is_file())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
        .iter()
        .map(|p| {
            let outcome = std::panic::catch_unwind(|| run_case(p, cpu))
                .unwrap_or_else(|_| Outcome::Fail("panic (a bug: please report)".into()));
            Case {
                name: p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                op: op_label(p),
                outcome,
            }
        })
        .collect()
}

fn passed(cases: &[Case]) -> usize {
    cases
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Pass))
        .count()
}

#[test]
fn node_tests_pass_count_does_not_drop() {
    let Some(root) = data_dir() else { return };
    for &(suite, min) in SUITES {
        let cases = run_all(&root.join(suite), false);
        let n = passed(&cases);
        let panics: Vec<&String> = cases
            .iter()
            .filter(|c| matches!(&c.outcome, Outcome::Fail(r) if r.starts_with("panic")))
            .map(|c| &c.name)
            .collect();
        eprintln!("ONNX {suite} tests: {n} of {} cases pass", cases.len());
        assert!(panics.is_empty(), "{suite}: panics in {panics:?}");
        assert!(
            n >= min,
            "{suite}: {n} cases pass, fewer than the {min} recorded"
        );
    }
}

/// The same cases with the fast CPU backend first in the chain: what the reference passes, the
/// chain must pass too (backends agree with the reference; unsupported ops fall back).
#[test]
fn node_tests_agree_through_the_cpu_backend() {
    let Some(root) = data_dir() else { return };
    let dir = root.join("node");
    let (reference, cpu) = (run_all(&dir, false), run_all(&dir, true));
    let lost: Vec<String> = reference
        .iter()
        .zip(&cpu)
        .filter_map(|(r, c)| match (&r.outcome, &c.outcome) {
            (Outcome::Pass, Outcome::Fail(why)) => Some(format!("{}: {why}", r.name)),
            _ => None,
        })
        .collect();
    assert!(
        lost.is_empty(),
        "pass on the reference, fail through cpu: {lost:#?}"
    );
}

#[test]
#[ignore = "writes docs/onnx-support.md"]
fn write_support_doc() {
    let Some(root) = data_dir() else { return };
    let mut s = String::new();
    s.push_str("# ONNX operator support\n\n");
    s.push_str("Generated by `cargo test -p cyb-format --test onnx_node_tests -- --ignored write_support_doc`\n");
    s.push_str("from ONNX's backend test data (Debian `libonnx-testdata`, ONNX 1.12): every case is imported,\n");
    s.push_str("run on the CPU reference and compared (dtype, shape, values at rtol 1e-3, atol 1e-7). Every failure is an explicit\n");
    s.push_str("error or a reported mismatch; CI fails if a suite's pass count drops.\n\n");
    s.push_str(
        "Main gaps: STRING tensors, sequence/optional values (also inside If/Loop), RoiAlign,\n",
    );
    s.push_str("opset-8 Scan, Gradient (training). Cases with random ops are reported, not compared (ONNX's\n");
    s.push_str("expected values are numpy draws); BFLOAT16 test data stored as UINT16 is read as BF16.\n\n");
    let mut details = String::new();
    for &(suite, _) in SUITES {
        let cases = run_all(&root.join(suite), false);
        s.push_str(&format!(
            "- `{suite}`: **{} of {} cases pass**\n",
            passed(&cases),
            cases.len()
        ));
        details.push_str(&format!("\n## {suite}\n\n"));
        let mut by_op: BTreeMap<&str, Vec<&Case>> = BTreeMap::new();
        for c in &cases {
            by_op.entry(c.op.as_str()).or_default().push(c);
        }
        details.push_str(
            "| op | passed | failed | reason for failures (first) |\n|---|---|---|---|\n",
        );
        for (op, cs) in &by_op {
            let p = cs
                .iter()
                .filter(|c| matches!(c.outcome, Outcome::Pass))
                .count();
            let first = cs.iter().find_map(|c| match &c.outcome {
                Outcome::Fail(r) => Some(format!("{}: {}", c.name, r)),
                Outcome::Pass => None,
            });
            let reason = first
                .map(|r| r.replace('|', "\\|").replace('\n', " "))
                .unwrap_or_default();
            let reason: String = reason.chars().take(160).collect();
            details.push_str(&format!("| {op} | {p} | {} | {reason} |\n", cs.len() - p));
        }
        details.push_str(&format!("\n### Failing cases ({suite})\n\n"));
        for c in &cases {
            if let Outcome::Fail(r) = &c.outcome {
                let r: String = r.replace('\n', " ").chars().take(200).collect();
                details.push_str(&format!("- `{}`: {r}\n", c.name));
            }
        }
    }
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/onnx-support.md");
    s.push_str(&kept_real_models_section(&out));
    s.push_str(&details);
    std::fs::write(&out, s).expect("write docs/onnx-support.md");
}

/// The hand-written `## Real models` section of the existing doc (tests/real_onnx_models.rs),
/// kept across regenerations, up to the next `## ` heading.
fn kept_real_models_section(doc: &Path) -> String {
    let old = std::fs::read_to_string(doc).unwrap_or_default();
    let Some(start) = old.find("\n## Real models\n") else {
        return String::new();
    };
    let rest = &old[start..];
    let end = rest[1..].find("\n## ").map_or(rest.len(), |i| i + 1);
    rest[..end].to_string()
}

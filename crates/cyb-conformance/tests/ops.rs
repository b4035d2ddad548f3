//! Every op case on every backend of this build against the reference (crates/cyb-conformance).

use cyb_conformance::{cases, run, targets, Outcome};

#[test]
fn every_case_on_every_backend_matches_the_reference() {
    let cases = cases::all();
    let (targets, missing) = targets::targets();
    targets::require_all(&missing);
    let mut failures = Vec::new();
    for case in &cases {
        let want = match run::reference(case) {
            Ok(w) => w,
            Err(e) => {
                failures.push(format!("{}: the reference fails: {e}", case.label()));
                continue;
            }
        };
        for t in &targets {
            if let Outcome::Failed(why) = run::run_case(t, case, &want) {
                failures.push(format!("{} on {}: {why}", case.label(), t.name));
            }
        }
    }
    for t in &targets {
        eprintln!("checked on {}", t.name);
    }
    assert!(
        failures.is_empty(),
        "{} of {} case runs failed:\n{}",
        failures.len(),
        cases.len() * targets.len(),
        failures.join("\n")
    );
}

#[test]
fn every_op_has_cases() {
    let cases = cases::all();
    for name in cases::EVERY_OP {
        assert!(
            cases.iter().any(|c| c.op.name() == *name),
            "op {name} has no conformance case"
        );
    }
    for c in &cases {
        assert!(
            cases::EVERY_OP.contains(&c.op.name()),
            "{} is missing from EVERY_OP",
            c.op.name()
        );
    }
}

/// A backend that claims an op must not be able to return wrong values unnoticed: a case whose
/// expected output is perturbed must fail on every target that runs it natively.
#[test]
fn a_wrong_result_fails() {
    let cases = cases::all();
    let (targets, _) = targets::targets();
    let case = cases
        .iter()
        .find(|c| c.op.name() == "rms_norm")
        .expect("rms_norm has cases");
    let mut want = run::reference(case).unwrap();
    let mut v = want[0].to_f32_vec().unwrap();
    v[3] += 1e-3 * v.iter().fold(0f32, |m, x| m.max(x.abs()));
    want[0] = cyb_tensor::Tensor::from_f32(want[0].dims(), &v).unwrap();
    for t in &targets {
        let got = run::run_case(t, case, &want);
        assert!(
            matches!(got, Outcome::Failed(_) | Outcome::FellBack),
            "{} on {}: {got:?}",
            case.label(),
            t.name
        );
    }
}

/// docs/ops.md is what the cases and backends say today.
#[test]
fn docs_ops_md_is_current() {
    let page = match cyb_conformance::report::current_page() {
        Ok(p) => p,
        Err(e) => {
            targets::require_all(&[e]);
            return;
        }
    };
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/ops.md");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == page,
        "docs/ops.md is stale: run `cargo run -p cyb-conformance --bin ops-doc > docs/ops.md`"
    );
}

/// Each backend page's options table names every environment variable the backend reads.
#[test]
fn backend_pages_list_every_environment_variable() {
    let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/backends/");
    let mut pages = vec![("cpu.md", cyb_cpu::ENV_VARS)];
    #[cfg(feature = "wgpu")]
    pages.push(("wgpu.md", cyb_wgpu::ENV_VARS));
    for (page, vars) in pages {
        let text = std::fs::read_to_string(format!("{docs}{page}")).unwrap();
        for (name, _) in vars {
            assert!(
                text.contains(name),
                "docs/backends/{page} does not list {name}"
            );
        }
    }
}

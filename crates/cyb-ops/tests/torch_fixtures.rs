//! Every op of the CPU reference against PyTorch.
//!
//! The fixtures in `tests/fixtures/ops/` are made by `tools/fixtures/make_op_fixtures.py`
//! (PyTorch in float64, transformers for RoPE scalings, gguf for block formats); the manifest
//! records the library versions.
//!
//! Error measure, per output tensor: `max_i |got_i - want_i| / max(max_i |want_i|, 1e-30)`,
//! the largest absolute error relative to the largest expected magnitude, which must be
//! ≤ the case's `tol` (1e-5 for arithmetic, 0 for exact ops such as layout, cast and indices).
//! Non-finite expected values must match exactly.

use cyb_ops::{reference, GeluApprox, Op, RopeLayout, RopeScaling, SdpaLayout};
use cyb_tensor::{DType, Error, Tensor};
use serde_json::Value;
use std::path::PathBuf;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/ops")
}

fn f(v: &Value, key: &str) -> f32 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}")) as f32
}

fn u(v: &Value, key: &str) -> usize {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {v}")) as usize
}

fn i(v: &Value, key: &str) -> isize {
    v[key]
        .as_i64()
        .unwrap_or_else(|| panic!("{key} missing in {v}")) as isize
}

fn b(v: &Value, key: &str) -> bool {
    v[key]
        .as_bool()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

fn gelu(v: &Value) -> GeluApprox {
    match v["approx"].as_str() {
        Some("erf") => GeluApprox::Erf,
        Some("tanh") => GeluApprox::Tanh,
        other => panic!("bad approx {other:?}"),
    }
}

fn scaling(v: &Value) -> RopeScaling {
    match v["kind"].as_str() {
        Some("none") => RopeScaling::None,
        Some("linear") => RopeScaling::Linear {
            factor: f(v, "factor"),
        },
        Some("llama3") => RopeScaling::Llama3 {
            factor: f(v, "factor"),
            low_freq_factor: f(v, "low_freq_factor"),
            high_freq_factor: f(v, "high_freq_factor"),
            original_max_position: u(v, "original_max_position"),
        },
        Some("yarn") => RopeScaling::Yarn {
            factor: f(v, "factor"),
            original_max_position: u(v, "original_max_position"),
            beta_fast: f(v, "beta_fast"),
            beta_slow: f(v, "beta_slow"),
            attn_factor: v["attn_factor"].as_f64().map(|x| x as f32),
        },
        other => panic!("bad scaling {other:?}"),
    }
}

/// The `Op` a manifest entry describes.
fn parse_op(v: &Value) -> Op {
    let name = v["name"].as_str().expect("op name");
    let opt_f = |key: &str| v[key].as_f64().map(|x| x as f32);
    let list = |key: &str| -> Vec<i64> {
        v[key]
            .as_array()
            .expect("list")
            .iter()
            .map(|x| x.as_i64().expect("int"))
            .collect()
    };
    match name {
        "matmul" => Op::MatMul {
            rhs_transposed: b(v, "rhs_transposed"),
        },
        "add" => Op::Add,
        "sub" => Op::Sub,
        "mul" => Op::Mul,
        "div" => Op::Div,
        "scale" => Op::Scale {
            factor: f(v, "factor"),
        },
        "rms_norm" => Op::RmsNorm {
            eps: f(v, "eps"),
            weight_offset: f(v, "weight_offset"),
        },
        "layer_norm" => Op::LayerNorm { eps: f(v, "eps") },
        "group_norm" => Op::GroupNorm {
            groups: u(v, "groups"),
            eps: f(v, "eps"),
        },
        "rope" => Op::Rope {
            layout: match v["layout"].as_str() {
                Some("normal") => RopeLayout::Normal,
                _ => RopeLayout::Neox,
            },
            rot_dims: u(v, "rot_dims"),
            base: f(v, "base"),
            scaling: scaling(&v["scaling"]),
        },
        "sdpa" => Op::Sdpa {
            layout: SdpaLayout::HeadMajor,
            scale: f(v, "scale"),
            causal: b(v, "causal"),
            sliding_window: v["sliding_window"].as_u64().map(|w| w as usize),
            softcap: opt_f("softcap"),
            alibi_max_bias: opt_f("alibi_max_bias"),
        },
        "softmax" => Op::Softmax { axis: i(v, "axis") },
        "silu" => Op::Silu,
        "relu" => Op::Relu,
        "gelu" => Op::Gelu { approx: gelu(v) },
        "swiglu" => Op::SwiGlu,
        "geglu" => Op::GeGlu { approx: gelu(v) },
        "embedding" => Op::Embedding,
        "concat" => Op::Concat { axis: i(v, "axis") },
        "split" => Op::Split {
            axis: i(v, "axis"),
            sizes: list("sizes").iter().map(|&s| s as usize).collect(),
        },
        "reshape" => Op::Reshape {
            dims: list("dims").iter().map(|&s| s as isize).collect(),
        },
        "permute" => Op::Permute {
            perm: list("perm").iter().map(|&s| s as usize).collect(),
        },
        "transpose" => Op::Transpose {
            a: i(v, "a"),
            b: i(v, "b"),
        },
        "slice" => Op::Slice {
            axis: i(v, "axis"),
            start: i(v, "start"),
            end: i(v, "end"),
            step: u(v, "step"),
        },
        "argmax" => Op::ArgMax { axis: i(v, "axis") },
        "top_k" => Op::TopK {
            k: u(v, "k"),
            axis: i(v, "axis"),
            largest: b(v, "largest"),
        },
        "cumsum" => Op::CumSum {
            axis: i(v, "axis"),
            exclusive: b(v, "exclusive"),
            reverse: b(v, "reverse"),
        },
        "cast" => Op::Cast {
            to: DType::parse(v["to"].as_str().expect("to")).expect("dtype"),
        },
        other => panic!("unknown op {other}"),
    }
}

fn tensor(v: &Value, data: &[u8]) -> Tensor {
    let dtype = DType::parse(v["dtype"].as_str().expect("dtype")).expect("known dtype");
    let dims: Vec<usize> = v["shape"]
        .as_array()
        .expect("shape")
        .iter()
        .map(|d| d.as_u64().expect("dim") as usize)
        .collect();
    let (off, len) = (u(v, "offset"), u(v, "bytes"));
    Tensor::from_bytes(&dims, dtype, &data[off..off + len]).expect("fixture tensor")
}

/// Compares one output; returns a description of the mismatch, if any. `worst` collects the
/// largest relative error seen, printed so the margin below the tolerance stays visible.
fn compare(got: &Tensor, want: &Tensor, tol: f64, worst: &mut (f64, String)) -> Option<String> {
    if got.dims() != want.dims() || got.dtype() != want.dtype() {
        return Some(format!(
            "got {} {:?}, want {} {:?}",
            got.dtype(),
            got.dims(),
            want.dtype(),
            want.dims()
        ));
    }
    if want.dtype().is_integer() {
        let (g, w) = (got.to_i64_vec().ok()?, want.to_i64_vec().ok()?);
        return (g != w).then(|| format!("indices differ: got {g:?}, want {w:?}"));
    }
    // f64 holds every float dtype exactly, so F64 outputs are compared at their own precision.
    let (g, w) = (got.to_f64_vec().ok()?, want.to_f64_vec().ok()?);
    let mut max_err = 0f64;
    let mut max_ref = 0f64;
    for (a, b) in g.iter().zip(&w) {
        if !b.is_finite() {
            if a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan()) {
                return Some(format!("non-finite mismatch: got {a}, want {b}"));
            }
            continue;
        }
        max_err = max_err.max((a - b).abs());
        max_ref = max_ref.max(b.abs());
    }
    let rel = max_err / max_ref.max(1e-30);
    if rel > worst.0 {
        *worst = (rel, String::new());
    }
    (rel > tol || rel.is_nan()).then(|| format!("relative error {rel:.3e} > {tol:e}"))
}

#[test]
fn reference_matches_pytorch() {
    let dir = fixture_dir();
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(dir.join("manifest.json")).expect("read manifest.json"),
    )
    .expect("parse manifest.json");
    let data = std::fs::read(dir.join("data.bin")).expect("read data.bin");
    let cases = manifest["cases"].as_array().expect("cases");
    assert!(cases.len() >= 90, "only {} fixture cases", cases.len());

    let (mut failures, mut skipped, mut passed) = (Vec::new(), Vec::new(), 0);
    let mut worst = (0f64, String::new());
    for c in cases {
        let name = c["name"].as_str().expect("case name");
        let op = parse_op(&c["op"]);
        let inputs: Vec<Tensor> = c["inputs"]
            .as_array()
            .expect("inputs")
            .iter()
            .map(|t| tensor(t, &data))
            .collect();
        let wants: Vec<Tensor> = c["outputs"]
            .as_array()
            .expect("outputs")
            .iter()
            .map(|t| tensor(t, &data))
            .collect();
        let tol = c["tol"].as_f64().expect("tol");
        match reference::execute(&op, &inputs) {
            Ok(gots) if gots.len() == wants.len() => {
                let errs: Vec<String> = gots
                    .iter()
                    .zip(&wants)
                    .filter_map(|(g, w)| compare(g, w, tol, &mut worst))
                    .collect();
                if worst.1.is_empty() {
                    worst.1 = name.to_string();
                }
                if errs.is_empty() {
                    passed += 1;
                } else {
                    failures.push(format!("{name}: {}", errs.join("; ")));
                }
            }
            Ok(gots) => failures.push(format!("{name}: {} outputs", gots.len())),
            // Block formats whose dequantizer has not landed in cyb-tensor yet.
            Err(Error::UnsupportedOp {
                op, input_dtype, ..
            }) if op == "dequantize" => {
                skipped.push(format!("{name} ({input_dtype} dequantize missing)"))
            }
            Err(e) => failures.push(format!("{name}: error {e}")),
        }
    }
    eprintln!(
        "{passed} passed, {} skipped: {skipped:?}; worst relative error {:.2e} ({})",
        skipped.len(),
        worst.0,
        worst.1
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

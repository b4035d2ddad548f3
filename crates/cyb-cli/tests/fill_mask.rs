//! `cyb-llm fill-mask` and `classify` with a one-logit reranker, end to end on the tiny fixtures
//! of tests/fixtures/task_heads (tools/fixtures/make_task_heads_fixture.py, whose
//! reference.json files hold transformers' fill-mask and text-classification pipeline results).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/task_heads")
        .join(name)
}

fn reference(name: &str) -> Value {
    let text = std::fs::read_to_string(dir(name).join("reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn cyb(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn fill_mask_json_equals_the_pipeline() {
    let r = reference("bert_mlm");
    let case = r["fill_mask"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["top_k"] == 3 && c["masks"].as_array().unwrap().len() == 2)
        .unwrap();
    let m = dir("bert_mlm").to_string_lossy().into_owned();
    let text = case["text"].as_str().unwrap();
    let (ok, out, err) = cyb(&["fill-mask", &m, text, "--top-k", "3", "--json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["text"], text);
    let (got, want) = (
        v[0]["masks"].as_array().unwrap(),
        case["masks"].as_array().unwrap(),
    );
    assert_eq!(got.len(), want.len());
    for (g_row, w_row) in got.iter().zip(want) {
        for (g, w) in g_row
            .as_array()
            .unwrap()
            .iter()
            .zip(w_row.as_array().unwrap())
        {
            assert_eq!(g["token"], w["token"]);
            assert_eq!(g["sequence"], w["sequence"]);
            let (gs, ws) = (g["score"].as_f64().unwrap(), w["score"].as_f64().unwrap());
            assert!((gs - ws).abs() <= 1e-5, "{gs} vs {ws}");
        }
    }
    // Plain output names the best candidate's filled-in text.
    let (ok, out, err) = cyb(&["fill-mask", &m, text]);
    assert!(ok, "{err}");
    assert!(
        out.contains(want[0][0]["sequence"].as_str().unwrap()),
        "{out}"
    );
}

#[test]
fn fill_mask_errors_are_clear() {
    let m = dir("bert_mlm").to_string_lossy().into_owned();
    let (ok, _, err) = cyb(&["fill-mask", &m, "no mask here"]);
    assert!(!ok && err.contains("[MASK]"), "{err}");
    let c = dir("reranker").to_string_lossy().into_owned();
    let (ok, _, err) = cyb(&["fill-mask", &c, "the [MASK]"]);
    assert!(!ok && err.contains("masked-LM"), "{err}");
}

#[test]
fn classify_a_reranker_pair_gives_its_sigmoid() {
    let r = reference("reranker");
    let p = &r["pairs"][0];
    let m = dir("reranker").to_string_lossy().into_owned();
    let (ok, out, err) = cyb(&[
        "classify",
        &m,
        p["text"].as_str().unwrap(),
        "--pair",
        p["text_pair"].as_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let got = v[0]["scores"][0]["score"].as_f64().unwrap();
    let want = p["labels"][0]["score"].as_f64().unwrap();
    assert!((got - want).abs() <= 1e-5, "{got} vs {want}");
    // --function none: the logit itself, the sigmoid undone.
    let text = p["text"].as_str().unwrap();
    let (ok, out, err) = cyb(&[
        "classify",
        &m,
        text,
        "--pair",
        p["text_pair"].as_str().unwrap(),
        "--function",
        "none",
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let got = v[0]["scores"][0]["score"].as_f64().unwrap();
    let logit = (want / (1.0 - want)).ln();
    assert!((got - logit).abs() <= 1e-4, "{got} vs {logit}");
    let (ok, _, err) = cyb(&["classify", &m, text, "--function", "tanh"]);
    assert!(!ok && err.contains("softmax, sigmoid or none"), "{err}");
}

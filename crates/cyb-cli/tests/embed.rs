//! `cyb-llm embed` and `classify` end to end on the tiny random-weight BERT
//! (tests/fixtures/bert/bert, made by tools/fixtures/make_bert_fixtures.py, whose
//! reference.json holds transformers' pooled vectors and logits for three texts).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn model() -> String {
    bert_dir().to_string_lossy().into_owned()
}

fn bert_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bert/bert")
}

fn reference() -> Value {
    let text = std::fs::read_to_string(bert_dir().join("reference.json")).unwrap();
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

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn close(a: &[f32], b: &[f32]) -> bool {
    let scale = b.iter().map(|x| x.abs()).fold(0f32, f32::max);
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-5 * scale)
}

#[test]
fn embed_prints_one_vector_per_text_in_order() {
    let r = reference();
    let cases = r["texts"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    // The first text from --file, the others as arguments: file lines come first.
    let file = std::env::temp_dir().join(format!("cyb-embed-{}.txt", std::process::id()));
    std::fs::write(&file, format!("{}\n\n", texts[0])).unwrap();
    let m = model();
    let f = file.to_string_lossy().into_owned();
    let mut args = vec!["embed", m.as_str(), "--file", f.as_str(), "--normalize"];
    args.extend(&texts[1..]);
    let (ok, out, err) = cyb(&args);
    std::fs::remove_file(&file).ok();
    assert!(ok, "{err}");
    let got: Vec<Vec<f32>> = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(got.len(), 3);
    for (g, c) in got.iter().zip(cases) {
        assert!(close(g, &floats(&c["mean_normalized"])), "{}", c["text"]);
    }
    let (ok, out, err) = cyb(&["embed", &m, "--pooling", "mean", texts[1]]);
    assert!(ok, "{err}");
    let got: Vec<Vec<f32>> = serde_json::from_str(out.trim()).unwrap();
    assert!(close(&got[0], &floats(&cases[1]["mean"])));
}

#[test]
fn embed_errors_are_messages_not_panics() {
    let m = model();
    for (args, want) in [
        (vec!["embed", m.as_str()], "no text"),
        (vec!["embed", m.as_str(), ""], "empty"),
        (
            vec!["embed", m.as_str(), "--pooling", "sum", "a"],
            "pooling",
        ),
    ] {
        let (ok, _, err) = cyb(&args);
        assert!(!ok);
        assert!(err.contains(want) && !err.contains("panicked"), "{err}");
    }
    let long = "cat ".repeat(60);
    let (ok, _, err) = cyb(&["embed", &m, &long]);
    assert!(!ok && err.contains("at most"), "{err}");
    let (ok, out, err) = cyb(&["embed", &m, "--truncate", &long]);
    assert!(ok, "{err}");
    assert_eq!(
        serde_json::from_str::<Vec<Vec<f32>>>(out.trim())
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn classify_prints_labels_with_probabilities() {
    let r = reference();
    let case = &r["texts"][1];
    let (ok, out, err) = cyb(&["classify", &model(), case["text"].as_str().unwrap()]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let logits = floats(&case["logits"]);
    let labels = ["negative", "neutral", "positive"];
    let best = (0..3)
        .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
        .unwrap();
    assert_eq!(v[0]["label"], labels[best]);
    let total: f64 = v[0]["scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["score"].as_f64().unwrap())
        .sum();
    assert!((total - 1.0).abs() < 1e-5);
}

#[test]
fn classify_labels_tokens_with_a_token_head() {
    let dir = bert_dir().join("../bert_tokens");
    let (ok, out, err) = cyb(&["classify", &dir.to_string_lossy(), "the cat sat on the mat"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let tokens: Vec<&str> = v[0]["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["token"].as_str().unwrap())
        .collect();
    assert_eq!(
        tokens,
        ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]
    );
}

/// `--pair` and `--labels` against transformers on the tiny NLI fixture
/// (tests/fixtures/nli, made by tools/fixtures/make_nli_fixture.py): the pair's label
/// probabilities are the softmax of transformers' logits, and zero-shot gives the pipeline's
/// labels in its order with its scores.
#[test]
fn classify_pairs_and_zero_shot_labels() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/nli/bert_nli");
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let model = dir.to_string_lossy().into_owned();
    let pair = &r["pairs"][0];
    let (ok, out, err) = cyb(&[
        "classify",
        &model,
        pair["text"].as_str().unwrap(),
        "--pair",
        pair["text_pair"].as_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let logits = floats(&pair["logits"]);
    let max = logits.iter().fold(f32::MIN, |m, &x| m.max(x));
    let total: f32 = logits.iter().map(|x| (x - max).exp()).sum();
    let want: Vec<f32> = logits.iter().map(|x| (x - max).exp() / total).collect();
    let mut got: Vec<f32> = v[0]["scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["score"].as_f64().unwrap() as f32)
        .collect();
    let mut want_sorted = want.clone();
    got.sort_by(|a, b| b.total_cmp(a));
    want_sorted.sort_by(|a, b| b.total_cmp(a));
    for (g, w) in got.iter().zip(&want_sorted) {
        assert!((g - w).abs() <= 1e-5, "{got:?} vs {want_sorted:?}");
    }

    let z = &r["zero_shot"][0];
    let labels: Vec<&str> = z["candidate_labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    let (ok, out, err) = cyb(&[
        "classify",
        &model,
        z["text"].as_str().unwrap(),
        "--labels",
        &labels.join(","),
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let scores = v[0]["scores"].as_array().unwrap();
    for (i, want_label) in z["labels"].as_array().unwrap().iter().enumerate() {
        assert_eq!(scores[i]["label"], *want_label, "{out}");
        let (g, w) = (
            scores[i]["score"].as_f64().unwrap(),
            z["scores"][i].as_f64().unwrap(),
        );
        assert!((g - w).abs() <= 1e-5, "{out}");
    }
    // A non-NLI model cannot do zero-shot: a clear error, not a crash.
    let (ok, _, err) = cyb(&[
        "classify",
        &model_dir_without_nli(),
        "hi",
        "--labels",
        "a,b",
    ]);
    assert!(!ok);
    assert!(err.contains("error"), "{err}");
}

fn model_dir_without_nli() -> String {
    model()
}

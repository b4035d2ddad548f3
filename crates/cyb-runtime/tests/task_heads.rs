//! Fill-mask and single-score classification on tiny fixtures (tests/fixtures/task_heads, made
//! by tools/fixtures/make_task_heads_fixture.py) against transformers' pipelines:
//! - `fill_mask` on BERT, DeBERTa-v3 and RoBERTa (byte-level BPE, `<mask>` eating the space
//!   before it) masked LMs equals FillMaskPipeline (token ids, token text and filled-in
//!   sequence exactly, scores within 1e-5), with one and with two masks;
//! - `classify` / `classify_pair` on a one-logit reranker (sigmoid), a multi-label classifier
//!   (sigmoid per label) and a regression head (raw value) equal TextClassificationPipeline.

use cyb_runtime::{ClassifyOptions, Model, Runtime, RuntimeOptions, ScoreFunction};
use serde_json::Value;
use std::path::PathBuf;

fn setup(name: &str) -> (Model, Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/task_heads")
        .join(name);
    let text = std::fs::read_to_string(dir.join("reference.json")).unwrap();
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    (rt.load(&dir).unwrap(), serde_json::from_str(&text).unwrap())
}

fn close(got: f32, want: f64, what: &str) {
    assert!(
        (f64::from(got) - want).abs() <= 1e-5,
        "{what}: got {got}, transformers {want}"
    );
}

#[test]
fn fill_mask_matches_transformers() {
    for (name, mask) in [
        ("bert_mlm", "[MASK]"),
        ("deberta_mlm", "[MASK]"),
        ("roberta_mlm", "<mask>"),
    ] {
        let (m, r) = setup(name);
        assert_eq!(m.mask_token(), Some(mask), "{name}");
        let cases = r["fill_mask"].as_array().unwrap();
        assert!(cases
            .iter()
            .any(|c| c["masks"].as_array().unwrap().len() > 1));
        for c in cases {
            let text = c["text"].as_str().unwrap();
            let top_k = c["top_k"].as_u64().unwrap() as usize;
            let got = m.fill_mask(text, top_k).unwrap();
            let want = c["masks"].as_array().unwrap();
            assert_eq!(got.len(), want.len(), "{name} {text:?}: masks");
            for (g_row, w_row) in got.iter().zip(want) {
                let w_row = w_row.as_array().unwrap();
                assert_eq!(g_row.len(), w_row.len(), "{name} {text:?}: top_k");
                for (g, w) in g_row.iter().zip(w_row) {
                    let what = format!("{name} {text:?} token {}", g.token_id);
                    assert_eq!(
                        u64::from(g.token_id),
                        w["token"].as_u64().unwrap(),
                        "{what}"
                    );
                    assert_eq!(g.token_str, w["token_str"].as_str().unwrap(), "{what}");
                    assert_eq!(g.sequence, w["sequence"].as_str().unwrap(), "{what}");
                    close(g.score, w["score"].as_f64().unwrap(), &what);
                }
            }
        }
    }
}

#[test]
fn fill_mask_refuses_bad_input() {
    let (m, _) = setup("bert_mlm");
    let e = m.fill_mask("the cat sat", 5).unwrap_err().to_string();
    assert!(e.contains("no mask token") && e.contains("[MASK]"), "{e}");
    assert!(m.fill_mask("", 5).is_err());
    assert!(m.fill_mask("the [MASK]", 0).is_err());
    // More candidates than the vocabulary has: all of them.
    let all = m.fill_mask("the [MASK]", 1000).unwrap();
    assert_eq!(all[0].len(), m.config().vocab_size);
    let sum: f32 = all[0].iter().map(|c| c.score).sum();
    assert!((sum - 1.0).abs() < 1e-4, "{sum}");
    // A classifier has no masked-LM head.
    let (c, _) = setup("reranker");
    let e = c.fill_mask("the [MASK]", 5).unwrap_err().to_string();
    assert!(e.contains("no masked-LM head"), "{e}");
}

fn check_labels(got: &[cyb_runtime::LabelScore], want: &Value, what: &str) {
    let want = want.as_array().unwrap();
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.label, w["label"].as_str().unwrap(), "{what}");
        close(g.score, w["score"].as_f64().unwrap(), what);
    }
}

#[test]
fn single_score_classifiers_match_transformers() {
    for (name, function) in [
        ("reranker", ScoreFunction::Sigmoid),
        ("multi_label", ScoreFunction::Sigmoid),
        ("regression", ScoreFunction::Identity),
    ] {
        let (m, r) = setup(name);
        assert_eq!(m.score_function(), Some(function), "{name}");
        for t in r["texts"].as_array().unwrap() {
            let text = t["text"].as_str().unwrap();
            let got = m.classify(text).unwrap();
            check_labels(&got, &t["labels"], &format!("{name} {text:?}"));
        }
        for p in r["pairs"].as_array().unwrap() {
            let (a, b) = (
                p["text"].as_str().unwrap(),
                p["text_pair"].as_str().unwrap(),
            );
            let got = m.classify_pair(a, b, false).unwrap();
            check_labels(&got, &p["labels"], &format!("{name} {a:?} / {b:?}"));
        }
    }
}

/// transformers' `function_to_apply`: the regression head's raw value through a sigmoid, and
/// the reranker's sigmoid undone, when asked for.
#[test]
fn score_function_can_be_chosen() {
    let (m, r) = setup("regression");
    let raw = r["texts"][0]["labels"][0]["score"].as_f64().unwrap();
    let text = r["texts"][0]["text"].as_str().unwrap();
    let opts = ClassifyOptions {
        truncate: false,
        function: Some(ScoreFunction::Sigmoid),
    };
    let got = m.classify_with(&[text], &opts).unwrap();
    close(
        got[0][0].score,
        1.0 / (1.0 + (-raw).exp()),
        "regression as sigmoid",
    );
    let (m, r) = setup("reranker");
    let p = &r["pairs"][0];
    let prob = p["labels"][0]["score"].as_f64().unwrap();
    let pair = (
        p["text"].as_str().unwrap(),
        p["text_pair"].as_str().unwrap(),
    );
    let opts = ClassifyOptions {
        truncate: false,
        function: Some(ScoreFunction::Identity),
    };
    let got = m.classify_pair_with(&[pair], &opts).unwrap();
    close(
        got[0][0].score,
        (prob / (1.0 - prob)).ln(),
        "reranker logit",
    );
    assert_eq!(
        ScoreFunction::parse("none").unwrap(),
        ScoreFunction::Identity
    );
    assert!(ScoreFunction::parse("tanh").is_err());
}

//! Text pairs and zero-shot classification on tiny BERT and DeBERTa-v3 NLI classifiers
//! (tests/fixtures/nli/{bert_nli,deberta_nli}, made by tools/fixtures/make_nli_fixture.py): pair token ids
//! and token types equal transformers' tokenizer's, pair probabilities are the softmax of
//! transformers' logits, and zero-shot results equal transformers' zero-shot pipeline
//! (single- and multi-label), within 1e-5.

use cyb_runtime::{Model, Runtime, RuntimeOptions, ZeroShotOptions};
use serde_json::Value;
use std::path::PathBuf;

const FIXTURES: [&str; 2] = ["bert_nli", "deberta_nli"];

fn setup(name: &str) -> (Model, Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/nli")
        .join(name);
    let text = std::fs::read_to_string(dir.join("reference.json")).unwrap();
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    (rt.load(&dir).unwrap(), serde_json::from_str(&text).unwrap())
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn pairs_match_transformers() {
    for name in FIXTURES {
        pairs(name);
    }
}

fn pairs(name: &str) {
    let (m, r) = setup(name);
    let labels = ["contradiction", "neutral", "entailment"];
    for p in r["pairs"].as_array().unwrap() {
        let (a, b) = (
            p["text"].as_str().unwrap(),
            p["text_pair"].as_str().unwrap(),
        );
        let enc = m.tokenizer().encode_pair(a, b).unwrap();
        assert_eq!(enc.ids, u32s(&p["ids"]), "{name} {a} / {b}: ids");
        assert_eq!(enc.type_ids, u32s(&p["token_type_ids"]), "{a} / {b}: types");
        let logits: Vec<f32> = p["logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        let max = logits.iter().copied().fold(f32::MIN, f32::max);
        let sum: f32 = logits.iter().map(|l| (l - max).exp()).sum();
        let got = m.classify_pair(a, b, false).unwrap();
        assert!(got.windows(2).all(|w| w[0].score >= w[1].score));
        for s in &got {
            let k = labels.iter().position(|l| *l == s.label).unwrap();
            let want = (logits[k] - max).exp() / sum;
            assert!(
                (s.score - want).abs() <= 1e-5,
                "{a} / {b} {}: {} vs {want}",
                s.label,
                s.score
            );
        }
    }
}

#[test]
fn zero_shot_matches_the_transformers_pipeline() {
    for name in FIXTURES {
        zero_shot(name);
    }
}

fn zero_shot(name: &str) {
    let (m, r) = setup(name);
    for z in r["zero_shot"].as_array().unwrap() {
        let text = z["text"].as_str().unwrap();
        let cands: Vec<&str> = z["candidate_labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        let opts = ZeroShotOptions {
            multi_label: z["multi_label"].as_bool().unwrap(),
            ..ZeroShotOptions::default()
        };
        let got = m.zero_shot(text, &cands, &opts).unwrap();
        let labels = z["labels"].as_array().unwrap();
        let scores = z["scores"].as_array().unwrap();
        assert_eq!(got.len(), labels.len());
        for (g, (l, s)) in got.iter().zip(labels.iter().zip(scores)) {
            assert_eq!(g.label, l.as_str().unwrap(), "{name} {text} ({opts:?})");
            let want = s.as_f64().unwrap() as f32;
            assert!(
                (g.score - want).abs() <= 1e-5,
                "{text} {}: {} vs {want}",
                g.label,
                g.score
            );
        }
    }
    assert!(m.classify_zero_shot("the cat", &[]).is_err());
    let bad = ZeroShotOptions {
        hypothesis_template: "no placeholder".into(),
        multi_label: false,
    };
    assert!(m.zero_shot("the cat", &["cat"], &bad).is_err());
    // Overlong pairs: refused without truncation, the first text cut with it.
    let long = "the cat sat on the mat ".repeat(10);
    assert!(m.classify_pair(&long, "a cat", false).is_err());
    assert_eq!(m.classify_pair(&long, "a cat", true).unwrap().len(), 3);
}

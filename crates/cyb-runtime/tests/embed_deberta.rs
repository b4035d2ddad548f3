//! `Model::embed` / `classify` on the tiny random-weight DeBERTa-v3 with a SentencePiece-style
//! Unigram tokenizer (tests/fixtures/encoders/deberta_v3, made by
//! tools/fixtures/make_deberta_jina_fixtures.py): text in, token ids, mean-pooled vectors and
//! label probabilities equal to transformers' (tokenized by transformers' own tokenizer). And
//! the tiny Jina-v2 (tests/fixtures/encoders/jina_v2, WordPiece tokenizer): text in, mean
//! vectors equal to the fixture script's PyTorch reference.

mod common;
use common::{floats, rel_err};
use cyb_runtime::{Runtime, RuntimeOptions};
use serde_json::Value;
use std::path::PathBuf;

#[test]
fn deberta_v3_text_matches_transformers() {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/encoders/deberta_v3");
    let text = std::fs::read_to_string(dir.join("reference.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    let m = rt.load(&dir).unwrap();
    assert!(m.is_encoder());
    let cases = r["texts"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let got = m.embed(&texts).unwrap();
    for (i, c) in cases.iter().enumerate() {
        let ids: Vec<u32> = c["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(
            m.tokenizer().encode(texts[i], true).unwrap(),
            ids,
            "text {i} ids"
        );
        let e = rel_err(&got[i], &floats(&c["mean"]));
        assert!(e <= 1e-5, "text {i} mean: relative error {e:e}");
        let logits = floats(&c["logits"]);
        let max = logits.iter().copied().fold(f32::MIN, f32::max);
        let sum: f32 = logits.iter().map(|l| (l - max).exp()).sum();
        let labels = ["negative", "neutral", "positive"];
        for s in m.classify(texts[i]).unwrap() {
            let k = labels.iter().position(|l| *l == s.label).unwrap();
            let want = (logits[k] - max).exp() / sum;
            assert!(
                (s.score - want).abs() <= 1e-5,
                "{}: {} vs {want}",
                s.label,
                s.score
            );
        }
    }
}

#[test]
fn jina_v2_text_matches_reference() {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/encoders/jina_v2");
    let text = std::fs::read_to_string(dir.join("reference.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    let m = rt.load(&dir).unwrap();
    assert!(m.is_encoder());
    let cases = r["texts"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let got = m.embed(&texts).unwrap();
    for (i, c) in cases.iter().enumerate() {
        let e = rel_err(&got[i], &floats(&c["mean"]));
        assert!(e <= 1e-5, "text {i} mean: relative error {e:e}");
    }
    let e = m.classify("hello").unwrap_err().to_string();
    assert!(e.contains("Jina-v2"), "{e}");
}

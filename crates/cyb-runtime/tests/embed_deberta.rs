//! `Model::embed` / `classify` on the tiny random-weight DeBERTa-v3 with a SentencePiece-style
//! Unigram tokenizer (tests/fixtures/encoders/deberta_v3, made by
//! tools/fixtures/make_deberta_jina_fixtures.py): text in, token ids, mean-pooled vectors and
//! label probabilities equal to transformers' (tokenized by transformers' own tokenizer). And
//! the tiny Jina-v2 (tests/fixtures/encoders/jina_v2, WordPiece tokenizer): text in, mean
//! vectors equal to the fixture script's PyTorch reference; and its reranker head on pairs.

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
    assert!(e.contains("no sequence classification head"), "{e}");
}

/// A Jina-v2 reranker (JinaBertForSequenceClassification, one logit; the fixture script's
/// reference): query/document pairs in, sigmoid scores of the reference logits out.
#[test]
fn jina_v2_reranker_scores_pairs() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/encoders/jina_v2_rerank");
    let text = std::fs::read_to_string(dir.join("reference.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    let m = rt.load(&dir).unwrap();
    for (i, c) in r["pairs"].as_array().unwrap().iter().enumerate() {
        let (q, d) = (
            c["query"].as_str().unwrap(),
            c["document"].as_str().unwrap(),
        );
        let scores = m.classify_pair(q, d, false).unwrap();
        let want = 1.0 / (1.0 + (-floats(&c["logits"])[0]).exp());
        assert_eq!(scores.len(), 1);
        assert!(
            (scores[0].score - want).abs() <= 1e-6,
            "pair {i}: {} vs {want}",
            scores[0].score
        );
    }
}

//! `Model::embed` / `classify` on the tiny random-weight BERT with a WordPiece tokenizer
//! (tests/fixtures/bert/bert, made by tools/fixtures/make_bert_fixtures.py): text in, vectors
//! and label probabilities equal to transformers' (tokenized by transformers' own tokenizer),
//! through the default backend chain.

mod common;
use common::{floats, rel_err};
use cyb_runtime::{EmbedInput, EmbedOptions, Model, Pooling, Runtime, RuntimeOptions};
use serde_json::Value;
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

fn load(rel: &str) -> Model {
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    rt.load(fixture(rel)).unwrap()
}

fn reference() -> Value {
    let text = std::fs::read_to_string(fixture("bert/bert/reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn embed_matches_transformers_in_input_order() {
    let m = load("bert/bert");
    assert!(m.is_encoder());
    let r = reference();
    let cases = r["texts"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    // No sentence-transformers files: mean pooling, not normalized.
    assert_eq!(
        m.embedding_defaults().map(|d| (d.0, d.1)),
        Some((Pooling::Mean, false))
    );
    let got = m.embed(&texts).unwrap();
    assert_eq!(got.len(), texts.len());
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
            "{}",
            texts[i]
        );
        let e = rel_err(&got[i], &floats(&c["mean"]));
        assert!(e <= 1e-5, "text {i}: relative error {e:e}");
    }
    let opts = EmbedOptions {
        normalize: Some(true),
        ..EmbedOptions::default()
    };
    let inputs: Vec<EmbedInput> = texts
        .iter()
        .map(|t| EmbedInput::Text(t.to_string()))
        .collect();
    let normed = m.embed_with(&inputs, &opts).unwrap();
    let total: usize = cases
        .iter()
        .map(|c| c["ids"].as_array().unwrap().len())
        .sum();
    assert_eq!(normed.tokens, total);
    for (i, c) in cases.iter().enumerate() {
        let e = rel_err(&normed.vectors[i], &floats(&c["mean_normalized"]));
        assert!(e <= 1e-5, "text {i} normalized: relative error {e:e}");
    }
    // One at a time gives the same vectors as the padded batch.
    for (i, t) in texts.iter().enumerate() {
        let alone = m.embed(&[t]).unwrap();
        assert!(rel_err(&alone[0], &got[i]) <= 1e-6);
    }
}

#[test]
fn classify_gives_softmax_of_transformers_logits() {
    let m = load("bert/bert");
    let r = reference();
    for c in r["texts"].as_array().unwrap() {
        let logits = floats(&c["logits"]);
        let max = logits.iter().copied().fold(f32::MIN, f32::max);
        let sum: f32 = logits.iter().map(|l| (l - max).exp()).sum();
        let labels = ["negative", "neutral", "positive"];
        let scores = m.classify(c["text"].as_str().unwrap()).unwrap();
        assert_eq!(scores.len(), 3);
        assert!(scores.windows(2).all(|w| w[0].score >= w[1].score));
        for s in &scores {
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
fn empty_and_overlong_inputs_are_clear_errors() {
    let m = load("bert/bert");
    let e = m.embed(&[]).unwrap_err().to_string();
    assert!(e.contains("no input"), "{e}");
    let e = m.embed(&["fine", "  "]).unwrap_err().to_string();
    assert!(e.contains("input 1 is empty"), "{e}");
    let (_, _, max) = m.embedding_defaults().unwrap();
    let long = "cat ".repeat(max);
    let e = m.embed(&[&long]).unwrap_err().to_string();
    assert!(e.contains("at most") && e.contains("truncat"), "{e}");
    let opts = EmbedOptions {
        truncate: true,
        ..EmbedOptions::default()
    };
    let cut = m
        .embed_with(&[EmbedInput::Text(long.clone())], &opts)
        .unwrap();
    assert_eq!(cut.tokens, max);
    // Truncation keeps [CLS] ... [SEP]: the same as embedding the cut ids directly.
    let mut ids = m.tokenizer().encode(&long, true).unwrap();
    let sep = ids.pop().unwrap();
    ids.truncate(max - 1);
    ids.push(sep);
    let direct = m
        .embed_with(&[EmbedInput::Tokens(ids)], &EmbedOptions::default())
        .unwrap();
    assert_eq!(direct.vectors, cut.vectors);
    let e = m
        .embed_with(&[EmbedInput::Tokens(vec![100_000])], &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("vocabulary"), "{e}");
}

#[test]
fn encoders_do_not_generate_and_generators_do_not_embed() {
    let enc = load("bert/bert");
    let e = enc.generator(None).err().unwrap().to_string();
    assert!(e.contains("encoder"), "{e}");
    let dec = load("tiny_chat/hf");
    assert!(!dec.is_encoder());
    let e = dec.embed(&["hello"]).unwrap_err().to_string();
    assert!(e.contains("not an encoder"), "{e}");
    assert!(dec.classify("hello").is_err());
}

#[test]
fn modernbert_embeds_like_transformers() {
    let m = load("bert/modernbert");
    assert!(m.is_encoder());
    let text = std::fs::read_to_string(fixture("bert/modernbert/reference.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    let cases = r["texts"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let got = m.embed(&texts).unwrap();
    for (i, c) in cases.iter().enumerate() {
        let e = rel_err(&got[i], &floats(&c["mean"]));
        assert!(e <= 1e-5, "text {i}: relative error {e:e}");
    }
    assert!(m.classify("hello").is_err());
}

#[test]
fn token_classification_labels_each_token() {
    let m = load("bert/bert_tokens");
    assert!(m.has_token_classifier());
    let text = std::fs::read_to_string(fixture("bert/bert_tokens/reference.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    let case = &r["text"];
    let labels: Vec<&str> = r["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    let got = m
        .classify_tokens(case["text"].as_str().unwrap(), false)
        .unwrap();
    let tokens: Vec<&str> = case["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(got.len(), tokens.len());
    let logits = floats(&case["logits"]);
    for ((g, tok), row) in got.iter().zip(&tokens).zip(logits.chunks(labels.len())) {
        assert_eq!(g.token, *tok);
        let best = (0..row.len())
            .max_by(|&a, &b| row[a].total_cmp(&row[b]))
            .unwrap();
        assert_eq!(g.label, labels[best]);
        let max = row[best];
        let sum: f32 = row.iter().map(|l| (l - max).exp()).sum();
        assert!((g.score - 1.0 / sum).abs() <= 1e-5);
    }
    // A token head is not a sequence head.
    assert!(m.classify("the cat").is_err());
}

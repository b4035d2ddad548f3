//! `Model::embed` on a BERT GGUF (tests/fixtures/bert_gguf, converted from
//! tests/fixtures/bert/bert by tools/fixtures/make_bert_gguf_fixture.py): the WordPiece
//! tokenizer rebuilt from `tokenizer.ggml.*` gives transformers' token ids, and the vectors
//! equal transformers' mean-pooled states (bert.pooling_type = mean); the same for the tiny
//! Jina-v2 as a jina-bert-v2 GGUF against its PyTorch reference.

mod common;
use common::{floats, rel_err};
use cyb_runtime::{Runtime, RuntimeOptions};
use serde_json::Value;
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

#[test]
fn gguf_bert_embeds_like_transformers() {
    let text = std::fs::read_to_string(fixture("bert/bert/reference.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    let m = rt.load(fixture("bert_gguf/model.gguf")).unwrap();
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
        assert!(e <= 1e-5, "text {i}: relative error {e}");
    }
    // [CLS] text [SEP], as BertTokenizer adds them.
    let cls = ids_of(&m, "[CLS]");
    let sep = ids_of(&m, "[SEP]");
    let one = m.tokenizer().encode("the cat", true).unwrap();
    assert_eq!(one.first(), Some(&cls));
    assert_eq!(one.last(), Some(&sep));
}

fn ids_of(m: &cyb_runtime::Model, token: &str) -> u32 {
    (0..96u32)
        .find(|&i| m.tokenizer().token_text(i).as_deref() == Some(token))
        .unwrap()
}

#[test]
fn gguf_jina_v2_embeds_like_the_reference() {
    let text = std::fs::read_to_string(fixture("encoders/jina_v2/reference.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    let m = rt.load(fixture("bert_gguf/jina_v2.gguf")).unwrap();
    let cases = r["texts"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let got = m.embed(&texts).unwrap();
    for (i, c) in cases.iter().enumerate() {
        let e = rel_err(&got[i], &floats(&c["mean"]));
        assert!(e <= 1e-5, "text {i}: relative error {e}");
    }
}

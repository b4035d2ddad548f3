//! Classifier heads from GGUF files (llama.cpp's `cls` / `cls.output` tensors, labels in
//! `bert.classifier.output_labels`), written by tools/fixtures/make_bert_gguf_fixture.py from
//! the tiny BertForSequenceClassification and RobertaForSequenceClassification fixtures of
//! tests/fixtures/bert. Logits of a batch of three sequences of different lengths (padded and
//! packed) and of each alone against transformers, F32 relative error ≤ 1e-5.

mod common;
use common::*;

use cyb_backend::Dispatcher;
use cyb_models::{BatchLayout, BertHead, BertModel};
use std::sync::Arc;

const LABELS: [&str; 3] = ["negative", "neutral", "positive"];

/// Loads `gguf`, checks its head and labels, and compares its logits with `reference`'s
/// (`key` of each sequence).
fn classifier(gguf: &str, reference_json: &str, key: &str, labels: [&str; 3]) -> BertModel {
    let r = reference(reference_json);
    let seqs = sequence_ids(&r);
    let file = cyb_format::open(fixture(gguf)).unwrap();
    for layout in [BatchLayout::Padded, BatchLayout::Packed] {
        let mut m = BertModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
        m.set_layout(layout);
        assert_eq!(m.config().head, BertHead::SequenceClassification);
        assert_eq!(m.config().labels, labels);
        let logits = m.sequence_logits(&seqs).unwrap();
        assert_eq!(logits.len(), seqs.len());
        for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
            let want = floats(&s[key]);
            check(&format!("{gguf} seq {i} ({layout:?})"), &logits[i], &want);
            let alone = m.sequence_logits(std::slice::from_ref(&seqs[i])).unwrap();
            check(&format!("{gguf} seq {i} alone"), &alone[0], &want);
        }
        assert!(m.token_logits(&seqs).is_err(), "no token head here");
    }
    BertModel::load(&file, Arc::new(Dispatcher::reference())).unwrap()
}

/// BERT's pooler as `cls`, its classifier as `cls.output`: transformers' whole head.
#[test]
fn gguf_bert_classifier_matches_transformers() {
    classifier(
        "bert_gguf/bert_cls.gguf",
        "bert/bert/reference.json",
        "logits",
        LABELS,
    );
}

/// llama.cpp's own BERT classifier layout (pooler dropped): `cls.output(h_first)`, against
/// transformers' classifier on the first token's last hidden state.
#[test]
fn gguf_bert_classifier_without_pooler_matches_llama_cpp_semantics() {
    classifier(
        "bert_gguf/bert_cls_out.gguf",
        "bert_gguf/reference_cls_out.json",
        "logits",
        LABELS,
    );
}

/// Only `cls` (llama.cpp's mapping of a BERT classifier whose labels look like AutoConfig's
/// dummies) and no output labels: `tanh(cls(h_first))` and `LABEL_i` names.
#[test]
fn gguf_bert_classifier_cls_only_matches_llama_cpp_semantics() {
    classifier(
        "bert_gguf/bert_cls_only.gguf",
        "bert_gguf/reference_cls_out.json",
        "tanh_logits",
        ["LABEL_0", "LABEL_1", "LABEL_2"],
    );
}

/// RoBERTa as llama.cpp converts it (arch bert, position table chopped by pad + 1 rows,
/// classifier.dense → cls, classifier.out_proj → cls.output): transformers' logits.
#[test]
fn gguf_roberta_classifier_matches_transformers() {
    let m = classifier(
        "bert_gguf/roberta_cls.gguf",
        "bert/roberta/reference.json",
        "logits",
        LABELS,
    );
    assert_eq!(m.config().max_tokens(), 38);
}

/// A GGUF encoder without classifier tensors stays a bare encoder.
#[test]
fn gguf_encoder_without_classifier_has_no_head() {
    let file = cyb_format::open(fixture("bert_gguf/model.gguf")).unwrap();
    let m = BertModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    assert_eq!(m.config().head, BertHead::None);
    assert!(m.config().labels.is_empty());
    let err = m.sequence_logits(&[vec![2, 5, 3]]).unwrap_err().to_string();
    assert!(err.contains("sequence classification"), "{err}");
}

/// A Jina-v2 reranker as llama.cpp converts it (jina-bert-v2, pooler as `cls`, classifier as
/// `cls.output`) against the fixture script's reference of the same tiny model.
#[test]
fn gguf_jina_v2_reranker() {
    let r = reference("encoders/jina_v2_rerank/reference.json");
    let seqs = sequence_ids(&r);
    let file = cyb_format::open(fixture("bert_gguf/jina_v2_rerank.gguf")).unwrap();
    let m = cyb_models::JinaBertModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    assert_eq!(m.config().head, BertHead::SequenceClassification);
    assert_eq!(m.config().labels, ["LABEL_0"]);
    let logits = m.sequence_logits_typed(&seqs, None).unwrap();
    for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
        check(
            &format!("jina rerank gguf seq {i}"),
            &logits[i],
            &floats(&s["logits"]),
        );
    }
}

//! The BertStyle family against Hugging Face transformers on tiny random-weight models
//! (tests/fixtures/bert, made by tools/fixtures/make_bert_fixtures.py): last hidden states of
//! every real token, cls/mean/max pooled vectors and classification logits of a padded batch
//! of three sequences of different lengths, and of each sequence alone. F32, relative error
//! (max|a - b| / max|b|) ≤ 1e-5.

mod common;
use common::{check, floats, positions, rows_of, sequence_ids};
use cyb_backend::Dispatcher;
use cyb_models::{BatchLayout, BertHead, BertModel, Pooling};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

fn dir(variant: &str) -> PathBuf {
    common::fixture(&format!("bert/{variant}"))
}

fn reference(variant: &str) -> Value {
    common::reference(&format!("bert/{variant}/reference.json"))
}

fn load(variant: &str, dispatcher: Dispatcher) -> BertModel {
    let file = cyb_format::open(dir(variant)).unwrap();
    BertModel::load(&file, Arc::new(dispatcher)).unwrap()
}

/// Both batch layouts (padded + masked, packed + per-sequence attention) must match.
fn check_variant(variant: &str, dispatcher: fn() -> Dispatcher) {
    for layout in [BatchLayout::Padded, BatchLayout::Packed] {
        check_layout(variant, dispatcher, layout);
    }
}

fn check_layout(variant: &str, dispatcher: fn() -> Dispatcher, layout: BatchLayout) {
    let r = reference(variant);
    let mut m = load(variant, dispatcher());
    m.set_layout(layout);
    assert_eq!(m.config().head, BertHead::SequenceClassification);
    let labels: Vec<&str> = r["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(m.config().labels, labels);
    let seqs = sequence_ids(&r);
    let batch = m.hidden_states(&seqs).unwrap();
    let logits = m.sequence_logits(&seqs).unwrap();
    for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
        let tag = format!("{variant} seq {i} ({layout:?} batch)");
        check(
            &format!("{tag} hidden"),
            &batch.states[i],
            &floats(&s["hidden"]),
        );
        for p in [Pooling::Cls, Pooling::Mean, Pooling::Max] {
            let got = &batch.pool(p, false)[i];
            check(
                &format!("{tag} {}", p.name()),
                got,
                &floats(&s["pooled"][p.name()]),
            );
        }
        check(&format!("{tag} logits"), &logits[i], &floats(&s["logits"]));
        // Alone, without padding or mask, the sequence gets the same states.
        let alone = m.hidden_states(std::slice::from_ref(&seqs[i])).unwrap();
        check(
            &format!("{variant} seq {i} alone"),
            &alone.states[0],
            &floats(&s["hidden"]),
        );
    }
}

#[test]
fn bert_matches_transformers() {
    check_variant("bert", Dispatcher::reference);
}

#[test]
fn roberta_matches_transformers() {
    check_variant("roberta", Dispatcher::reference);
}

#[test]
fn xlm_roberta_gelu_tanh_matches_transformers() {
    check_variant("xlm_roberta", Dispatcher::reference);
}

#[test]
fn distilbert_matches_transformers() {
    check_variant("distilbert", Dispatcher::reference);
}

#[test]
fn token_classification_matches_transformers() {
    for variant in ["bert_tokens", "roberta_tokens"] {
        let r = reference(variant);
        let mut m = load(variant, Dispatcher::reference());
        m.set_layout(BatchLayout::Packed);
        assert_eq!(m.config().head, BertHead::TokenClassification);
        let seqs = sequence_ids(&r);
        let got = m.token_logits(&seqs).unwrap();
        for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
            check(
                &format!("{variant} seq {i}"),
                &got[i],
                &floats(&s["logits"]),
            );
        }
        assert!(m.sequence_logits(&seqs).is_err(), "no sequence head here");
    }
}

#[test]
fn bad_batches_are_errors() {
    let m = load("bert", Dispatcher::reference());
    let max = m.config().max_tokens();
    assert!(m.hidden_states(&[]).is_err());
    assert!(m.hidden_states(&[vec![]]).is_err());
    assert!(m.hidden_states(&[vec![2; max + 1]]).is_err());
    assert!(m.hidden_states(&[vec![2; max]]).is_ok());
    let e = m
        .hidden_states(&[vec![2, 100_000]])
        .unwrap_err()
        .to_string();
    assert!(e.contains("vocabulary"), "{e}");
}

#[test]
fn missing_tensor_is_named() {
    let tmp = std::env::temp_dir().join(format!("cyb-bert-missing-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::copy(dir("bert").join("config.json"), tmp.join("config.json")).unwrap();
    // The token-classification weights lack the pooler the sequence head needs.
    std::fs::copy(
        dir("bert_tokens").join("model.safetensors"),
        tmp.join("model.safetensors"),
    )
    .unwrap();
    let file = cyb_format::open(&tmp).unwrap();
    let e = BertModel::load(&file, Arc::new(Dispatcher::reference()))
        .unwrap_err()
        .to_string();
    std::fs::remove_dir_all(&tmp).ok();
    assert!(e.contains("bert.pooler.dense.weight"), "{e}");
}

#[test]
fn masked_lm_matches_transformers() {
    for variant in ["bert_mlm", "roberta_mlm", "distilbert_mlm"] {
        let r = reference(variant);
        for layout in [BatchLayout::Padded, BatchLayout::Packed] {
            let mut m = load(variant, Dispatcher::reference());
            m.set_layout(layout);
            assert_eq!(m.config().head, BertHead::MaskedLm);
            let seqs = sequence_ids(&r);
            let got = m.masked_lm_logits(&seqs).unwrap();
            let vocab = m.config().vocab_size;
            for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
                let tag = format!("{variant} {layout:?} seq {i}");
                let want = floats(&s["logits"]);
                check(&tag, &got[i], &want);
                // The head on chosen rows only (as fill-mask runs it).
                let at = positions(seqs[i].len());
                let rows = m.masked_lm_logits_at(&seqs[i], &at).unwrap();
                check(
                    &format!("{tag} at {at:?}"),
                    &rows,
                    &rows_of(&want, &at, vocab),
                );
                assert!(m.masked_lm_logits_at(&seqs[i], &[seqs[i].len()]).is_err());
                assert!(m.masked_lm_logits_at(&seqs[i], &[]).is_err());
            }
            assert!(m.token_logits(&seqs).is_err(), "no token head here");
        }
    }
}

#[test]
fn encoders_not_run_yet_are_named() {
    let tmp = std::env::temp_dir().join(format!("cyb-bert-deberta-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir("bert").join("config.json")).unwrap())
            .unwrap();
    config["model_type"] = "nomic_bert".into();
    std::fs::write(tmp.join("config.json"), config.to_string()).unwrap();
    std::fs::copy(
        dir("bert").join("model.safetensors"),
        tmp.join("model.safetensors"),
    )
    .unwrap();
    let file = cyb_format::open(&tmp).unwrap();
    assert!(cyb_models::BertConfig::is_bert_file(&file));
    let e = BertModel::load(&file, Arc::new(Dispatcher::reference()))
        .unwrap_err()
        .to_string();
    std::fs::remove_dir_all(&tmp).ok();
    assert!(
        e.contains("nomic_bert") && e.contains("does not run yet"),
        "{e}"
    );
}

#[test]
fn modernbert_matches_transformers() {
    let r = reference("modernbert");
    let file = cyb_format::open(dir("modernbert")).unwrap();
    let m = cyb_models::ModernBertModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    let modern = m.config().modern.clone().unwrap();
    assert_eq!(modern.global, vec![true, false, true]);
    assert_eq!(modern.window, 2);
    let seqs = sequence_ids(&r);
    let out = m.hidden_states(&seqs).unwrap();
    for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
        check(
            &format!("modernbert seq {i}"),
            &out.states[i],
            &floats(&s["hidden"]),
        );
        for p in [Pooling::Cls, Pooling::Mean, Pooling::Max] {
            let got = &out.pool(p, false)[i];
            let tag = format!("modernbert seq {i} {}", p.name());
            check(&tag, got, &floats(&s["pooled"][p.name()]));
        }
    }
    // The post-LN loader refuses it rather than misreading it.
    assert!(BertModel::load(&file, Arc::new(Dispatcher::reference())).is_err());
}

#[test]
fn modernbert_heads_match_transformers() {
    for (variant, head) in [
        ("modernbert_mlm", BertHead::MaskedLm),
        ("modernbert_cls", BertHead::SequenceClassification),
        ("modernbert_tok", BertHead::TokenClassification),
    ] {
        let r = reference(variant);
        let file = cyb_format::open(dir(variant)).unwrap();
        let m =
            cyb_models::ModernBertModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
        assert_eq!(m.config().head, head, "{variant}");
        let seqs = sequence_ids(&r);
        let got = match head {
            BertHead::MaskedLm => m.masked_lm_logits(&seqs).unwrap(),
            BertHead::SequenceClassification => m.sequence_logits(&seqs).unwrap(),
            _ => m.token_logits(&seqs).unwrap(),
        };
        for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
            let want = floats(&s["logits"]);
            check(&format!("{variant} seq {i}"), &got[i], &want);
            if head == BertHead::MaskedLm {
                let at = positions(seqs[i].len());
                let rows = m.masked_lm_logits_at(&seqs[i], &at).unwrap();
                let want = rows_of(&want, &at, m.config().vocab_size);
                check(&format!("{variant} seq {i} at {at:?}"), &rows, &want);
            }
        }
        // Each checkpoint has only its own head.
        if head != BertHead::MaskedLm {
            assert!(m.masked_lm_logits(&seqs).is_err(), "{variant}");
        }
    }
}

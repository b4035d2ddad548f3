//! DeBERTa v1/v2/v3 against transformers and Jina-v2 against the PyTorch reference module of
//! tools/fixtures/make_deberta_jina_fixtures.py, on tiny random-weight models
//! (tests/fixtures/encoders): last hidden states of every real token, pooled vectors and
//! classification logits of a padded batch of three sequences of different lengths, and of
//! each sequence alone; masked-LM logits of both of transformers' head layouts. F32, relative error (max|a - b| / max|b|) ≤ 1e-5.

mod common;
use common::{check, floats, positions, rows_of, sequence_ids as seqs};
use cyb_backend::Dispatcher;
use cyb_models::{BertHead, BertModel, DebertaModel, EncoderOutput, JinaBertModel, Pooling};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

fn dir(variant: &str) -> PathBuf {
    common::fixture(&format!("encoders/{variant}"))
}

fn reference(variant: &str) -> Value {
    common::reference(&format!("encoders/{variant}/reference.json"))
}

fn check_states(tag: &str, r: &Value, out: &EncoderOutput) {
    for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
        check(
            &format!("{tag} seq {i} hidden"),
            &out.states[i],
            &floats(&s["hidden"]),
        );
        for p in [Pooling::Cls, Pooling::Mean, Pooling::Max] {
            check(
                &format!("{tag} seq {i} {}", p.name()),
                &out.pool(p, false)[i],
                &floats(&s["pooled"][p.name()]),
            );
        }
    }
}

fn deberta(variant: &str) {
    let r = reference(variant);
    let file = cyb_format::open(dir(variant)).unwrap();
    let m = DebertaModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    assert_eq!(m.config().head, BertHead::SequenceClassification);
    assert_eq!(m.config().labels, ["negative", "neutral", "positive"]);
    let seqs = seqs(&r);
    check_states(variant, &r, &m.hidden_states(&seqs).unwrap());
    let logits = m.sequence_logits(&seqs).unwrap();
    for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
        check(
            &format!("{variant} seq {i} logits"),
            &logits[i],
            &floats(&s["logits"]),
        );
        let alone = m.hidden_states(std::slice::from_ref(&seqs[i])).unwrap();
        check(
            &format!("{variant} seq {i} alone"),
            &alone.states[0],
            &floats(&s["hidden"]),
        );
    }
    assert!(m.token_logits(&seqs).is_err(), "no token head here");
    // The post-LN BERT loader refuses it rather than misreading it.
    assert!(BertModel::load(&file, Arc::new(Dispatcher::reference())).is_err());
}

#[test]
fn deberta_v3_matches_transformers() {
    deberta("deberta_v3");
}

#[test]
fn deberta_v2_matches_transformers() {
    deberta("deberta_v2");
}

/// `DebertaV2ForMaskedLM` logits of every real token, batched (padded) and alone.
fn deberta_mlm(variant: &str, legacy: bool) {
    let r = reference(variant);
    assert_eq!(r["legacy"].as_bool(), Some(legacy));
    let file = cyb_format::open(dir(variant)).unwrap();
    let m = DebertaModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    assert_eq!(m.config().head, BertHead::MaskedLm);
    let seqs = seqs(&r);
    let logits = m.masked_lm_logits(&seqs).unwrap();
    assert_eq!(logits.len(), seqs.len());
    for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
        let want = floats(&s["logits"]);
        assert_eq!(want.len(), seqs[i].len() * m.config().vocab_size);
        check(&format!("{variant} seq {i} mlm logits"), &logits[i], &want);
        let alone = m.masked_lm_logits(std::slice::from_ref(&seqs[i])).unwrap();
        check(&format!("{variant} seq {i} mlm alone"), &alone[0], &want);
        // The head on chosen rows only (as fill-mask runs it).
        let at = positions(seqs[i].len());
        let rows = m.masked_lm_logits_at(&seqs[i], &at).unwrap();
        let want_rows = rows_of(&want, &at, m.config().vocab_size);
        check(
            &format!("{variant} seq {i} mlm at {at:?}"),
            &rows,
            &want_rows,
        );
        let last = seqs[i].len() - 1;
        assert!(m.masked_lm_logits_at(&seqs[i], &[last + 1]).is_err());
    }
    assert!(m.sequence_logits(&seqs).is_err(), "no sequence head here");
    assert!(m.token_logits(&seqs).is_err(), "no token head here");
}

#[test]
fn deberta_v3_masked_lm_matches_transformers() {
    deberta_mlm("deberta_v3_mlm", false);
}

#[test]
fn deberta_v2_legacy_masked_lm_matches_transformers() {
    deberta_mlm("deberta_v2_mlm", true);
}

/// deberta-v2-xlarge's convolution after the first layer (kernel 3, GELU).
#[test]
fn deberta_v2_conv_matches_transformers() {
    deberta("deberta_v2_conv");
    let file = cyb_format::open(dir("deberta_v2_conv")).unwrap();
    let m = DebertaModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    let conv = m.settings().conv.clone().unwrap();
    assert_eq!(conv.kernel, 3);
    assert_eq!(
        conv.act,
        cyb_models::ConvActivation::Gelu(cyb_ops::GeluApprox::Erf)
    );
}

/// DeBERTa v1 (`model_type: deberta`): fused in_proj, clamped distances (span 6 < 12).
#[test]
fn deberta_v1_matches_transformers() {
    deberta("deberta_v1");
    let file = cyb_format::open(dir("deberta_v1")).unwrap();
    let m = DebertaModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    let s = m.settings();
    assert!(s.v1 && s.c2p && s.p2c && !s.share_att_key && s.position_biased_input);
    assert_eq!((s.buckets, s.max_relative, s.span), (-1, 6, 6));
}

/// v1 masked LM with the span set by the sequence length (max_relative_positions unset).
#[test]
fn deberta_v1_masked_lm_matches_transformers() {
    deberta_mlm("deberta_v1_mlm", false);
}

#[test]
fn deberta_masked_lm_needs_a_head() {
    // A classification checkpoint has no masked-LM head to run.
    let file = cyb_format::open(dir("deberta_v3")).unwrap();
    let m = DebertaModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    let err = m
        .masked_lm_logits(&[vec![1, 5, 2]])
        .unwrap_err()
        .to_string();
    assert!(err.contains("MaskedLm"), "{err}");
}

#[test]
fn deberta_v3_log_buckets() {
    let file = cyb_format::open(dir("deberta_v3")).unwrap();
    let m = DebertaModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    let s = m.settings();
    assert!(s.c2p && s.p2c && s.share_att_key && s.norm_rel && !s.position_biased_input);
    assert_eq!((s.buckets, s.max_relative, s.span), (8, 40, 8));
    // transformers' make_log_bucket_position over -12..=12, recorded by the fixture script.
    let r = reference("deberta_v3");
    let rel: Vec<i64> = r["log_buckets"]["relative"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let want: Vec<i64> = r["log_buckets"]["bucket"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let got: Vec<i64> = rel.iter().map(|&x| s.bucket(x)).collect();
    assert_eq!(got, want);
}

#[test]
fn jina_v2_matches_pytorch_reference() {
    let r = reference("jina_v2");
    let file = cyb_format::open(dir("jina_v2")).unwrap();
    let m = JinaBertModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    assert_eq!(m.config().head, BertHead::None);
    check(
        "alibi slopes (6 heads: 4 + every other of 8)",
        &cyb_models::alibi_slopes(6),
        &floats(&r["alibi_slopes"]),
    );
    let seqs = seqs(&r);
    check_states("jina_v2", &r, &m.hidden_states(&seqs).unwrap());
    for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
        let alone = m.hidden_states(std::slice::from_ref(&seqs[i])).unwrap();
        check(
            &format!("jina_v2 seq {i} alone"),
            &alone.states[0],
            &floats(&s["hidden"]),
        );
    }
    assert!(BertModel::load(&file, Arc::new(Dispatcher::reference())).is_err());
}

/// The jina-reranker-v1 head (JinaBertForSequenceClassification: BERT's pooler, one logit)
/// and JinaBertForTokenClassification against the fixture script's reference, batched and
/// alone, on the reference backend and on the cpu backend (token-major attention there).
#[test]
fn jina_v2_heads_match_reference() {
    let cpu = || -> Dispatcher {
        let cpu = cyb_cpu::CpuBackend::with_options(cyb_cpu::KernelSet::detect().unwrap(), 2);
        Dispatcher::new(vec![Arc::new(cpu.unwrap())])
    };
    for (name, make) in [
        ("reference", Dispatcher::reference as fn() -> Dispatcher),
        ("cpu", cpu),
    ] {
        let r = reference("jina_v2_rerank");
        let file = cyb_format::open(dir("jina_v2_rerank")).unwrap();
        let m = JinaBertModel::load(&file, Arc::new(make())).unwrap();
        assert_eq!(m.config().head, BertHead::SequenceClassification);
        let seqs = seqs(&r);
        let logits = m.sequence_logits_typed(&seqs, None).unwrap();
        for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
            let want = floats(&s["logits"]);
            check(&format!("{name}: rerank seq {i}"), &logits[i], &want);
            let alone = m
                .sequence_logits_typed(std::slice::from_ref(&seqs[i]), None)
                .unwrap();
            check(&format!("{name}: rerank seq {i} alone"), &alone[0], &want);
        }
        assert!(m.token_logits(&seqs).is_err(), "no token head here");

        let r = reference("jina_v2_token");
        let file = cyb_format::open(dir("jina_v2_token")).unwrap();
        let m = JinaBertModel::load(&file, Arc::new(make())).unwrap();
        assert_eq!(m.config().head, BertHead::TokenClassification);
        let logits = m.token_logits(&seqs).unwrap();
        for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
            check(
                &format!("{name}: token seq {i}"),
                &logits[i],
                &floats(&s["logits"]),
            );
        }
        let e = m.sequence_logits_typed(&seqs, None).unwrap_err();
        assert!(
            e.to_string().contains("no sequence classification head"),
            "{e}"
        );
    }
}

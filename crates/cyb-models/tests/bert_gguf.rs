//! A BERT encoder from GGUF (llama.cpp's `bert` naming): tests/fixtures/bert_gguf/model.gguf is
//! the tiny BERT of tests/fixtures/bert/bert converted by
//! tools/fixtures/make_bert_gguf_fixture.py with the `gguf` package. Its hidden states must
//! equal transformers' (that fixture's reference.json, F32 relative error ≤ 1e-5) and the
//! Hugging Face directory's, in padded and packed batches.

mod common;
use common::*;

use cyb_backend::Dispatcher;
use cyb_models::{BatchLayout, BertHead, BertModel, Pooling};
use std::sync::Arc;

#[test]
fn gguf_bert_matches_transformers_and_the_hf_directory() {
    let r = reference("bert/bert/reference.json");
    let seqs = sequence_ids(&r);
    let gguf = cyb_format::open(fixture("bert_gguf/model.gguf")).unwrap();
    let hf = cyb_format::open(fixture("bert/bert")).unwrap();
    let hf = BertModel::load(&hf, Arc::new(Dispatcher::reference())).unwrap();
    let from_hf = hf.hidden_states(&seqs).unwrap();
    for layout in [BatchLayout::Padded, BatchLayout::Packed] {
        let mut m = BertModel::load(&gguf, Arc::new(Dispatcher::reference())).unwrap();
        m.set_layout(layout);
        let c = m.config();
        assert_eq!(c.architecture, "bert");
        assert_eq!(c.head, BertHead::None);
        assert_eq!(
            (
                c.vocab_size,
                c.hidden_size,
                c.num_layers,
                c.num_heads,
                c.type_vocab_size
            ),
            (96, 24, 2, 4, 2)
        );
        let out = m.hidden_states(&seqs).unwrap();
        for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
            let tag = format!("gguf seq {i} ({layout:?})");
            check(&tag, &out.states[i], &floats(&s["hidden"]));
            check(
                &format!("{tag} vs hf dir"),
                &out.states[i],
                &from_hf.states[i],
            );
            for p in [Pooling::Cls, Pooling::Mean, Pooling::Max] {
                check(
                    &format!("{tag} {}", p.name()),
                    &out.pool(p, false)[i],
                    &floats(&s["pooled"][p.name()]),
                );
            }
        }
    }
    let cyb_format::ModelFile::Gguf(g) = &gguf else {
        panic!("not a GGUF file")
    };
    assert_eq!(cyb_models::gguf_pooling(g), Some(Pooling::Mean));
}

/// llama.cpp's usual `--outtype f16` layout (matrices F16, vectors F32) against transformers
/// run with the same F16-rounded matrices.
#[test]
fn gguf_bert_f16_matches_transformers_with_rounded_weights() {
    let r = reference("bert_gguf/reference_f16.json");
    let seqs = sequence_ids(&r);
    let file = cyb_format::open(fixture("bert_gguf/model_f16.gguf")).unwrap();
    let w = file.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(w.dtype(), cyb_tensor::DType::F16);
    for layout in [BatchLayout::Padded, BatchLayout::Packed] {
        let mut m = BertModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
        m.set_layout(layout);
        let out = m.hidden_states(&seqs).unwrap();
        for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
            check(
                &format!("f16 gguf seq {i} ({layout:?})"),
                &out.states[i],
                &floats(&s["hidden"]),
            );
        }
    }
}

/// Jina-v2 as llama.cpp's jina-bert-v2 GGUF (fused gated_layers as ffn_up) against the
/// fixture script's PyTorch reference of the same tiny model.
#[test]
fn gguf_jina_v2_matches_reference() {
    let r = reference("encoders/jina_v2/reference.json");
    let seqs = sequence_ids(&r);
    let file = cyb_format::open(fixture("bert_gguf/jina_v2.gguf")).unwrap();
    let m = cyb_models::JinaBertModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    assert_eq!(m.config().architecture, "jina-bert-v2");
    let out = m.hidden_states(&seqs).unwrap();
    for (i, s) in r["sequences"].as_array().unwrap().iter().enumerate() {
        check(
            &format!("jina gguf seq {i}"),
            &out.states[i],
            &floats(&s["hidden"]),
        );
    }
    // The post-LN BERT loader refuses it rather than misreading it.
    assert!(BertModel::load(&file, Arc::new(Dispatcher::reference())).is_err());
}

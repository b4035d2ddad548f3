//! Broken `tokenizer.ggml.*` metadata gives `Error::Tokenizer` naming the key, never a panic.

use cyb_format::{GgufFile, ModelFile};
use cyb_runtime::Tokenizer;
use cyb_tensor::Error;
use std::sync::Arc;

/// GGUF metadata values, enough to write the tokenizer keys.
enum V {
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(&'static str),
    Strs(Vec<&'static str>),
    U32s(Vec<u32>),
    F32s(Vec<f32>),
    I32s(Vec<i32>),
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// A GGUF v3 file with these key/values and no tensors.
fn gguf(kvs: &[(&str, V)]) -> ModelFile {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend((kvs.len() as u64).to_le_bytes());
    for (key, v) in kvs {
        put_str(&mut b, key);
        let array = |b: &mut Vec<u8>, ty: u32, n: usize| {
            b.extend(9u32.to_le_bytes());
            b.extend(ty.to_le_bytes());
            b.extend((n as u64).to_le_bytes());
        };
        match v {
            V::U32(x) => b.extend(4u32.to_le_bytes().into_iter().chain(x.to_le_bytes())),
            V::I32(x) => b.extend(5u32.to_le_bytes().into_iter().chain(x.to_le_bytes())),
            V::F32(x) => b.extend(6u32.to_le_bytes().into_iter().chain(x.to_le_bytes())),
            V::Bool(x) => b.extend(7u32.to_le_bytes().into_iter().chain([u8::from(*x)])),
            V::Str(s) => {
                b.extend(8u32.to_le_bytes());
                put_str(&mut b, s);
            }
            V::Strs(a) => {
                array(&mut b, 8, a.len());
                a.iter().for_each(|s| put_str(&mut b, s));
            }
            V::U32s(a) => {
                array(&mut b, 4, a.len());
                a.iter().for_each(|x| b.extend(x.to_le_bytes()));
            }
            V::F32s(a) => {
                array(&mut b, 6, a.len());
                a.iter().for_each(|x| b.extend(x.to_le_bytes()));
            }
            V::I32s(a) => {
                array(&mut b, 5, a.len());
                a.iter().for_each(|x| b.extend(x.to_le_bytes()));
            }
        }
    }
    let g = GgufFile::from_bytes(Arc::new(b), "bad.gguf").expect("valid GGUF container");
    ModelFile::Gguf(g)
}

fn gpt2_ok() -> Vec<(&'static str, V)> {
    vec![
        ("tokenizer.ggml.model", V::Str("gpt2")),
        ("tokenizer.ggml.pre", V::Str("smollm")),
        (
            "tokenizer.ggml.tokens",
            V::Strs(vec!["<|endoftext|>", "a", "b", "ab", "Ġ"]),
        ),
        ("tokenizer.ggml.token_type", V::I32s(vec![3, 1, 1, 1, 1])),
        ("tokenizer.ggml.merges", V::Strs(vec!["a b"])),
        ("tokenizer.ggml.eos_token_id", V::U32(0)),
    ]
}

fn llama_ok() -> Vec<(&'static str, V)> {
    vec![
        ("tokenizer.ggml.model", V::Str("llama")),
        (
            "tokenizer.ggml.tokens",
            V::Strs(vec!["<unk>", "<s>", "</s>", "▁a", "▁", "a"]),
        ),
        (
            "tokenizer.ggml.scores",
            V::F32s(vec![0.0, 0.0, 0.0, -1.0, -2.0, -3.0]),
        ),
        ("tokenizer.ggml.token_type", V::I32s(vec![2, 3, 3, 1, 1, 1])),
        ("tokenizer.ggml.bos_token_id", V::U32(1)),
        ("tokenizer.ggml.eos_token_id", V::U32(2)),
        ("tokenizer.ggml.add_bos_token", V::Bool(true)),
    ]
}

fn with(mut kvs: Vec<(&'static str, V)>, key: &'static str, v: Option<V>) -> ModelFile {
    kvs.retain(|(k, _)| *k != key);
    if let Some(v) = v {
        kvs.push((key, v));
    }
    gguf(&kvs)
}

#[track_caller]
fn fails_naming(model: ModelFile, words: &[&str]) {
    match Tokenizer::from_model_file(&model) {
        Err(Error::Tokenizer { reason }) => {
            for w in words {
                assert!(reason.contains(w), "{reason:?} does not name {w:?}");
            }
        }
        Err(e) => panic!("wrong error kind: {e}"),
        Ok(t) => panic!("accepted: {t:?}"),
    }
}

#[test]
fn well_formed_minimal_files_load() {
    let t = Tokenizer::from_model_file(&gguf(&gpt2_ok())).expect("gpt2");
    assert_eq!(t.encode("ab<|endoftext|>", false).unwrap(), [3, 0]);
    assert_eq!(t.eos_ids(), [0]);
    let t = Tokenizer::from_model_file(&gguf(&llama_ok())).expect("llama");
    assert_eq!(t.encode("a", true).unwrap(), [1, 3]);
    assert_eq!(t.decode(&[1, 3, 4, 5], true).unwrap(), "a a");
}

#[test]
fn bad_tokens_merges_scores_and_ids_are_named() {
    let tokens = "tokenizer.ggml.tokens";
    fails_naming(
        with(gpt2_ok(), tokens, Some(V::U32s(vec![1, 2]))),
        &[tokens, "string"],
    );
    fails_naming(with(gpt2_ok(), tokens, Some(V::U32(7))), &[tokens, "array"]);
    fails_naming(with(gpt2_ok(), tokens, None), &[tokens, "missing"]);
    fails_naming(with(gpt2_ok(), tokens, Some(V::Strs(vec![]))), &[tokens]);

    let merges = "tokenizer.ggml.merges";
    fails_naming(with(gpt2_ok(), merges, None), &[merges, "missing"]);
    fails_naming(
        with(gpt2_ok(), merges, Some(V::Strs(vec!["ab"]))),
        &[merges],
    );
    fails_naming(
        with(gpt2_ok(), merges, Some(V::Strs(vec!["x y"]))),
        &["tokenizer.ggml"],
    );

    let types = "tokenizer.ggml.token_type";
    fails_naming(with(gpt2_ok(), types, Some(V::I32s(vec![1]))), &[types]);
    fails_naming(
        with(gpt2_ok(), types, Some(V::Strs(vec!["a"; 5]))),
        &[types],
    );

    let eos = "tokenizer.ggml.eos_token_id";
    fails_naming(with(gpt2_ok(), eos, Some(V::U32(5))), &[eos, "5"]);
    fails_naming(with(gpt2_ok(), eos, Some(V::Str("x"))), &[eos]);
    let bos = "tokenizer.ggml.bos_token_id";
    fails_naming(with(llama_ok(), bos, Some(V::I32(-7))), &[bos]);

    let scores = "tokenizer.ggml.scores";
    fails_naming(with(llama_ok(), scores, None), &[scores, "missing"]);
    fails_naming(
        with(llama_ok(), scores, Some(V::F32s(vec![0.0]))),
        &[scores],
    );
    fails_naming(with(llama_ok(), scores, Some(V::F32(1.0))), &[scores]);

    let model = "tokenizer.ggml.model";
    fails_naming(
        with(gpt2_ok(), model, Some(V::Str("rwkv"))),
        &[model, "rwkv"],
    );
    fails_naming(with(gpt2_ok(), model, None), &[model]);
    let pre = "tokenizer.ggml.pre";
    fails_naming(
        with(gpt2_ok(), pre, Some(V::Str("deepseek-llm"))),
        &[pre, "deepseek-llm"],
    );
    let add_bos = "tokenizer.ggml.add_bos_token";
    fails_naming(with(llama_ok(), add_bos, Some(V::U32(1))), &[add_bos]);
}

#[test]
fn ids_outside_the_vocabulary_are_errors() {
    let t = Tokenizer::from_model_file(&gguf(&gpt2_ok())).expect("gpt2");
    assert!(matches!(
        t.decode(&[1, 99], false),
        Err(Error::Tokenizer { .. })
    ));
    let mut stream = t.incremental_decoder(false);
    assert!(matches!(stream.push(5), Err(Error::Tokenizer { .. })));
    assert_eq!(t.token_text(5), None);
}

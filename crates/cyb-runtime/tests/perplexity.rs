//! `Model::perplexity` on the tiny chat model (tests/fixtures/tiny_chat): against
//! transformers' logits (the figure in reference.json, made by
//! tools/fixtures/make_tiny_chat_fixture.py) and against a computation written here from the
//! family's `forward_all` logits, in f64.

use cyb_backend::Dispatcher;
use cyb_models::LlamaModel;
use cyb_runtime::{Runtime, RuntimeOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny_chat")
        .join(rel)
}

fn reference() -> Value {
    let text = std::fs::read_to_string(fixture("reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| u32::try_from(x.as_u64().unwrap()).unwrap())
        .collect()
}

/// Perplexity with every scored position at least ctx/2 tokens into its chunk, each chunk from
/// an empty cache and starting with `bos` when given (llama-perplexity's definition).
/// The family runs on `dispatcher`, the runtime's own, so both see the same logits.
fn direct_perplexity(
    path: &Path,
    dispatcher: Arc<Dispatcher>,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
) -> f64 {
    let file = cyb_format::open(path).unwrap();
    let net = LlamaModel::load(&file, dispatcher).unwrap();
    let vocab = file.config().unwrap().vocab_size;
    let mut total = 0f64;
    let mut n = 0usize;
    for chunk in tokens.chunks_exact(ctx) {
        let mut chunk = chunk.to_vec();
        if let Some(b) = bos {
            chunk[0] = b;
        }
        let mut cache = net.new_cache(ctx).unwrap();
        let logits = net.forward_all(&chunk, &mut cache).unwrap();
        assert_eq!(logits.len(), ctx * vocab);
        for (pos, next) in chunk.iter().enumerate().skip(1).skip(ctx / 2) {
            let row: Vec<f64> = logits[(pos - 1) * vocab..pos * vocab]
                .iter()
                .map(|&x| f64::from(x))
                .collect();
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let log_z = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
            total += log_z - row[*next as usize];
            n += 1;
        }
    }
    (total / n as f64).exp()
}

#[test]
fn perplexity_equals_transformers_and_a_direct_computation() {
    let r = reference();
    let p = &r["perplexity"];
    let ctx = p["ctx"].as_u64().unwrap() as usize;
    for rel in ["hf", "model-f32.gguf"] {
        let rt = Runtime::new(RuntimeOptions::default()).unwrap();
        let model = rt.load(fixture(rel)).unwrap();
        let tokens = model
            .tokenizer()
            .encode(p["text"].as_str().unwrap(), model.tokenizer().add_bos())
            .unwrap();
        assert_eq!(tokens, ids(&p["ids"]), "{rel}");
        let mut calls = Vec::new();
        let report = model
            .perplexity(&tokens, ctx, &mut |done, total, ppl| {
                calls.push((done, total, ppl))
            })
            .unwrap();
        let chunks = p["chunks"].as_u64().unwrap() as usize;
        assert_eq!(report.chunks, chunks);
        assert_eq!(
            report.scored_tokens,
            p["scored_tokens"].as_u64().unwrap() as usize
        );
        assert_eq!(report.scored_tokens, chunks * (ctx - 1 - ctx / 2));
        assert_eq!(calls.len(), chunks);
        assert_eq!(calls.last().map(|c| (c.0, c.1)), Some((chunks, chunks)));
        assert_eq!(report.running.len(), chunks);
        assert_eq!(report.running.last(), Some(&report.perplexity));

        let want = p["perplexity"].as_f64().unwrap();
        let rel_err = (report.perplexity - want).abs() / want;
        assert!(
            rel_err < 1e-4,
            "{rel}: {} vs transformers {want}",
            report.perplexity
        );
        let direct = direct_perplexity(&fixture(rel), rt.dispatcher().clone(), &tokens, ctx, None);
        let rel_err = (report.perplexity - direct).abs() / direct;
        assert!(
            rel_err < 1e-9,
            "{rel}: {} vs direct {direct}",
            report.perplexity
        );
    }
}

/// A copy of the tiny model whose tokenizer adds `<|endoftext|>` (id 0) as BOS.
fn with_bos() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cyb-runtime-ppl-bos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["config.json", "model.safetensors", "tokenizer_config.json"] {
        std::fs::copy(fixture("hf").join(name), dir.join(name)).unwrap();
    }
    let text = std::fs::read_to_string(fixture("hf/tokenizer.json")).unwrap();
    let mut tok: Value = serde_json::from_str(&text).unwrap();
    let bos = "<|endoftext|>";
    let seq = |id: &str| serde_json::json!({"Sequence": {"id": id, "type_id": 0}});
    let special = serde_json::json!({"SpecialToken": {"id": bos, "type_id": 0}});
    tok["post_processor"] = serde_json::json!({
        "type": "TemplateProcessing",
        "single": [special, seq("A")],
        "pair": [special, seq("A"), seq("B")],
        "special_tokens": {bos: {"id": bos, "ids": [0], "tokens": [bos]}},
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
    dir
}

#[test]
fn each_chunk_starts_with_bos_when_the_tokenizer_adds_one() {
    let dir = with_bos();
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    let model = rt.load(&dir).unwrap();
    assert!(model.tokenizer().add_bos());
    assert_eq!(model.tokenizer().bos_id(), Some(0));
    let tokens = ids(&reference()["perplexity"]["ids"]);
    let got = model
        .perplexity(&tokens, 16, &mut |_, _, _| {})
        .unwrap()
        .perplexity;
    let d = rt.dispatcher().clone();
    let want = direct_perplexity(&dir, d.clone(), &tokens, 16, Some(0));
    assert!((got - want).abs() / want < 1e-9, "{got} vs {want}");
    let without = direct_perplexity(&dir, d, &tokens, 16, None);
    assert!(
        (got - without).abs() / without > 1e-6,
        "BOS changed nothing"
    );
}

#[test]
fn fewer_tokens_than_one_chunk_is_an_error() {
    let model = Runtime::new(RuntimeOptions::default())
        .unwrap()
        .load(fixture("hf"))
        .unwrap();
    let tokens = ids(&reference()["perplexity"]["ids"]);
    let err = model
        .perplexity(&tokens[..15], 16, &mut |_, _, _| {})
        .expect_err("an error");
    let msg = err.to_string();
    assert!(msg.contains("15") && msg.contains("16"), "{msg}");
    assert!(model.perplexity(&tokens, 2, &mut |_, _, _| {}).is_err());
    // Exactly one chunk works.
    let one = model
        .perplexity(&tokens[..16], 16, &mut |_, _, _| {})
        .unwrap();
    assert_eq!((one.chunks, one.scored_tokens), (1, 7));
}

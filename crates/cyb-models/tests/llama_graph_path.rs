//! The spec's invariant for the graph path: the LlamaStyle fixtures (tests/fixtures/
//! llama_family, made by tools/fixtures/make_llama_family_fixtures.py from transformers) run
//! through the graph template and the graph executor agree with the curated code within F32
//! 1e-5 — for the bulk prefill of every prompt position and for token-by-token decoding after
//! it — and the graph path alone still matches transformers' logits and greedy tokens.

use cyb_backend::Dispatcher;
use cyb_models::LlamaModel;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const VARIANTS: [&str; 7] = [
    "llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3",
];

fn fixture_dir(variant: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/llama_family")
        .join(variant)
}

/// The prompt, the HF reference logits of every prompt position and the greedy tokens.
fn reference(variant: &str) -> (Vec<u32>, Vec<f32>, Vec<u32>) {
    let dir = fixture_dir(variant);
    let text = std::fs::read_to_string(dir.join("reference.json")).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let r = &json["references"]["hf"];
    let bytes = std::fs::read(dir.join(r["logits"].as_str().unwrap())).unwrap();
    let logits = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (ids(&json["prompt"]), logits, ids(&r["greedy"]))
}

fn load(path: &Path, graph: bool) -> LlamaModel {
    let file = cyb_format::open(path).unwrap();
    let mut m = LlamaModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    if graph {
        m.use_graph_path().unwrap();
        assert!(m.uses_graph_path());
        // The fusion pass ran for the reference backend: every residual add + norm is fused
        // (two per layer, the last feeding the final norm).
        let (last, _) = m.graph_path_graphs().unwrap();
        let fused = |name: &str| last.nodes.iter().filter(|n| n.op.name() == name).count();
        let layers = m.config().num_layers;
        assert!(
            fused("add_rms_norm") >= layers,
            "{}",
            cyb_graph::write_graph(last).unwrap()
        );
    }
    m
}

/// max|a - b| / max|b| per row of `vocab`, worst row.
fn rel_err(a: &[f32], b: &[f32], vocab: usize) -> f32 {
    assert_eq!(a.len(), b.len());
    a.chunks(vocab)
        .zip(b.chunks(vocab))
        .map(|(a, b)| {
            let diff = a.iter().zip(b).map(|(x, y)| (x - y).abs());
            diff.fold(0f32, f32::max) / b.iter().map(|y| y.abs()).fold(0f32, f32::max)
        })
        .fold(0f32, f32::max)
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn graph_path_equals_curated_path_and_transformers() {
    for variant in VARIANTS {
        let (prompt, hf_logits, hf_greedy) = reference(variant);
        for file in ["hf", "model-f32.gguf", "model-q4_0.gguf"] {
            let path = fixture_dir(variant).join(file);
            let (curated, graph) = (load(&path, false), load(&path, true));
            let vocab = curated.config().vocab_size;
            let ctx = prompt.len() + hf_greedy.len();
            let (mut cc, mut gc) = (
                curated.new_cache(ctx).unwrap(),
                graph.new_cache(ctx).unwrap(),
            );
            let c = curated.forward_all(&prompt, &mut cc).unwrap();
            let g = graph.forward_all(&prompt, &mut gc).unwrap();
            let err = rel_err(&g, &c, vocab);
            eprintln!("{variant} {file}: graph vs curated prefill {err:.2e}");
            assert!(err <= 1e-5, "{variant} {file}: prefill {err} > 1e-5");
            if file != "model-q4_0.gguf" {
                let err = rel_err(&g, &hf_logits, vocab);
                assert!(err <= 1e-5, "{variant} {file}: graph vs transformers {err}");
            }
            // Decode: the graph's keys and values went into the same cache layout.
            let mut next = argmax(&g[g.len() - vocab..]);
            let mut tokens = vec![next];
            while tokens.len() < hf_greedy.len() {
                // Every other step decodes through forward_argmax (the greedy fast path).
                if tokens.len() % 2 == 0 {
                    let c = curated.forward_argmax(&[next], &mut cc).unwrap();
                    next = graph.forward_argmax(&[next], &mut gc).unwrap();
                    assert_eq!(next, c, "{variant} {file} step {}", tokens.len());
                } else {
                    let c = curated.forward(&[next], &mut cc).unwrap();
                    let g = graph.forward(&[next], &mut gc).unwrap();
                    let err = rel_err(&g, &c, vocab);
                    assert!(err <= 1e-5, "{variant} {file} step {}: {err}", tokens.len());
                    next = argmax(&g);
                }
                tokens.push(next);
            }
            if file != "model-q4_0.gguf" {
                assert_eq!(tokens, hf_greedy, "{variant} {file}: greedy tokens");
            }
            assert_eq!(gc.len(), cc.len());
        }
    }
}

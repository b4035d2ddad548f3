//! The LlamaStyle fixtures (tests/fixtures/llama_family, made by
//! tools/fixtures/make_llama_family_fixtures.py from Hugging Face transformers) run on the wgpu
//! backend: every prompt position's logits against transformers' within the same tolerances as
//! the CPU path (F32 1e-5 where noted below, F16 1e-3, quantized 1e-2 against transformers on the
//! dequantized weights), and 32 greedy tokens equal.

mod common;

use common::{argmax, gpu, rel_err};
use cyb_backend::{Backend, Dispatcher};
use cyb_models::LlamaModel;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixture_dir(variant: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/llama_family")
        .join(variant)
}

struct Reference {
    prompt: Vec<u32>,
    vocab: usize,
    logits: Vec<f32>,
    greedy: Vec<u32>,
}

fn reference(variant: &str, tag: &str) -> Reference {
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
    let r = &json["references"][tag];
    let bytes = std::fs::read(dir.join(r["logits"].as_str().unwrap())).unwrap();
    Reference {
        prompt: ids(&json["prompt"]),
        vocab: json["vocab_size"].as_u64().unwrap() as usize,
        logits: bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        greedy: ids(&r["greedy"]),
    }
}

fn check_variant(variant: &str) {
    let Some(gpu) = gpu() else { return };
    let dir = fixture_dir(variant);
    let cases = [
        ("model-f32.gguf", "hf", 1e-5),
        ("model-f16.gguf", "f16", 1e-3),
        ("model-q8_0.gguf", "q8_0", 1e-2),
        ("model-q4_0.gguf", "q4_0", 1e-2),
    ];
    for (file, tag, tol) in cases {
        let r = reference(variant, tag);
        let chain: Vec<Arc<dyn Backend>> = vec![gpu.clone()];
        let dispatcher = Arc::new(Dispatcher::new(chain));
        let f = cyb_format::open(dir.join(file)).unwrap();
        let model = LlamaModel::load(&f, dispatcher.clone()).unwrap();
        let mut cache = model.new_cache(r.prompt.len() + r.greedy.len()).unwrap();
        let logits = model.forward_all(&r.prompt, &mut cache).unwrap();
        let err = logits
            .chunks(r.vocab)
            .zip(r.logits.chunks(r.vocab))
            .map(|(a, b)| rel_err(a, b))
            .fold(0f32, f32::max);
        let mut next = argmax(&logits[logits.len() - r.vocab..]);
        let mut tokens = vec![next];
        while tokens.len() < r.greedy.len() {
            // Decode picks the token on the device (one index read back, not the logits).
            next = model.forward_argmax(&[next], &mut cache).unwrap();
            tokens.push(next);
        }
        eprintln!("{variant} {file} on wgpu vs {tag}: max rel err {err:.2e} (tolerance {tol:.0e})");
        assert!(err <= tol, "{variant} {file} vs {tag}: {err} > {tol}");
        assert_eq!(tokens, r.greedy, "{variant} {file}: greedy tokens differ");
        // The heavy ops must have run on the GPU, not fallen back.
        let log = dispatcher.log();
        // The KV cache stays on the device: appended there, never read back per layer.
        let appended = log
            .executed
            .get(&("kv_append".to_string(), "wgpu".to_string()))
            .copied();
        assert!(
            appended.is_some(),
            "{variant} {file}: no kv_append on wgpu\n{}",
            log.summary()
        );
        for op in [
            "matmul",
            "rms_norm",
            "add_rms_norm",
            "rope",
            "sdpa",
            "embedding",
            "kv_append",
            "slice",
            "argmax",
        ] {
            let fell_back = log.fallbacks.keys().any(|(o, _, _)| o == op);
            assert!(
                !fell_back,
                "{variant} {file}: {op} fell back\n{}",
                log.summary()
            );
        }
    }
}

#[test]
fn llama3_rope_scaling() {
    check_variant("llama3");
}

#[test]
fn mistral_sliding_window() {
    check_variant("mistral");
}

#[test]
fn qwen2_qkv_biases() {
    check_variant("qwen2");
}

#[test]
fn qwen3_qk_norm() {
    check_variant("qwen3");
}

#[test]
fn gemma2_softcaps_and_local_layers() {
    check_variant("gemma2");
}

#[test]
fn gemma3_local_global_rope() {
    check_variant("gemma3");
}

#[test]
fn phi3_fused_projections_partial_rotary() {
    check_variant("phi3");
}

/// The graph path (`--path graph`: the LlamaStyle graph template run by the graph executor)
/// on wgpu agrees with the curated code on wgpu within F32 1e-5, for the prefill of every
/// prompt position and each decode step, and still matches transformers.
#[test]
fn graph_path_on_wgpu_equals_curated_path() {
    let Some(gpu) = gpu() else { return };
    for variant in [
        "llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3",
    ] {
        let r = reference(variant, "hf");
        let f = cyb_format::open(fixture_dir(variant).join("model-f32.gguf")).unwrap();
        let load = |graph: bool| {
            let chain: Vec<Arc<dyn Backend>> = vec![gpu.clone()];
            let dispatcher = Arc::new(Dispatcher::new(chain));
            let mut m = LlamaModel::load(&f, dispatcher.clone()).unwrap();
            if graph {
                m.use_graph_path().unwrap();
            }
            (m, dispatcher)
        };
        let ((curated, _), (graph, gd)) = (load(false), load(true));
        let ctx = r.prompt.len() + 8;
        let (mut cc, mut gc) = (
            curated.new_cache(ctx).unwrap(),
            graph.new_cache(ctx).unwrap(),
        );
        let c = curated.forward_all(&r.prompt, &mut cc).unwrap();
        let g = graph.forward_all(&r.prompt, &mut gc).unwrap();
        let worst = |a: &[f32], b: &[f32]| {
            a.chunks(r.vocab)
                .zip(b.chunks(r.vocab))
                .map(|(x, y)| rel_err(x, y))
                .fold(0f32, f32::max)
        };
        let (err, err_hf) = (worst(&g, &c), worst(&g, &r.logits));
        eprintln!("{variant} graph vs curated on wgpu: {err:.2e}, vs transformers {err_hf:.2e}");
        assert!(err <= 1e-5, "{variant}: graph vs curated {err}");
        assert!(err_hf <= 1e-5, "{variant}: graph vs transformers {err_hf}");
        let mut next = argmax(&g[g.len() - r.vocab..]);
        for step in 0..8 {
            let c = curated.forward(&[next], &mut cc).unwrap();
            let g = graph.forward(&[next], &mut gc).unwrap();
            let err = rel_err(&g, &c);
            assert!(err <= 1e-5, "{variant} decode step {step}: {err}");
            next = argmax(&g);
        }
        // The template's matmuls ran on the GPU.
        let log = gd.log();
        assert!(
            log.executed
                .contains_key(&("matmul".to_string(), "wgpu".to_string())),
            "{variant}: graph path matmuls did not run on wgpu\n{}",
            log.summary()
        );
    }
}

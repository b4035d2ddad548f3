//! The real default model, SmolLM2-135M-Instruct Q4_1 (llama arch, tied embeddings, NORMAL rope
//! on llama.cpp's permuted q/k), against transformers run on the same GGUF
//! (tests/fixtures/llama_family/smollm2_greedy.json, tools/fixtures/make_llama_family_smollm2.py).
//! Skipped with a message when the file is absent; fails instead when `CI` is set.

use cyb_backend::Dispatcher;
use cyb_models::LlamaModel;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn model_path() -> Option<PathBuf> {
    let path = std::env::var_os("CYB_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .or_else(|| {
            let cache = std::env::var_os("CYB_CACHE")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/cyb-llm"))
                })?;
            Some(cache.join("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
        });
    match path.filter(|p| p.exists()) {
        Some(p) => Some(p),
        None if std::env::var_os("CI").is_some() => {
            panic!("SmolLM2 GGUF absent under CI: run tools/fetch_smollm2.sh first")
        }
        None => {
            eprintln!("skipped: SmolLM2 GGUF absent (bash tools/fetch_smollm2.sh fetches it)");
            None
        }
    }
}

#[test]
fn greedy_and_logits_match_transformers_on_the_same_gguf() {
    let Some(path) = model_path() else { return };
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/llama_family/smollm2_greedy.json");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let ids = |k: &str| -> Vec<u32> {
        r[k].as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect()
    };
    let (prompt, greedy) = (ids("prompt"), ids("greedy"));
    let file = cyb_format::open(&path).unwrap();
    let model = LlamaModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    let mut cache = model.new_cache(prompt.len() + greedy.len()).unwrap();
    let logits = model.forward(&prompt, &mut cache).unwrap();
    // Relative to the largest |logit|, over the 64 largest reference logits.
    let max_abs = r["max_abs_logit"].as_f64().unwrap() as f32;
    let worst = ids("top_ids")
        .iter()
        .zip(r["top_logits"].as_array().unwrap())
        .map(|(&i, want)| (logits[i as usize] - want.as_f64().unwrap() as f32).abs())
        .fold(0f32, f32::max)
        / max_abs;
    eprintln!("SmolLM2 Q4_1 last-position logits: max rel err {worst:.2e}");
    assert!(worst <= 1e-4, "{worst}");
    let argmax = |v: &[f32]| (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b }) as u32;
    let mut tokens = vec![argmax(&logits)];
    while tokens.len() < greedy.len() {
        let next = model
            .forward(&tokens[tokens.len() - 1..], &mut cache)
            .unwrap();
        tokens.push(argmax(&next));
    }
    assert_eq!(tokens, greedy);
}

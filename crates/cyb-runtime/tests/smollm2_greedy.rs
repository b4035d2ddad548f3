//! The real default model end to end: chat template, tokenizer, the LlamaStyle forward over the
//! Q4_1 GGUF and greedy sampling must reproduce Hugging Face transformers' greedy output on the
//! same file (tests/fixtures/smollm2/greedy.json, made by tools/fixtures/make_smollm2_greedy.py).
//!
//! Without the model file the test is skipped, except under CI (env `CI` set), where it fails.

use cyb_runtime::{ChatMessage, ExecPath, Runtime, RuntimeOptions, SamplingParams};
use serde_json::Value;
use std::path::Path;

mod common;

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id list")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn greedy_output_equals_transformers() {
    check("reference", usize::MAX, usize::MAX);
}

/// The wgpu backend (lavapipe in CI: slow, so only the first case's first 16 tokens; every case
/// and token with `CYB_TEST_WGPU_FULL=1`, for a real GPU) gives the same greedy tokens; its
/// decode steps pick the token on the device (`forward_argmax`).
#[test]
fn greedy_output_on_wgpu_equals_transformers() {
    if std::env::var("CYB_TEST_WGPU_FULL").is_ok_and(|v| v == "1") {
        check("wgpu", usize::MAX, usize::MAX);
    } else {
        check("wgpu", 1, 16);
    }
}

/// The graph path (`--path graph`: the LlamaStyle graph template run by the graph executor)
/// on the CPU reference gives transformers' greedy tokens too (first two cases).
#[test]
fn greedy_output_through_the_graph_path_equals_transformers() {
    check_path("reference", ExecPath::Graph, 2, usize::MAX);
}

fn check(backend: &str, max_cases: usize, max_tokens: usize) {
    check_path(backend, ExecPath::Auto, max_cases, max_tokens);
}

fn check_path(backend: &str, path_kind: ExecPath, max_cases: usize, max_tokens: usize) {
    let Some(path) = common::smollm2() else {
        return;
    };
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/smollm2/greedy.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    // The CPU reference computes in f32 like transformers; the fast `cpu` backend quantizes
    // activations to 8 bits inside matmuls (as llama.cpp does) and is checked against
    // llama.cpp instead (crates/cyb-cpu/tests).
    let rt = Runtime::new(RuntimeOptions {
        backend: Some(backend.into()),
        path: path_kind,
        ..RuntimeOptions::default()
    })
    .unwrap();
    let model = rt.load(&path).unwrap();
    let n_new = (doc["max_new_tokens"].as_u64().unwrap() as usize).min(max_tokens);

    for case in doc["cases"].as_array().unwrap().iter().take(max_cases) {
        // The prompt text: our chat template must render what transformers rendered.
        let text = if let Some(chat) = case["prompt"]["chat"].as_array() {
            let msgs: Vec<ChatMessage> = chat
                .iter()
                .map(|m| {
                    ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap())
                })
                .collect();
            model.render_chat(&msgs, true).unwrap()
        } else {
            case["prompt"]["raw"].as_str().unwrap().to_string()
        };
        assert_eq!(text, case["text"].as_str().unwrap());
        let prompt = model.tokenizer().encode(&text, false).unwrap();
        assert_eq!(prompt, ids(&case["prompt_ids"]), "prompt ids for {text:?}");

        // Greedy decoding past EOS, as the reference was generated.
        let mut want = ids(&case["generated_ids"]);
        want.truncate(n_new);
        let mut session = model.generator(Some(256)).unwrap();
        let params = SamplingParams {
            max_tokens: Some(n_new),
            ignore_eos: true,
            ..SamplingParams::greedy()
        };
        let got: Vec<u32> = session
            .generate(&prompt, params)
            .unwrap()
            .filter_map(|p| p.unwrap().token)
            .collect();
        assert_eq!(
            got,
            want,
            "{backend}: greedy tokens for {text:?}: got {:?}",
            model.tokenizer().decode(&got, false)
        );
    }
}

//! Vision-language generation against transformers, on the tiny random-weight LLaVA of
//! tests/fixtures/vlm (tools/fixtures/make_vlm_fixtures.py, with transformers' own processor):
//! the rendered prompt, the expanded ids, the last position's log-probabilities and 32 greedy
//! tokens, for one image and for two.

use cyb_runtime::{
    ChatMessage, ContentPart, FinishReason, Runtime, RuntimeOptions, SamplingParams,
};
use serde_json::Value;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn reference(family: &str) -> Value {
    let p = fixtures().join(format!("vlm/{family}/reference.json"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn image(name: &str) -> cyb_media::image::RgbImage {
    cyb_runtime::vision::load_image(&fixtures().join(format!("images/{name}"))).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn runtime() -> Runtime {
    Runtime::new(RuntimeOptions {
        backend: Some("cpu".into()),
        ..Default::default()
    })
    .unwrap()
}

/// The reference's messages as the runtime's (image parts in their places).
fn messages(v: &Value) -> Vec<ChatMessage> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let parts = m["content"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| match p["type"].as_str().unwrap() {
                    "image" => ContentPart::Image,
                    _ => ContentPart::Text(p["text"].as_str().unwrap().to_string()),
                })
                .collect();
            ChatMessage {
                role: m["role"].as_str().unwrap().to_string(),
                parts: Some(parts),
                ..ChatMessage::default()
            }
        })
        .collect()
}

fn log_softmax(x: &[f32]) -> Vec<f32> {
    let m = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let s: f64 = x.iter().map(|&v| ((v - m) as f64).exp()).sum();
    x.iter().map(|&v| v - m - s.ln() as f32).collect()
}

#[test]
fn llava_matches_transformers() {
    let r = reference("llava");
    let rt = runtime();
    let model = rt.load(fixtures().join("vlm/llava")).unwrap();
    assert!(model.takes_images());
    for case in ["one", "two"] {
        let c = &r[case];
        let text = model.render_chat(&messages(&c["messages"]), true).unwrap();
        assert_eq!(
            text,
            c["prompt"].as_str().unwrap(),
            "{case}: rendered prompt"
        );
        let prompt = model.prompt_ids(&text, false).unwrap();
        let images: Vec<_> = r["images"][case]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| image(n.as_str().unwrap()))
            .collect();
        let mut session = model.generator(None).unwrap();
        let params = SamplingParams {
            temperature: 0.0,
            max_tokens: Some(32),
            ignore_eos: true,
            ..SamplingParams::default()
        };
        let mut gen = session
            .generate_with_images(&prompt, &images, params)
            .unwrap()
            .with_logprobs(5);
        let mut got = Vec::new();
        let mut first = None;
        while let Some(p) = gen.next() {
            let p = p.unwrap();
            if let Some(t) = p.token {
                got.push(t);
                if first.is_none() {
                    first = gen.last_logprobs().cloned();
                }
            }
        }
        assert_eq!(gen.finish_reason(), Some(FinishReason::Length));
        assert_eq!(
            gen.metrics().prompt_tokens,
            c["input_ids"].as_array().unwrap().len(),
            "{case}: expanded prompt length"
        );
        drop(gen);
        assert_eq!(
            &session.tokens()[..c["input_ids"].as_array().unwrap().len()],
            ids(&c["input_ids"]).as_slice(),
            "{case}: expanded ids"
        );
        let want: Vec<f32> = c["last_logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let want = log_softmax(&want);
        let first = first.unwrap();
        assert_eq!(first.top.len(), 5);
        for &(id, lp) in &first.top {
            let w = want[id as usize];
            assert!((lp - w).abs() < 1e-4, "{case}: logprob of {id} {lp} vs {w}");
        }
        assert_eq!(got, ids(&c["greedy"]), "{case}: greedy tokens");
    }
}

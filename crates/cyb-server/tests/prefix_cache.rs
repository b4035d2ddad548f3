//! Prefix cache on the default model (SmolLM2-135M-Instruct Q4_1): a second request that
//! shares a ~500-token system prompt reuses the first one's KV cache, so its time to first
//! token is at least 5x shorter. Skipped when the model is absent, except under CI.

mod common;

use common::*;
use cyb_server::ServerConfig;
use serde_json::{json, Value};
use std::time::Instant;

/// Time to the first non-empty content delta, and the final usage.
async fn ttft(url: &str, body: &Value) -> (f64, Value) {
    let t0 = Instant::now();
    let mut r = client().post(url).json(body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let mut body = String::new();
    let mut first = None;
    let mut reads = 0;
    while let Some(c) = r.chunk().await.unwrap() {
        body.push_str(std::str::from_utf8(&c).unwrap());
        if first.is_none() && !chat_text(&sse_events(&body)).is_empty() {
            first = Some(t0.elapsed().as_secs_f64() * 1e3);
        }
        reads += 1;
        assert!(reads < 10_000);
    }
    let events = sse_events(&body);
    let usage = events[events.len() - 2]["usage"].clone();
    (first.expect("no content"), usage)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_system_prompt_cuts_time_to_first_token() {
    let path = cyb_runtime::default_model_path();
    if !path.is_file() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must fetch the default model first (tools/fetch_smollm2.sh)"
        );
        eprintln!(
            "skipped: {} is absent (bash tools/fetch_smollm2.sh)",
            path.display()
        );
        return;
    }
    let s = start(
        vec![("smollm2", path)],
        ServerConfig {
            parallel: 2,
            ctx: Some(1024),
            ..ServerConfig::default()
        },
    )
    .await;
    let url = s.url("/v1/chat/completions");
    let system =
        "You are a careful assistant for a library. Answer questions about opening hours, \
                  loans, renewals, fines, study rooms and events. Keep answers short and polite. "
            .repeat(15);
    let ask = |q: &str| {
        json!({
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": q}],
            "temperature": 0, "max_tokens": 4, "stream": true,
        })
    };
    let (first, u1) = ttft(&url, &ask("When do you open on Sunday?")).await;
    let (second, u2) = ttft(&url, &ask("Can I renew a loan online?")).await;
    let prompt = u2["prompt_tokens"].as_u64().unwrap();
    let cached = u2["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    eprintln!(
        "prefix cache: prompt {} tokens; ttft first {first:.1} ms, second {second:.1} ms ({cached} cached) = {:.1}x",
        prompt,
        first / second
    );
    assert_eq!(u1["prompt_tokens_details"]["cached_tokens"], 0);
    assert!(
        prompt >= 450,
        "the system prompt should be ~500 tokens, got {prompt}"
    );
    assert!(
        cached + 20 >= prompt,
        "only {cached} of {prompt} tokens were reused"
    );
    assert!(
        first / second >= 5.0,
        "ttft {first:.1} ms then {second:.1} ms"
    );
    s.stop().await;
}

//! Concurrency: parallel streams (batched in shared steps) equal their solo runs, a full queue answers 429, clients
//! that hang up free their sessions, and shutdown drains streams in flight. All traffic is
//! on 127.0.0.1; every loop is bounded.

mod common;

use common::*;
use cyb_server::ServerConfig;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn long_request(seed: u64, stream: bool) -> Value {
    json!({
        "model": "tiny",
        "messages": [{"role": "user", "content": format!("Tell me a story number {seed}")}],
        "temperature": 1.0,
        "seed": seed,
        "max_tokens": 200,
        "ignore_eos": true,
        "stream": stream,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_streams_equal_solo_runs() {
    let s = start_tiny(ServerConfig {
        parallel: 4,
        queue: 64,
        ..ServerConfig::default()
    })
    .await;
    let url = s.url("/v1/chat/completions");
    let n = 32u64;
    let tasks: Vec<_> = (0..n)
        .map(|seed| {
            let url = url.clone();
            tokio::spawn(async move { chat_text(&stream(&url, &long_request(seed, true)).await) })
        })
        .collect();
    let mut together = Vec::new();
    for t in tasks {
        together.push(t.await.unwrap());
    }
    // The streams advanced together: shared steps took several sequences.
    let batched = metric(&s, "cyb_batch_max_sequences{model=\"tiny\"}").await;
    assert_eq!(batched, 4.0);
    let steps = metric(&s, "cyb_batch_steps_total{model=\"tiny\"}").await;
    let seqs = metric(&s, "cyb_batch_sequences_total{model=\"tiny\"}").await;
    assert!(seqs > 2.0 * steps, "{seqs} sequence-steps in {steps} steps");
    for seed in 0..n {
        let alone = chat_text(&stream(&url, &long_request(seed, true)).await);
        assert!(!alone.is_empty());
        assert_eq!(together[seed as usize], alone, "seed {seed}");
    }
    assert_eq!(metric(&s, "cyb_active_sessions").await, 0.0);
    s.stop().await;
}

/// A sampled request with logprobs: its text and logprobs.
async fn text_and_logprobs(url: &str, prompt: &str, seed: u64) -> (String, Value) {
    let body = json!({
        "model": "tiny",
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0.9,
        "seed": seed,
        "max_tokens": 40,
        "ignore_eos": true,
        "logprobs": true,
        "top_logprobs": 3,
    });
    let (status, v) = post(url, &body).await;
    assert_eq!(status, 200, "{v}");
    let choice = &v["choices"][0];
    let text = choice["message"]["content"].as_str().unwrap().to_string();
    (text, choice["logprobs"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batch_invariant_results_do_not_depend_on_the_load() {
    let mut cpu = cyb_runtime::CpuOptions::from_env().unwrap();
    cpu.batch_invariant = true;
    let options = cyb_runtime::RuntimeOptions {
        cpu: Some(cpu),
        ..cyb_runtime::RuntimeOptions::default()
    };
    let config = ServerConfig {
        parallel: 6,
        queue: 64,
        ..ServerConfig::default()
    };
    let s = start_with(vec![("tiny", fixture("tiny_chat/hf"))], config, options).await;
    let url = s.url("/v1/chat/completions");
    let prompts = [
        ("Hello there", 7u64),
        ("Write a long poem about the sea and the wind", 11),
        ("Why?", 3),
        ("List three colours, then three animals", 42),
    ];
    let mut alone = Vec::new();
    for (p, seed) in prompts {
        alone.push(text_and_logprobs(&url, p, seed).await);
    }
    // Twelve copies, mixed, at once: prompts of different lengths share steps with decodes.
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let url = url.clone();
            let (p, seed) = prompts[(i * 3) % 4];
            tokio::spawn(async move { (i, text_and_logprobs(&url, p, seed).await) })
        })
        .collect();
    for t in tasks {
        let (i, got) = t.await.unwrap();
        let want = &alone[(i * 3) % 4];
        assert_eq!(got.0, want.0, "copy {i}: text");
        assert_eq!(got.1, want.1, "copy {i}: logprobs");
    }
    let seqs = metric(&s, "cyb_batch_max_sequences{model=\"tiny\"}").await;
    assert!(seqs >= 3.0, "at most {seqs} sequences shared a step");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn full_queue_answers_429() {
    let s = start_tiny(ServerConfig {
        parallel: 1,
        queue: 1,
        ..ServerConfig::default()
    })
    .await;
    let url = s.url("/v1/chat/completions");
    let tasks: Vec<_> = (0..32)
        .map(|seed| {
            let url = url.clone();
            tokio::spawn(async move { post(&url, &long_request(seed, false)).await })
        })
        .collect();
    let (mut ok, mut busy) = (0, 0);
    for t in tasks {
        let (status, v) = t.await.unwrap();
        match status {
            200 => ok += 1,
            429 => {
                busy += 1;
                assert_eq!(v["error"]["type"], "rate_limit_error");
                assert_eq!(v["error"]["code"], "rate_limit_exceeded");
            }
            other => panic!("unexpected status {other}: {v}"),
        }
    }
    assert!(
        ok >= 2,
        "at most one runs and one waits, but some must finish ({ok})"
    );
    assert!(
        busy >= 1,
        "32 requests at once on 1 slot + 1 queue place gave no 429"
    );
    let text = client()
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("status=\"429\""));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disconnected_clients_free_their_sessions() {
    let s = start_tiny(ServerConfig {
        parallel: 2,
        queue: 32,
        ..ServerConfig::default()
    })
    .await;
    let url = s.url("/v1/chat/completions");
    let tasks: Vec<_> = (0..16)
        .map(|seed| {
            let url = url.clone();
            tokio::spawn(async move {
                let mut r = client()
                    .post(&url)
                    .json(&long_request(seed, true))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status().as_u16(), 200);
                // One chunk, then hang up.
                let first = r.chunk().await.unwrap();
                assert!(first.is_some());
                drop(r);
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let active = metric(&s, "cyb_active_sessions").await;
        let queued = metric(&s, "cyb_queue_depth").await;
        if active == 0.0 && queued == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{active} sessions still active, {queued} queued"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Still serving, and the sessions went back to the pool (at most `parallel` idle).
    let (st, _) = post(
        &url,
        &json!({"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 5}),
    )
    .await;
    assert_eq!(st, 200);
    assert!(metric(&s, "cyb_idle_sessions").await <= 2.0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_drains_streams_in_flight() {
    let mut s = start_tiny(ServerConfig::default()).await;
    let url = s.url("/v1/chat/completions");
    let mut r = client()
        .post(&url)
        .json(&long_request(3, true))
        .send()
        .await
        .unwrap();
    let mut body = String::from_utf8(r.chunk().await.unwrap().unwrap().to_vec()).unwrap();
    s.signal_shutdown();
    // The stream in flight runs to its end.
    let mut reads = 0;
    while let Some(c) = r.chunk().await.unwrap() {
        body.push_str(std::str::from_utf8(&c).unwrap());
        reads += 1;
        assert!(reads < 10_000);
    }
    let events = sse_events(&body);
    assert_eq!(events.last().unwrap(), "[DONE]");
    assert_eq!(events[events.len() - 2]["usage"]["completion_tokens"], 200);
    s.join().await.unwrap();
}

/// Speculative decoding in the server (prompt lookup): greedy answers equal the plain
/// server's, the draft counters move, and a draft with batching on is refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drafting_server_answers_as_a_plain_one() {
    let body = json!({
        "model": "tiny",
        "messages": [{"role": "user", "content": "red green blue red green blue red green"}],
        "temperature": 0,
        "max_tokens": 40,
        "ignore_eos": true,
    });
    let plain = start_tiny(ServerConfig::default()).await;
    let (code, want) = post(&plain.url("/v1/chat/completions"), &body).await;
    assert_eq!(code, 200, "{want}");
    plain.stop().await;
    let s = start_tiny(ServerConfig {
        batch_tokens: 0,
        draft: Some((cyb_runtime::Drafter::Lookup, 6)),
        ..ServerConfig::default()
    })
    .await;
    for _ in 0..2 {
        let (code, got) = post(&s.url("/v1/chat/completions"), &body).await;
        assert_eq!(code, 200, "{got}");
        assert_eq!(
            got["choices"][0]["message"]["content"],
            want["choices"][0]["message"]["content"]
        );
    }
    let proposed = metric(&s, "cyb_draft_tokens_total{result=\"proposed\"}").await;
    let accepted = metric(&s, "cyb_draft_tokens_total{result=\"accepted\"}").await;
    assert!(
        proposed > 0.0 && accepted <= proposed,
        "{proposed} {accepted}"
    );
    s.stop().await;

    let rt = cyb_runtime::Runtime::new(Default::default()).unwrap();
    let served = || {
        vec![cyb_server::ServedModel {
            id: "tiny".into(),
            model: rt.load(fixture("tiny_chat/hf")).unwrap(),
            source: None,
        }]
    };
    let batched = ServerConfig {
        draft: Some((cyb_runtime::Drafter::Lookup, 6)),
        ..ServerConfig::default()
    };
    let err = cyb_server::router(served(), batched).err().unwrap();
    assert!(err.contains("--batch-tokens 0"), "{err}");
    let too_many = ServerConfig {
        batch_tokens: 0,
        draft: Some((cyb_runtime::Drafter::Lookup, 1000)),
        ..ServerConfig::default()
    };
    assert!(cyb_server::router(served(), too_many).is_err());
}

//! Endpoints and error answers of the server over the tiny chat fixture, checked against
//! transformers' greedy output recorded in tests/fixtures/tiny_chat/reference.json.

mod common;

use common::*;
use cyb_server::ServerConfig;
use serde_json::{json, Value};

fn reference() -> Value {
    let path = fixture("tiny_chat/reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// transformers' greedy answer up to (not including) the end-of-turn token.
fn greedy_answer(case: &str) -> String {
    let r = reference();
    let pieces = r[case]["greedy_stop_at_eos"]["pieces"]
        .as_array()
        .unwrap()
        .clone();
    let n = pieces.len() - 1;
    pieces[..n].iter().map(|p| p.as_str().unwrap()).collect()
}

#[tokio::test]
async fn chat_matches_transformers_greedy_streamed_or_not() {
    let s = start_tiny(ServerConfig::default()).await;
    let r = reference();
    let url = s.url("/v1/chat/completions");
    for case in ["chat", "chat_next_turn"] {
        let body = json!({"model": "tiny", "messages": r[case]["messages"], "temperature": 0});
        let (status, v) = post(&url, &body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], "tiny");
        let choice = &v["choices"][0];
        assert_eq!(choice["message"]["role"], "assistant");
        assert_eq!(choice["message"]["content"], greedy_answer(case).as_str());
        assert_eq!(choice["finish_reason"], "stop");
        let prompt_len = r[case]["prompt_ids"].as_array().unwrap().len();
        assert_eq!(v["usage"]["prompt_tokens"], prompt_len);
        let n_answer = r[case]["greedy_stop_at_eos"]["ids"]
            .as_array()
            .unwrap()
            .len()
            - 1;
        assert_eq!(v["usage"]["completion_tokens"], n_answer);
        assert_eq!(v["usage"]["total_tokens"], prompt_len + n_answer);

        let mut body = body.clone();
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let events = stream(&url, &body).await;
        assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(events[0]["object"], "chat.completion.chunk");
        assert_eq!(chat_text(&events), greedy_answer(case));
        let n = events.len();
        assert_eq!(events[n - 1], "[DONE]");
        assert_eq!(events[n - 2]["choices"], json!([]));
        assert_eq!(events[n - 2]["usage"]["completion_tokens"], n_answer);
        assert_eq!(events[n - 3]["choices"][0]["finish_reason"], "stop");
        // One id for every chunk of the stream.
        let ids: std::collections::HashSet<_> = events[..n - 1]
            .iter()
            .map(|e| e["id"].to_string())
            .collect();
        assert_eq!(ids.len(), 1);
    }
    s.stop().await;
}

#[tokio::test]
async fn sampling_parameters_take_effect() {
    let s = start_tiny(ServerConfig::default()).await;
    let url = s.url("/v1/chat/completions");
    let msgs = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]);

    // max_tokens and max_completion_tokens end the answer with finish_reason "length".
    for field in ["max_tokens", "max_completion_tokens"] {
        let (st, v) = post(
            &url,
            &json!({"messages": msgs, "temperature": 0, "ignore_eos": true, field: 3}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["usage"]["completion_tokens"], 3);
    }

    // A stop string ends the text right before it, as a string or in a list.
    let base = json!({"messages": [{"role": "user", "content": "Hi there"}], "temperature": 0});
    let full = greedy_answer("chat");
    let cut = &full[..full.find('8').unwrap()];
    for stop in [json!("8"), json!(["zzz", "8"])] {
        let mut b = base.clone();
        b["stop"] = stop;
        let (st, v) = post(&url, &b).await;
        assert_eq!(st, 200);
        assert_eq!(v["choices"][0]["message"]["content"], cut);
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
    }

    // The same seed gives the same text; it is sampled (not greedy) text.
    let seeded = |seed: u64| json!({"messages": msgs, "temperature": 1.0, "top_p": 0.9, "seed": seed, "max_tokens": 24, "ignore_eos": true, "presence_penalty": 0.5, "frequency_penalty": 0.2});
    let (_, a) = post(&url, &seeded(11)).await;
    let (_, b) = post(&url, &seeded(11)).await;
    assert_eq!(
        a["choices"][0]["message"]["content"],
        b["choices"][0]["message"]["content"]
    );
    let mut distinct = std::collections::HashSet::new();
    for seed in 0..4 {
        let (_, v) = post(&url, &seeded(seed)).await;
        distinct.insert(v["choices"][0]["message"]["content"].to_string());
    }
    assert!(distinct.len() > 1, "four seeds gave one text");

    // Log-probabilities: one entry per token, the tokens spell the answer, the greedy token
    // is the most likely one.
    let (st, v) = post(&url, &json!({"messages": [{"role": "user", "content": "Hi there"}], "temperature": 0, "logprobs": true, "top_logprobs": 3})).await;
    assert_eq!(st, 200);
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(
        content.len(),
        v["usage"]["completion_tokens"].as_u64().unwrap() as usize
    );
    let spelled: String = content
        .iter()
        .map(|c| c["token"].as_str().unwrap())
        .collect();
    assert_eq!(spelled, full);
    for c in content {
        let top = c["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        assert_eq!(top[0]["token"], c["token"]);
        let lp = c["logprob"].as_f64().unwrap();
        assert!(lp < 0.0 && (lp - top[0]["logprob"].as_f64().unwrap()).abs() < 1e-6);
        assert!(top[1]["logprob"].as_f64().unwrap() <= lp);
    }
    s.stop().await;
}

#[tokio::test]
async fn text_completions_match_transformers() {
    let s = start_tiny(ServerConfig::default()).await;
    let r = reference();
    let url = s.url("/v1/completions");
    let expected = r["raw"]["greedy_ignore_eos"]["text"].as_str().unwrap();
    let n = r["raw"]["greedy_ignore_eos"]["ids"]
        .as_array()
        .unwrap()
        .len();
    let prompt = r["raw"]["text"].as_str().unwrap();
    for p in [
        json!(prompt),
        json!([prompt]),
        r["raw"]["prompt_ids"].clone(),
    ] {
        let (st, v) = post(
            &url,
            &json!({"prompt": p, "temperature": 0, "max_tokens": n, "ignore_eos": true}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0]["text"], expected);
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["usage"]["completion_tokens"], n);
    }
    // echo, logprobs and streaming.
    let body = json!({"prompt": prompt, "temperature": 0, "max_tokens": n, "ignore_eos": true, "echo": true, "logprobs": 2});
    let (_, v) = post(&url, &body).await;
    assert_eq!(v["choices"][0]["text"], format!("{prompt}{expected}"));
    assert_eq!(
        v["choices"][0]["logprobs"]["tokens"]
            .as_array()
            .unwrap()
            .len(),
        n
    );
    let mut body = body.clone();
    body["stream"] = json!(true);
    body["echo"] = json!(false);
    let events = stream(&url, &body).await;
    let text: String = events
        .iter()
        .filter_map(|e| e["choices"].get(0)?["text"].as_str())
        .collect();
    assert_eq!(text, expected);
    assert_eq!(events.last().unwrap(), "[DONE]");
    // The default max_tokens of text completions is 16, as in OpenAI's API.
    let (_, v) = post(&url, &json!({"prompt": prompt, "ignore_eos": true})).await;
    assert_eq!(v["usage"]["completion_tokens"], 16);
    s.stop().await;
}

#[tokio::test]
async fn models_health_metrics_and_several_models() {
    let s = start(
        vec![
            ("tiny", fixture("tiny_chat/hf")),
            ("tiny-gguf", fixture("tiny_chat/model-f32.gguf")),
        ],
        ServerConfig::default(),
    )
    .await;
    let c = client();
    let v: Value = c
        .get(s.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["object"], "list");
    let ids: Vec<_> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].clone())
        .collect();
    assert_eq!(ids, vec![json!("tiny"), json!("tiny-gguf")]);
    let h = c.get(s.url("/health")).send().await.unwrap();
    assert_eq!(h.status().as_u16(), 200);
    // Both models answer by id, and the GGUF one gives the same greedy text.
    let msgs = reference()["chat"]["messages"].clone();
    for id in ["tiny", "tiny-gguf"] {
        let (st, v) = post(
            &s.url("/v1/chat/completions"),
            &json!({"model": id, "messages": msgs, "temperature": 0}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["model"], id);
        assert_eq!(
            v["choices"][0]["message"]["content"],
            greedy_answer("chat").as_str()
        );
    }
    let text = c
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("cyb_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2"),
        "{text}"
    );
    assert!(text.contains("# TYPE cyb_active_sessions gauge"));
    assert!(metric(&s, "cyb_prompt_tokens_total").await >= 42.0);
    assert!(metric(&s, "cyb_completion_tokens_total").await >= 12.0);
    assert_eq!(metric(&s, "cyb_active_sessions").await, 0.0);
    assert_eq!(metric(&s, "cyb_queue_depth").await, 0.0);
    s.stop().await;
}

/// Every bad request is an OpenAI-style error with the right status, and the server keeps
/// answering afterwards.
#[tokio::test]
async fn errors_are_openai_objects_with_4xx() {
    let config = ServerConfig {
        max_body_bytes: 4096,
        max_tokens_limit: 100,
        ..ServerConfig::default()
    };
    let s = start_tiny(config).await;
    let chat = s.url("/v1/chat/completions");
    let hi = json!([{"role": "user", "content": "Hi"}]);
    let long_prompt = "word ".repeat(400);
    let cases: Vec<(Value, u16, Option<&str>, Option<&str>)> = vec![
        (
            json!({"model": "nope", "messages": hi}),
            404,
            Some("model"),
            Some("model_not_found"),
        ),
        (
            json!({"messages": hi, "temperature": -0.5}),
            400,
            Some("temperature"),
            None,
        ),
        (
            json!({"messages": hi, "temperature": 2.5}),
            400,
            Some("temperature"),
            None,
        ),
        (
            json!({"messages": hi, "top_p": 0.0}),
            400,
            Some("top_p"),
            None,
        ),
        (
            json!({"messages": hi, "top_p": 1.5}),
            400,
            Some("top_p"),
            None,
        ),
        (
            json!({"messages": hi, "presence_penalty": 3}),
            400,
            Some("presence_penalty"),
            None,
        ),
        (json!({"messages": hi, "n": 2}), 400, Some("n"), None),
        (
            json!({"messages": hi, "max_tokens": 0}),
            400,
            Some("max_tokens"),
            None,
        ),
        (
            json!({"messages": hi, "max_tokens": 101}),
            400,
            Some("max_tokens"),
            None,
        ),
        (
            json!({"messages": hi, "max_completion_tokens": -1}),
            400,
            Some("max_completion_tokens"),
            None,
        ),
        (
            json!({"messages": hi, "stop": ["a", "b", "c", "d", "e"]}),
            400,
            Some("stop"),
            None,
        ),
        (
            json!({"messages": hi, "top_logprobs": 5}),
            400,
            Some("top_logprobs"),
            None,
        ),
        (
            json!({"messages": hi, "logprobs": true, "top_logprobs": 21}),
            400,
            Some("top_logprobs"),
            None,
        ),
        (
            json!({"messages": hi, "temperature": "hot"}),
            400,
            None,
            None,
        ),
        (json!({"messages": []}), 400, Some("messages"), None),
        (
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            400,
            Some("messages"),
            None,
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            400,
            Some("messages"),
            None,
        ),
        (
            json!({"messages": hi, "tools": [{"type": "nope"}]}),
            400,
            Some("tools"),
            None,
        ),
        (
            json!({"messages": hi, "response_format": {"type": "xml"}}),
            400,
            Some("response_format"),
            None,
        ),
        (json!({"prompt_only": true}), 400, None, None),
        (
            json!({"messages": [{"role": "user", "content": long_prompt.chars().take(3000).collect::<String>()}]}),
            400,
            Some("messages"),
            Some("context_length_exceeded"),
        ),
    ];
    for (body, status, param, code) in cases {
        let (st, v) = post(&chat, &body).await;
        assert_eq!(st, status, "{body} -> {v}");
        let err = &v["error"];
        assert!(
            err["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{v}"
        );
        assert!(err["type"].is_string(), "{v}");
        assert_eq!(err["param"].as_str(), param, "{body} -> {v}");
        if let Some(code) = code {
            assert_eq!(err["code"], code, "{v}");
        }
    }
    let c = client();
    // Malformed JSON.
    let r = c
        .post(&chat)
        .header("content-type", "application/json")
        .body("{\"messages\": [")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    // A body over the limit.
    let big = json!({"messages": [{"role": "user", "content": "x".repeat(5000)}]});
    let r = c.post(&chat).json(&big).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 413);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "request_too_large");
    // Completions: prompt over the context, token ids outside the vocabulary.
    let comp = s.url("/v1/completions");
    let (st, v) = post(&comp, &json!({"prompt": "word ".repeat(300)})).await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (400, json!("context_length_exceeded"))
    );
    let (st, _) = post(&comp, &json!({"prompt": [1, 2, 99999]})).await;
    assert_eq!(st, 400);
    let (st, _) = post(&comp, &json!({"prompt": ["a", "b"]})).await;
    assert_eq!(st, 400);
    // Embeddings: a clear 400 naming the model.
    let (st, v) = post(
        &s.url("/v1/embeddings"),
        &json!({"model": "tiny", "input": "x"}),
    )
    .await;
    assert_eq!(st, 400);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("model tiny is not an embedding model"));
    // Unknown route and wrong method.
    let r = c.get(s.url("/v1/nothing")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert!(r.json::<Value>().await.unwrap()["error"].is_object());
    let r = c.get(&chat).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 405);
    // Still serving.
    let (st, _) = post(&chat, &json!({"messages": hi, "max_tokens": 4})).await;
    assert_eq!(st, 200);
    let text = c
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("cyb_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"}"));
    s.stop().await;
}

#[tokio::test]
async fn tool_conversations_render_and_answer() {
    let s = start_tiny(ServerConfig::default()).await;
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let messages = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
    ]);
    // A template that cannot render the conversation is the client's error, not a crash.
    let mut bad = messages.clone();
    bad[1]["content"] = Value::Null;
    let (st, v) = post(
        &s.url("/v1/chat/completions"),
        &json!({"messages": bad, "tools": tools}),
    )
    .await;
    assert_eq!(st, 400, "{v}");
    for stream_it in [false, true] {
        let body = json!({"messages": messages, "tools": tools, "max_tokens": 8, "seed": 1, "stream": stream_it});
        if stream_it {
            let events = stream(&s.url("/v1/chat/completions"), &body).await;
            assert_eq!(events.last().unwrap(), "[DONE]");
        } else {
            let (st, v) = post(&s.url("/v1/chat/completions"), &body).await;
            assert_eq!(st, 200, "{v}");
            assert!(v["choices"][0]["message"]["content"].is_string());
        }
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_shift_drops_the_oldest_turns() {
    // A conversation longer than the 256-token context: a 400 by default; with
    // `context_shift` the oldest turns go, the system message and the last question stay, and
    // the prompt leaves room for the answer.
    let mut messages = vec![json!({"role": "system", "content": "You are terse."})];
    for i in 0..12 {
        messages.push(json!({"role": "user", "content": format!("Question {i}: {}", "tell me more ".repeat(4))}));
        messages.push(
            json!({"role": "assistant", "content": format!("Answer {i}: {}", "fine ".repeat(4))}),
        );
    }
    messages.push(json!({"role": "user", "content": "The last question"}));
    let body = json!({
        "model": "tiny",
        "messages": messages,
        "max_tokens": 16,
        "temperature": 0,
    });
    for shift in [false, true] {
        let s = start_tiny(ServerConfig {
            ctx: Some(256),
            context_shift: shift,
            ..ServerConfig::default()
        })
        .await;
        let (status, v) = post(&s.url("/v1/chat/completions"), &body).await;
        if shift {
            assert_eq!(status, 200, "{v}");
            let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
            assert!(prompt + 16 <= 256, "{prompt} prompt tokens");
            assert!(prompt > 50, "more was dropped than needed: {prompt}");
        } else {
            assert_eq!(status, 400, "{v}");
        }
        s.stop().await;
    }
}

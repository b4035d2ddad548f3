//! `POST /v1/embeddings` over the tiny random-weight BERT (tests/fixtures/bert/bert, whose
//! reference.json holds transformers' mean-pooled vectors, made by
//! tools/fixtures/make_bert_fixtures.py), served beside the tiny chat model: every input form,
//! float and base64 encodings, usage, and the 400s for the wrong kind of model.

mod common;

use common::*;
use cyb_server::ServerConfig;
use serde_json::{json, Value};

fn reference() -> Value {
    let path = fixture("bert/bert/reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn close(a: &[f32], b: &[f32]) -> bool {
    let scale = b.iter().map(|x| x.abs()).fold(0f32, f32::max);
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-5 * scale)
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::new();
    for chunk in s.as_bytes().chunks(4) {
        let data: Vec<u8> = chunk.iter().copied().filter(|&c| c != b'=').collect();
        let n = data
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &c)| n | (u32::from(val(c)) << (18 - 6 * i)));
        for i in 0..data.len().saturating_sub(1) {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}

async fn start_both() -> TestServer {
    start(
        vec![
            ("bert", fixture("bert/bert")),
            ("tiny", fixture("tiny_chat/hf")),
        ],
        ServerConfig::default(),
    )
    .await
}

#[tokio::test]
async fn embeddings_in_every_input_form_and_encoding() {
    let s = start_both().await;
    let url = s.url("/v1/embeddings");
    let r = reference();
    let cases = r["texts"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let ids: Vec<Vec<u64>> = cases
        .iter()
        .map(|c| {
            c["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect()
        })
        .collect();
    let total: usize = ids.iter().map(Vec::len).sum();

    // An array of strings, floats: one vector per input in order, usage counts tokens.
    let (st, v) = post(&url, &json!({"model": "bert", "input": texts})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "bert");
    assert_eq!(v["usage"]["prompt_tokens"], total);
    assert_eq!(v["usage"]["total_tokens"], total);
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["object"], "embedding");
        assert_eq!(d["index"], i);
        assert!(
            close(&floats(&d["embedding"]), &floats(&cases[i]["mean"])),
            "{i}"
        );
    }

    // One string, base64: the little-endian f32 bytes of the same vector.
    let body = json!({"model": "bert", "input": texts[1], "encoding_format": "base64"});
    let (st, v) = post(&url, &body).await;
    assert_eq!(st, 200, "{v}");
    let bytes = base64_decode(v["data"][0]["embedding"].as_str().unwrap());
    let got: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert!(close(&got, &floats(&cases[1]["mean"])));

    // Token arrays (one, and several), and the normalize extension.
    let (st, v) = post(&url, &json!({"model": "bert", "input": ids[2]})).await;
    assert_eq!(st, 200, "{v}");
    assert!(close(
        &floats(&v["data"][0]["embedding"]),
        &floats(&cases[2]["mean"])
    ));
    let body = json!({"model": "bert", "input": ids, "normalize": true});
    let (st, v) = post(&url, &body).await;
    assert_eq!(st, 200, "{v}");
    for (i, d) in v["data"].as_array().unwrap().iter().enumerate() {
        let want = floats(&cases[i]["mean_normalized"]);
        assert!(close(&floats(&d["embedding"]), &want), "{i}");
    }
    s.stop().await;
}

#[tokio::test]
async fn wrong_kind_of_model_and_bad_inputs_are_400s() {
    let s = start_both().await;
    let url = s.url("/v1/embeddings");
    let message = |v: &Value| v["error"]["message"].as_str().unwrap_or("").to_string();
    // A text generator cannot embed; an encoder cannot chat or complete.
    let (st, v) = post(&url, &json!({"model": "tiny", "input": "x"})).await;
    assert_eq!(st, 400);
    assert!(
        message(&v).contains("model tiny is not an embedding model"),
        "{v}"
    );
    let hi = json!([{"role": "user", "content": "hi"}]);
    let (st, v) = post(
        &s.url("/v1/chat/completions"),
        &json!({"model": "bert", "messages": hi}),
    )
    .await;
    assert_eq!(st, 400);
    assert!(message(&v).contains("embedding (encoder) model"), "{v}");
    let (st, _) = post(
        &s.url("/v1/completions"),
        &json!({"model": "bert", "prompt": "hi"}),
    )
    .await;
    assert_eq!(st, 400);
    // The chat model still chats.
    let (st, v) = post(
        &s.url("/v1/chat/completions"),
        &json!({"model": "tiny", "messages": hi, "max_tokens": 2}),
    )
    .await;
    assert_eq!(st, 200, "{v}");

    let long = "cat ".repeat(60);
    for (body, want) in [
        (json!({"model": "bert"}), "required"),
        (json!({"model": "bert", "input": []}), "empty"),
        (json!({"model": "bert", "input": ""}), "empty"),
        (json!({"model": "bert", "input": ["a", 3]}), "must be"),
        (json!({"model": "bert", "input": [[2, -1]]}), "integers"),
        (
            json!({"model": "bert", "input": [[2, 99999]]}),
            "vocabulary",
        ),
        (
            json!({"model": "bert", "input": "a", "encoding_format": "hex"}),
            "base64",
        ),
        (
            json!({"model": "bert", "input": "a", "dimensions": 7}),
            "dimensional",
        ),
        (
            json!({"model": "bert", "input": "a", "pooling": "sum"}),
            "pooling",
        ),
        (json!({"model": "bert", "input": long}), "at most"),
    ] {
        let (st, v) = post(&url, &body).await;
        assert_eq!(st, 400, "{body}: {v}");
        assert!(message(&v).contains(want), "{body}: {v}");
    }
    let (st, v) = post(
        &url,
        &json!({"model": "bert", "input": long, "truncate": true}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], 40);
    s.stop().await;
}

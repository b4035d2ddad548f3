//! LoRA adapters in the server: requests choose each adapter's scale (`"lora": [{"id",
//! "scale"}]`, unlisted adapters at 0), the answers equal PEFT's greedy continuation with the
//! adapter and transformers' without it (tests/fixtures/lora, tests/fixtures/tiny_chat), and a
//! session cached under one set of scales is not reused for another.

mod common;

use common::*;
use cyb_server::ServerConfig;
use serde_json::{json, Value};

fn json_file(rel: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(rel)).unwrap()).unwrap()
}

fn joined(pieces: &Value) -> String {
    pieces
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn requests_choose_adapter_scales() {
    let lora = [cyb_runtime::Lora {
        path: fixture("lora/tiny_chat_peft"),
        scale: 1.0,
    }];
    let s = start_with_lora(
        "tiny",
        fixture("tiny_chat/hf"),
        &lora,
        ServerConfig::default(),
    )
    .await;
    let raw = &json_file("tiny_chat/reference.json")["raw"];
    let with =
        joined(&json_file("lora/reference.json")["tiny_chat"]["greedy_ignore_eos"]["pieces"]);
    let without = joined(&raw["greedy_ignore_eos"]["pieces"]);
    assert_ne!(with, without);
    let url = s.url("/v1/completions");
    let body = |lora: Value| {
        let mut b = json!({"model": "tiny", "prompt": raw["text"], "max_tokens": 24,
                           "temperature": 0, "ignore_eos": true});
        if !lora.is_null() {
            b["lora"] = lora;
        }
        b
    };
    // The default scale, scale 0, the adapter again (a cached session of other scales must
    // not serve its prefix), and an empty list (every adapter off).
    for (lora, want) in [
        (Value::Null, &with),
        (json!([{"id": 0, "scale": 0.0}]), &without),
        (json!([{"id": 0, "scale": 1.0}]), &with),
        (json!([]), &without),
    ] {
        let (status, v) = post(&url, &body(lora.clone())).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["choices"][0]["text"], want.as_str(), "lora {lora}");
    }
    for bad in [
        json!([{"id": 1, "scale": 1.0}]),
        json!([{"id": -1, "scale": 1.0}]),
    ] {
        let (status, v) = post(&url, &body(bad)).await;
        assert_eq!(status, 400, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("LoRA"),
            "{v}"
        );
    }
    let list = get_json(&s.url("/lora-adapters")).await;
    assert_eq!(list[0]["id"], 0);
    assert_eq!(list[0]["model"], "tiny");
    assert_eq!(list[0]["scale"], 1.0);
    assert!(list[0]["path"]
        .as_str()
        .unwrap()
        .ends_with("tiny_chat_peft"));
    s.stop().await;
}

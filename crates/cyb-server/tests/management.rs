//! Models loaded and unloaded at run time (`/v1/models/load`, `/v1/models/unload`, idle
//! unload, the memory budget) and idle sessions saved to and restored from disk (`/slots`).

mod common;

use common::*;
use cyb_server::ServerConfig;
use serde_json::{json, Value};
use std::time::Duration;

fn tiny_path() -> String {
    fixture("tiny_chat/hf").display().to_string()
}

fn gguf_path() -> String {
    fixture("tiny_chat/model-f32.gguf").display().to_string()
}

async fn chat(s: &TestServer, model: &str) -> (u16, Value) {
    post(
        &s.url("/v1/chat/completions"),
        &json!({
            "model": model,
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 6,
            "temperature": 0,
        }),
    )
    .await
}

async fn models(s: &TestServer) -> Vec<Value> {
    let v = get_json(&s.url("/v1/models")).await;
    v["data"].as_array().unwrap().clone()
}

async fn status_of(s: &TestServer, id: &str) -> Option<String> {
    models(s)
        .await
        .iter()
        .find(|m| m["id"] == id)
        .map(|m| m["status"].as_str().unwrap().to_string())
}

fn admin() -> ServerConfig {
    ServerConfig {
        model_admin: true,
        ..ServerConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_load_and_unload_at_run_time() {
    let s = start_managed(vec![("tiny", fixture("tiny_chat/hf"))], admin()).await;
    let (code, body) = post(
        &s.url("/v1/models/load"),
        &json!({"model": gguf_path(), "id": "gguf"}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["id"], "gguf");
    assert_eq!(body["already_loaded"], false);
    assert_eq!(status_of(&s, "gguf").await.as_deref(), Some("loaded"));
    let (code, answer) = chat(&s, "gguf").await;
    assert_eq!(code, 200, "{answer}");

    // A known model, named by its id or its file, loads nothing again.
    for again in [json!({"model": "gguf"}), json!({"model": gguf_path()})] {
        let (code, body) = post(&s.url("/v1/models/load"), &again).await;
        assert_eq!(
            (code, &body["already_loaded"]),
            (200, &json!(true)),
            "{body}"
        );
        assert_eq!(body["id"], "gguf");
    }
    // Another model under a taken id is a conflict.
    let (code, body) = post(
        &s.url("/v1/models/load"),
        &json!({"model": tiny_path(), "id": "gguf"}),
    )
    .await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["error"]["code"], "model_exists");
    let (code, body) = post(
        &s.url("/v1/models/load"),
        &json!({"model": tiny_path(), "id": "tiny-again"}),
    )
    .await;
    assert_eq!(code, 200, "{body}");

    let (code, body) = post(&s.url("/v1/models/unload"), &json!({"model": "gguf"})).await;
    assert_eq!((code, &body["was_loaded"]), (200, &json!(true)), "{body}");
    assert_eq!(status_of(&s, "gguf").await, None);
    assert_eq!(chat(&s, "gguf").await.0, 404);
    assert_eq!(chat(&s, "tiny").await.0, 200);
    assert_eq!(
        metric(&s, "cyb_model_unloads_total{reason=\"request\"}").await,
        1.0
    );
    assert_eq!(metric(&s, "cyb_model_loads_total").await, 2.0);

    // Files that are not models, and models that are not known.
    let (code, body) = post(
        &s.url("/v1/models/load"),
        &json!({"model": "/nonexistent/model.gguf"}),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["code"], "model_load_failed");
    let (code, _) = post(&s.url("/v1/models/unload"), &json!({"model": "nobody"})).await;
    assert_eq!(code, 404);
    let (code, _) = post(&s.url("/v1/models/load"), &json!({"model": ""})).await;
    assert_eq!(code, 400);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loading_models_is_off_unless_asked_for() {
    let s = start_managed(
        vec![("tiny", fixture("tiny_chat/hf"))],
        ServerConfig::default(),
    )
    .await;
    for (path, body) in [
        ("/v1/models/load", json!({"model": gguf_path()})),
        ("/v1/models/unload", json!({"model": "tiny"})),
    ] {
        let (code, body) = post(&s.url(path), &body).await;
        assert_eq!(code, 403, "{body}");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--model-admin"));
    }
    assert_eq!(status_of(&s, "tiny").await.as_deref(), Some("loaded"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_models_leave_memory_and_come_back_on_demand() {
    let s = start_managed(
        vec![("tiny", fixture("tiny_chat/hf"))],
        ServerConfig {
            idle_unload: Some(Duration::from_millis(300)),
            ..ServerConfig::default()
        },
    )
    .await;
    let (code, first) = chat(&s, "tiny").await;
    assert_eq!(code, 200, "{first}");
    let mut unloaded = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if status_of(&s, "tiny").await.as_deref() == Some("unloaded") {
            unloaded = true;
            break;
        }
    }
    assert!(unloaded, "the idle model stayed loaded");
    assert_eq!(metric(&s, "cyb_model_loaded{model=\"tiny\"}").await, 0.0);
    assert!(metric(&s, "cyb_model_unloads_total{reason=\"idle\"}").await >= 1.0);
    // The next request loads it again and gets the same greedy answer.
    let (code, again) = chat(&s, "tiny").await;
    assert_eq!(code, 200, "{again}");
    assert_eq!(
        again["choices"][0]["message"]["content"],
        first["choices"][0]["message"]["content"]
    );
    assert!(metric(&s, "cyb_model_loads_total").await >= 1.0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_budget_unloads_the_least_recently_used() {
    let size = |p: &str| std::fs::metadata(p).unwrap().len();
    let gguf = size(&gguf_path());
    let tiny: u64 = std::fs::read_dir(fixture("tiny_chat/hf"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    // Room for either model, not both.
    let budget = gguf.max(tiny) + gguf.min(tiny) / 2;
    let config = ServerConfig {
        memory_budget: Some(budget),
        ..admin()
    };
    let s = start_managed(vec![("tiny", fixture("tiny_chat/hf"))], config.clone()).await;
    let (code, body) = post(
        &s.url("/v1/models/load"),
        &json!({"model": gguf_path(), "id": "gguf"}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(status_of(&s, "tiny").await.as_deref(), Some("unloaded"));
    assert_eq!(status_of(&s, "gguf").await.as_deref(), Some("loaded"));
    assert_eq!(
        metric(&s, "cyb_model_unloads_total{reason=\"budget\"}").await,
        1.0
    );
    // Naming the unloaded one brings it back and sends the other out.
    assert_eq!(chat(&s, "tiny").await.0, 200);
    assert_eq!(status_of(&s, "gguf").await.as_deref(), Some("unloaded"));
    let text = client()
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains(&format!("cyb_model_memory_bytes{{model=\"tiny\"}} {tiny}")));
    s.stop().await;

    // Models that do not fit the budget at start are refused.
    let small = ServerConfig {
        memory_budget: Some(tiny / 2),
        ..ServerConfig::default()
    };
    let rt = cyb_runtime::Runtime::new(Default::default()).unwrap();
    let served = vec![cyb_server::ServedModel {
        id: "tiny".into(),
        model: rt.load(fixture("tiny_chat/hf")).unwrap(),
        source: None,
    }];
    let err = cyb_server::router(served, small).err().unwrap();
    assert!(err.contains("memory budget"), "{err}");
}

async fn slots(s: &TestServer) -> Vec<Value> {
    let v: Value = client()
        .get(s.url("/slots"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v.as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_save_to_disk_and_restore() {
    let dir = std::env::temp_dir().join(format!("cyb-slots-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let s = start_managed(
        vec![("tiny", fixture("tiny_chat/hf"))],
        ServerConfig {
            slot_save_path: Some(dir.clone()),
            ..ServerConfig::default()
        },
    )
    .await;
    let (code, first) = chat(&s, "tiny").await;
    assert_eq!(code, 200, "{first}");
    let listed = slots(&s).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let id = listed[0]["id"].as_u64().unwrap();
    let n_tokens = listed[0]["n_tokens"].as_u64().unwrap();
    assert!(n_tokens > 0);

    let action = |id: u64, action: &str| s.url(&format!("/slots/{id}?action={action}"));
    let (code, saved) = post(&action(id, "save"), &json!({"filename": "chat-1.bin"})).await;
    assert_eq!(code, 200, "{saved}");
    assert_eq!(saved["n_saved"].as_u64(), Some(n_tokens));
    assert!(dir.join("chat-1.bin").is_file());
    let (code, erased) = post(&action(id, "erase"), &json!({})).await;
    assert_eq!((code, erased["n_erased"].as_u64()), (200, Some(n_tokens)));
    assert!(slots(&s).await.is_empty());

    let (code, restored) = post(&action(7, "restore"), &json!({"filename": "chat-1.bin"})).await;
    assert_eq!(code, 200, "{restored}");
    assert_eq!(restored["n_restored"].as_u64(), Some(n_tokens));
    let listed = slots(&s).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], 7);
    assert_eq!(listed[0]["n_tokens"].as_u64(), Some(n_tokens));
    // The restored session serves the same conversation from its cache, with the same answer.
    let (code, again) = chat(&s, "tiny").await;
    assert_eq!(code, 200);
    assert!(again["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64() > Some(0));
    assert_eq!(
        again["choices"][0]["message"]["content"],
        first["choices"][0]["message"]["content"]
    );

    // Bad names, unknown ids, damaged files, unknown actions.
    for name in ["../escape.bin", ".hidden", "a/b", ""] {
        let (code, body) = post(&action(7, "save"), &json!({"filename": name})).await;
        assert_eq!(code, 400, "{name}: {body}");
    }
    let (code, _) = post(&action(999_999, "save"), &json!({"filename": "x.bin"})).await;
    assert_eq!(code, 404);
    std::fs::write(dir.join("broken.bin"), b"CYBSESS1 but not really").unwrap();
    let (code, body) = post(&action(8, "restore"), &json!({"filename": "broken.bin"})).await;
    assert_eq!(code, 400, "{body}");
    let (code, _) = post(&action(8, "restore"), &json!({"filename": "absent.bin"})).await;
    assert_eq!(code, 404);
    let (code, _) = post(&action(8, "shred"), &json!({})).await;
    assert_eq!(code, 400);
    let (code, _) = post(&s.url("/slots/x?action=save"), &json!({})).await;
    assert_eq!(code, 400);
    s.stop().await;

    // Without a folder the actions are off.
    let s = start_managed(
        vec![("tiny", fixture("tiny_chat/hf"))],
        ServerConfig::default(),
    )
    .await;
    let (code, body) = post(
        &s.url("/slots/0?action=save"),
        &json!({"filename": "x.bin"}),
    )
    .await;
    assert_eq!(code, 501, "{body}");
    s.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

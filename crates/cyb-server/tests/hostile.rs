//! Hostile chat templates: a template that loops for long or renders a huge prompt is refused
//! with a 400 naming the limit, while the server keeps answering other requests.

mod common;

use common::{client, fixture, post, start};
use cyb_server::ServerConfig;
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The tiny chat fixture with `template` as its chat template, in a fresh directory.
fn with_template(name: &str, template: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cyb-hostile-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(fixture("tiny_chat/hf")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    std::fs::write(dir.join("chat_template.jinja"), template).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_templates_get_400s_and_the_server_stays_up() {
    let looping = with_template(
        "loop",
        "{% for m in messages %}{% if m.content == 'loop' %}{% for a in range(10000) %}\
         {% for b in range(10000) %}{% for c in range(10000) %}{% endfor %}{% endfor %}\
         {% endfor %}{% endif %}<|user|>{{ m.content }}{% endfor %}<|assistant|>",
    );
    let bomb = with_template(
        "bomb",
        "{% for m in messages %}{% if m.content == 'bomb' %}{{ 'a' * 100000000 }}{% endif %}\
         <|user|>{{ m.content }}{% endfor %}<|assistant|>",
    );
    let server = start(
        vec![
            ("tiny", fixture("tiny_chat/hf")),
            ("loop", looping.clone()),
            ("bomb", bomb.clone()),
        ],
        ServerConfig::default(),
    )
    .await;
    let chat = |model: &str, content: &str| {
        json!({"model": model, "max_tokens": 4, "temperature": 0,
               "messages": [{"role": "user", "content": content}]})
    };

    // The looping request runs while /health and another model's chat are answered.
    let url = server.url("/v1/chat/completions");
    let hostile = {
        let url = url.clone();
        let body = chat("loop", "loop");
        tokio::spawn(async move {
            let t0 = Instant::now();
            let r = post(&url, &body).await;
            (r, t0.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    let t0 = Instant::now();
    let health = client().get(server.url("/health")).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let (status, body) = post(&url, &chat("tiny", "hello")).await;
    assert_eq!(status, 200, "{body}");
    let others = t0.elapsed();
    let ((status, body), hostile_time) = hostile.await.unwrap();
    assert_eq!(status, 400, "{body}");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("budget"), "{msg}");
    assert!(hostile_time < Duration::from_secs(30), "{hostile_time:?}");
    eprintln!("hostile template refused in {hostile_time:?}; others answered in {others:?}");

    // The same model still serves a conversation its template renders normally.
    let (status, body) = post(&url, &chat("loop", "hi")).await;
    assert_eq!(status, 200, "{body}");

    let (status, body) = post(&url, &chat("bomb", "bomb")).await;
    assert_eq!(status, 400, "{body}");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("exceeds"), "{msg}");

    server.stop().await;
    let _ = std::fs::remove_dir_all(looping);
    let _ = std::fs::remove_dir_all(bomb);
}

//! A server on 127.0.0.1 (a free port) over a fixture model, and small HTTP helpers.
#![allow(dead_code)]

use cyb_runtime::{Runtime, RuntimeOptions};
use cyb_server::{ServedModel, ServerConfig};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

pub struct TestServer {
    pub base: String,
    shutdown: Option<oneshot::Sender<()>>,
    handle: JoinHandle<std::io::Result<()>>,
}

/// Serves the tiny chat fixture as model id `tiny`.
pub async fn start_tiny(config: ServerConfig) -> TestServer {
    start(vec![("tiny", fixture("tiny_chat/hf"))], config).await
}

pub async fn start(models: Vec<(&str, PathBuf)>, config: ServerConfig) -> TestServer {
    start_with(models, config, RuntimeOptions::default()).await
}

/// As [`start`], with a loader, so models can be loaded at run time and loaded again after
/// an unload (each served model's source is its path).
pub async fn start_managed(models: Vec<(&str, PathBuf)>, config: ServerConfig) -> TestServer {
    let rt = std::sync::Arc::new(Runtime::new(RuntimeOptions::default()).unwrap());
    let served = models
        .into_iter()
        .map(|(id, path)| ServedModel {
            id: id.to_string(),
            model: rt.load(&path).unwrap(),
            source: Some(path.display().to_string()),
        })
        .collect();
    let loader: cyb_server::ModelLoader = std::sync::Arc::new(move |source: &str| {
        let path = PathBuf::from(source);
        let model = rt.load(&path).map_err(|e| e.to_string())?;
        Ok(ServedModel {
            id: path.file_name().unwrap().to_string_lossy().into_owned(),
            model,
            source: Some(source.to_string()),
        })
    });
    let app = cyb_server::router_with_loader(served, config, Some(loader)).unwrap();
    listen(app).await
}

/// As [`start`], the models loaded by a runtime with `options`.
pub async fn start_with(
    models: Vec<(&str, PathBuf)>,
    config: ServerConfig,
    options: RuntimeOptions,
) -> TestServer {
    let rt = Runtime::new(options).unwrap();
    let served = models
        .into_iter()
        .map(|(id, path)| ServedModel {
            id: id.to_string(),
            model: rt.load(path).unwrap(),
            source: None,
        })
        .collect();
    listen(cyb_server::router(served, config).unwrap()).await
}

/// As [`start`], one model loaded with LoRA adapters.
#[allow(dead_code)]
pub async fn start_with_lora(
    id: &str,
    path: PathBuf,
    lora: &[cyb_runtime::Lora],
    config: ServerConfig,
) -> TestServer {
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    let served = vec![ServedModel {
        id: id.to_string(),
        model: rt.load_with_lora(path, lora).unwrap(),
        source: None,
    }];
    listen(cyb_server::router(served, config).unwrap()).await
}

async fn listen(app: axum::Router) -> TestServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(cyb_server::serve(listener, app, async {
        let _ = rx.await;
    }));
    TestServer {
        base,
        shutdown: Some(tx),
        handle,
    }
}

impl TestServer {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Asks for a graceful shutdown and waits (bounded) for the server to return.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("server did not stop within 30 s")
            .unwrap()
            .unwrap();
    }

    pub fn signal_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    pub async fn join(self) -> std::io::Result<()> {
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("server did not stop within 30 s")
            .unwrap()
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .no_proxy()
        .build()
        .unwrap()
}

/// The JSON body of a GET of `url`.
pub async fn get_json(url: &str) -> Value {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

pub async fn post(url: &str, body: &Value) -> (u16, Value) {
    let r = client().post(url).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// The `data:` events of an SSE body, parsed; `[DONE]` becomes the string "[DONE]".
pub fn sse_events(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|d| {
            if d == "[DONE]" {
                Value::String("[DONE]".into())
            } else {
                serde_json::from_str(d).unwrap()
            }
        })
        .collect()
}

pub async fn stream(url: &str, body: &Value) -> Vec<Value> {
    let r = client().post(url).json(body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    sse_events(&r.text().await.unwrap())
}

/// The concatenated `delta.content` of chat chunks.
pub fn chat_text(events: &[Value]) -> String {
    events
        .iter()
        .filter_map(|e| e["choices"].get(0)?["delta"]["content"].as_str())
        .collect()
}

/// The value of an unlabelled metric.
pub async fn metric(server: &TestServer, name: &str) -> f64 {
    let text = client()
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("metric {name} missing in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

//! The router, the small endpoints, request accounting and graceful shutdown.

use crate::admission::Admission;
use crate::config::{ModelLoader, ServedModel, ServerConfig};
use crate::error::ApiError;
use crate::metrics::{Metrics, ModelGauge};
use crate::registry::Registry;
use crate::{admin, audio, chat, completions, embeddings, rerank, unix_now, vision, AppState};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use std::sync::Arc;

/// The application: every endpoint over `models`, none loaded at run time. Errors when there
/// is no model or two share an id.
pub fn router(models: Vec<ServedModel>, config: ServerConfig) -> Result<Router, String> {
    router_with_loader(models, config, None)
}

/// The application over `models`, loading more (and loading unloaded ones again) with
/// `loader`; starts the idle-unload sweep when `config.idle_unload` is set.
pub fn router_with_loader(
    models: Vec<ServedModel>,
    config: ServerConfig,
    loader: Option<ModelLoader>,
) -> Result<Router, String> {
    if models.is_empty() && config.vision.is_empty() {
        return Err("no model to serve".into());
    }
    let state = Arc::new(AppState {
        models: Registry::new(models, &config, loader)?,
        admission: Admission::new(config.parallel, config.queue),
        metrics: Metrics::default(),
        started: unix_now(),
        config: config.clone(),
    });
    if let Some(idle) = config.idle_unload {
        sweep_idle_models(Arc::downgrade(&state), idle);
    }
    Ok(Router::new()
        // Chat messages may carry images.
        .route(
            "/v1/chat/completions",
            post(chat::handle).layer(DefaultBodyLimit::max(
                config.max_image_bytes.max(config.max_body_bytes),
            )),
        )
        .route("/v1/completions", post(completions::handle))
        // Image inputs make embedding requests as large as the other image endpoints'.
        .route(
            "/v1/embeddings",
            post(embeddings::handle).layer(DefaultBodyLimit::max(
                config.max_image_bytes.max(config.max_body_bytes),
            )),
        )
        .route("/v1/rerank", post(rerank::handle))
        // Uploads have their own, larger body limit.
        .route(
            "/v1/audio/transcriptions",
            post(audio::transcriptions).layer(DefaultBodyLimit::max(config.max_audio_bytes)),
        )
        .route(
            "/v1/audio/translations",
            post(audio::translations).layer(DefaultBodyLimit::max(config.max_audio_bytes)),
        )
        .route(
            "/v1/detections",
            post(vision::detections).layer(DefaultBodyLimit::max(config.max_image_bytes)),
        )
        .route(
            "/v1/classifications",
            post(vision::classifications).layer(DefaultBodyLimit::max(config.max_image_bytes)),
        )
        .route("/v1/models", get(models_list))
        .route("/v1/models/load", post(admin::load))
        .route("/v1/models/unload", post(admin::unload))
        .route("/slots", get(admin::slots))
        .route("/lora-adapters", get(admin::lora_adapters))
        .route("/slots/{id}", post(admin::slot_action))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), account))
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .with_state(state))
}

/// Unloads idle models every so often on a thread of its own, until the server is gone.
fn sweep_idle_models(state: std::sync::Weak<AppState>, idle: std::time::Duration) {
    let period = (idle / 4).clamp(
        std::time::Duration::from_millis(50),
        std::time::Duration::from_secs(10),
    );
    let spawned = std::thread::Builder::new()
        .name("cyb-idle-unload".into())
        .spawn(move || loop {
            std::thread::sleep(period);
            let Some(state) = state.upgrade() else {
                return;
            };
            state.models.sweep_idle(idle, &state.metrics);
        });
    if let Err(e) = spawned {
        eprintln!("warning: no idle-unload thread ({e}); idle models stay loaded");
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then lets in-flight requests
/// (streams included) finish before returning.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// Counts every request by endpoint and status; unknown paths count as `other` so a
/// scanner cannot grow the label set.
async fn account(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    const KNOWN: [&str; 12] = [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/rerank",
        "/v1/audio/transcriptions",
        "/v1/audio/translations",
        "/v1/models",
        "/v1/models/load",
        "/v1/models/unload",
        "/slots",
        "/health",
        "/metrics",
    ];
    let path = req.uri().path();
    let endpoint = KNOWN
        .iter()
        .find(|k| **k == path)
        .copied()
        .unwrap_or("other");
    let resp = next.run(req).await;
    state
        .metrics
        .record_request(endpoint, resp.status().as_u16());
    resp
}

async fn models_list(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let mut data: Vec<_> = state
        .models
        .list()
        .into_iter()
        .map(|m| {
            let mut v = json!({
                "id": m.id,
                "object": "model",
                "created": state.started,
                "owned_by": "cyb-llm",
                "context_length": m.ctx,
                "status": if m.loaded { "loaded" } else { "unloaded" },
                "size_bytes": m.bytes,
            });
            // What a loaded model's chat messages may carry.
            if let Some(slot) = &m.slot {
                v["input_modalities"] = match slot.model.takes_images() {
                    true => json!(["text", "image"]),
                    false => json!(["text"]),
                };
            }
            v
        })
        .collect();
    data.extend(state.config.vision.iter().map(|v| {
        let task = match v.net {
            crate::VisionNet::Detector(_) => "detection",
            crate::VisionNet::Image(_) => "image",
        };
        json!({
            "id": v.id,
            "object": "model",
            "created": state.started,
            "owned_by": "cyb-llm",
            "task": task,
            "status": "loaded",
        })
    }));
    Json(json!({"object": "list", "data": data}))
}

async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let known = state.models.list();
    let loaded: Vec<_> = known.iter().filter_map(|m| m.slot.clone()).collect();
    let idle: usize = loaded.iter().map(|m| m.idle_sessions()).sum();
    let batches: Vec<(String, cyb_runtime::BatchStats)> = loaded
        .iter()
        .filter_map(|m| Some((m.id.clone(), m.batch_stats()?)))
        .collect();
    let gauges: Vec<ModelGauge> = known
        .into_iter()
        .map(|m| ModelGauge {
            id: m.id,
            loaded: m.loaded,
            bytes: m.bytes,
        })
        .collect();
    drop(loaded);
    let text = state
        .metrics
        .render(state.admission.queue_depth(), idle, &batches, &gauges);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found_route(uri.path())
}

async fn method_not_allowed(uri: Uri) -> ApiError {
    ApiError::not_found_route(uri.path())
        .with_status(StatusCode::METHOD_NOT_ALLOWED)
        .with_code("method_not_allowed")
}

/// Binds `host:port`, calls `on_listen` with the bound address (port 0 picks a free one),
/// then serves on a multi-threaded tokio runtime until Ctrl-C or SIGTERM, draining in-flight
/// requests before it returns. For programs without their own async runtime.
pub fn run_blocking(
    models: Vec<ServedModel>,
    config: ServerConfig,
    loader: Option<ModelLoader>,
    host: &str,
    port: u16,
    on_listen: impl FnOnce(std::net::SocketAddr),
) -> Result<(), String> {
    let app = router_with_loader(models, config, loader)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind((host, port))
            .await
            .map_err(|e| format!("cannot listen on {host}:{port}: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("cannot read the bound address: {e}"))?;
        on_listen(addr);
        serve(listener, app, shutdown_signal())
            .await
            .map_err(|e| format!("server error: {e}"))
    })
}

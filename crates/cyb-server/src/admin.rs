//! Models and sessions managed at run time: `POST /v1/models/load`, `POST /v1/models/unload`
//! (with `ServerConfig::model_admin`), `GET /slots` and `POST /slots/{id}?action=...` (idle
//! sessions saved to and restored from files in `ServerConfig::slot_save_path`, as
//! llama-server's slot actions).

use crate::error::ApiError;
use crate::request::parse_body;
use crate::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

#[derive(Deserialize)]
struct LoadRequest {
    /// A file, a Hugging Face directory or a hub name; or the id of a known model.
    model: String,
    /// The id clients will name it by (default: the file stem).
    id: Option<String>,
}

#[derive(Deserialize)]
struct UnloadRequest {
    model: String,
}

fn admin_allowed(state: &AppState) -> Result<(), ApiError> {
    if state.config.model_admin {
        return Ok(());
    }
    Err(ApiError::invalid(
        None,
        "loading and unloading models is off on this server; start cyb-llm serve with \
         --model-admin to allow it",
    )
    .with_status(StatusCode::FORBIDDEN)
    .with_code("model_admin_disabled"))
}

fn json_body<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = crate::sse::body_bytes(body)?;
    parse_body(&body)
}

pub async fn load(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    admin_allowed(&state)?;
    let req: LoadRequest = json_body(body)?;
    if req.model.trim().is_empty() || req.id.as_deref().is_some_and(|i| i.trim().is_empty()) {
        return Err(ApiError::invalid(
            "model",
            "\"model\" and \"id\" must not be empty",
        ));
    }
    let started = Instant::now();
    let (id, already) = state
        .models
        .load(&req.model, req.id, &state.metrics)
        .await?;
    Ok(Json(json!({
        "id": id,
        "status": "loaded",
        "already_loaded": already,
        "load_ms": started.elapsed().as_secs_f64() * 1e3,
    })))
}

pub async fn unload(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    admin_allowed(&state)?;
    let req: UnloadRequest = json_body(body)?;
    let was_loaded = state.models.unload(&req.model, &state.metrics)?;
    Ok(Json(json!({
        "id": req.model,
        "status": "unloaded",
        "was_loaded": was_loaded,
    })))
}

/// `GET /slots`: the idle sessions of the loaded models.
pub async fn slots(State(state): State<Arc<AppState>>) -> Json<Value> {
    let mut out = Vec::new();
    for slot in state.models.loaded() {
        for (id, n_tokens) in slot.idle_list() {
            out.push(json!({
                "id": id,
                "model": slot.id,
                "n_ctx": slot.ctx,
                "n_tokens": n_tokens,
                "is_processing": false,
            }));
        }
    }
    Json(Value::Array(out))
}

/// `GET /lora-adapters`: the LoRA adapters each loaded text generator applies, with their ids
/// (what a request's `lora` list names) and default scales.
pub async fn lora_adapters(State(state): State<Arc<AppState>>) -> Json<Value> {
    let mut out = Vec::new();
    for slot in state.models.loaded() {
        for (id, (path, scale)) in slot.model.lora_adapters().into_iter().enumerate() {
            out.push(json!({
                "id": id,
                "model": slot.id,
                "path": path.display().to_string(),
                "scale": scale,
            }));
        }
    }
    Json(Value::Array(out))
}

#[derive(Deserialize)]
pub struct ActionQuery {
    action: Option<String>,
}

#[derive(Deserialize, Default)]
struct SlotRequest {
    filename: Option<String>,
    /// The model whose session it is (default: the first text generator).
    model: Option<String>,
}

/// `POST /slots/{id}?action=save|restore|erase`.
pub async fn slot_action(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<ActionQuery>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let id: u64 = id.parse().map_err(|_| {
        ApiError::invalid(
            None,
            format!("slot id {id:?} is not a number; GET /slots lists them"),
        )
    })?;
    let body = crate::sse::body_bytes(body)?;
    let req: SlotRequest = if body.iter().all(u8::is_ascii_whitespace) {
        SlotRequest::default()
    } else {
        parse_body(&body)?
    };
    match query.action.as_deref() {
        Some("save") => save(&state, id, req).await,
        Some("restore") => restore(&state, id, req).await,
        Some("erase") => erase(&state, id),
        other => Err(ApiError::invalid(
            None,
            format!("action {other:?} is not one of save, restore, erase"),
        )),
    }
}

/// The session file `req.filename` names inside the save folder.
fn session_file(state: &AppState, req: &SlotRequest) -> Result<std::path::PathBuf, ApiError> {
    let dir = state.config.slot_save_path.as_ref().ok_or_else(|| {
        ApiError::invalid(
            None,
            "saving and restoring sessions is off on this server; start cyb-llm serve with \
             --slot-save-path DIR",
        )
        .with_status(StatusCode::NOT_IMPLEMENTED)
        .with_code("not_supported")
    })?;
    let name = req
        .filename
        .as_deref()
        .ok_or_else(|| ApiError::invalid("filename", "\"filename\" is missing"))?;
    let plain = !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !plain {
        return Err(ApiError::invalid(
            "filename",
            format!(
                "{name:?} is not a plain file name (letters, digits, '-', '_' and '.', not \
                 starting with '.')"
            ),
        ));
    }
    Ok(dir.join(name))
}

/// The loaded model whose idle session is `id`, and the session taken out of its pool.
fn take_session(
    state: &AppState,
    id: u64,
) -> Result<(Arc<crate::pool::ModelSlot>, cyb_runtime::Generator), ApiError> {
    for slot in state.models.loaded() {
        if let Some(session) = slot.take_idle(id) {
            return Ok((slot, session));
        }
    }
    Err(ApiError::invalid(
        None,
        format!("there is no idle session {id}; GET /slots lists them"),
    )
    .with_status(StatusCode::NOT_FOUND)
    .with_code("slot_not_found"))
}

async fn save(state: &AppState, id: u64, req: SlotRequest) -> Result<Json<Value>, ApiError> {
    let path = session_file(state, &req)?;
    let (slot, session) = take_session(state, id)?;
    let started = Instant::now();
    let note = slot.id.clone();
    let (session, result) = tokio::task::spawn_blocking(move || {
        let r = session.save_session(&path, note.as_bytes());
        (session, r)
    })
    .await
    .map_err(|e| ApiError::server(format!("the save task failed: {e}")))?;
    let n_saved = session.tokens().len();
    slot.checkin_as(id, session);
    result.map_err(|e| ApiError::server(e.to_string()))?;
    let written = std::fs::metadata(session_file(state, &req)?)
        .map(|m| m.len())
        .unwrap_or(0);
    Ok(Json(json!({
        "id_slot": id,
        "filename": req.filename,
        "n_saved": n_saved,
        "n_written": written,
        "timings": {"save_ms": started.elapsed().as_secs_f64() * 1e3},
    })))
}

async fn restore(state: &AppState, id: u64, req: SlotRequest) -> Result<Json<Value>, ApiError> {
    let path = session_file(state, &req)?;
    let slot = state.find_generator(req.model.as_deref()).await?;
    let session = slot.new_session()?;
    let started = Instant::now();
    let read = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let (session, result) = tokio::task::spawn_blocking(move || {
        let mut session = session;
        let r = session.load_session(&path);
        (session, r)
    })
    .await
    .map_err(|e| ApiError::server(format!("the restore task failed: {e}")))?;
    result.map_err(|e| match e {
        cyb_tensor::Error::Io { .. } => ApiError::invalid("filename", e.to_string())
            .with_status(StatusCode::NOT_FOUND)
            .with_code("file_not_found"),
        other => ApiError::invalid("filename", other.to_string()),
    })?;
    let n_restored = session.tokens().len();
    slot.checkin_as(id, session);
    Ok(Json(json!({
        "id_slot": id,
        "model": slot.id,
        "filename": req.filename,
        "n_restored": n_restored,
        "n_read": read,
        "timings": {"restore_ms": started.elapsed().as_secs_f64() * 1e3},
    })))
}

fn erase(state: &AppState, id: u64) -> Result<Json<Value>, ApiError> {
    let (_, session) = take_session(state, id)?;
    Ok(Json(
        json!({"id_slot": id, "n_erased": session.tokens().len()}),
    ))
}

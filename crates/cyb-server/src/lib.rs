//! cyb-server: an OpenAI-compatible HTTP server over cyb-runtime (`cyb-llm serve`).
//!
//! Endpoints: `POST /v1/chat/completions`, `POST /v1/completions` (SSE streaming or not),
//! `POST /v1/embeddings` and `POST /v1/rerank` (encoder models; the generation endpoints need a
//! text generator and answer 400 for an encoder, and the other way round),
//! `POST /v1/audio/transcriptions` and `POST /v1/audio/translations` (speech recognition
//! models, multipart uploads), `GET /v1/models`, `POST /v1/models/load` and
//! `POST /v1/models/unload` (models loaded and unloaded at run time), `GET /slots` and
//! `POST /slots/{id}?action=save|restore|erase` (idle sessions' KV state on disk),
//! `GET /health`, `GET /metrics` (Prometheus text). Each request generates in its own session
//! over the model's shared weights, on a blocking thread; at most `parallel` run at once and
//! `queue` more wait, the rest get 429. Idle sessions keep their KV cache and are reused by
//! the request whose prompt shares the longest prefix with what they hold.
//!
//! This crate must not know how models compute: it speaks HTTP and the runtime's public API.

mod admin;
mod admission;
mod audio;
mod audio_form;
mod chat;
mod completions;
mod config;
mod embeddings;
mod error;
mod metrics;
mod pool;
mod registry;
mod reply;
mod request;
mod rerank;
mod routes;
mod sse;
mod structured;
mod tool_calls;
mod vision;
mod worker;

pub use audio_form::{read_audio_form, AudioForm, Upload};
pub use config::{ModelLoader, ServedModel, ServedVision, ServerConfig, VisionNet};
pub use error::ApiError;
pub use routes::{router, router_with_loader, run_blocking, serve, shutdown_signal};
pub use tool_calls::{parse_tool_calls, ParsedToolCall};

use admission::Admission;
use metrics::Metrics;
use pool::ModelSlot;
use registry::{Kind, Registry};
use std::sync::Arc;

/// What every handler shares.
pub(crate) struct AppState {
    pub models: Registry,
    pub config: ServerConfig,
    pub admission: Admission,
    pub metrics: Metrics,
    pub started: u64,
}

impl AppState {
    /// The model a request names (loading it again if it was unloaded); no name picks the
    /// first known model.
    pub async fn find_model(&self, id: Option<&str>) -> Result<Arc<ModelSlot>, ApiError> {
        let id = match id {
            Some(id) => id.to_string(),
            None => self
                .models
                .first_of(None)
                .ok_or_else(|| ApiError::server("no model is loaded"))?,
        };
        self.models.get(&id, &self.metrics).await
    }

    /// The named model, which must generate text (chat and text completions).
    pub async fn find_generator(&self, id: Option<&str>) -> Result<Arc<ModelSlot>, ApiError> {
        let slot = self.find_model(id).await?;
        if slot.model.is_speech() {
            return Err(not_speech_endpoint(&slot.id));
        }
        if slot.model.is_encoder() {
            return Err(ApiError::invalid(
                "model",
                format!(
                    "model {} is an embedding (encoder) model: it answers /v1/embeddings, not \
                     text generation",
                    slot.id
                ),
            )
            .with_code("model_not_supported"));
        }
        Ok(slot)
    }

    /// The named model, which must be an encoder (embeddings).
    pub async fn find_encoder(&self, id: Option<&str>) -> Result<Arc<ModelSlot>, ApiError> {
        let slot = self.find_model(id).await?;
        if slot.model.is_speech() {
            return Err(not_speech_endpoint(&slot.id));
        }
        if !slot.model.is_encoder() {
            return Err(ApiError::invalid(
                "model",
                format!(
                    "model {} is not an embedding model: it generates text; /v1/embeddings \
                     needs an encoder model such as all-MiniLM-L6-v2",
                    slot.id
                ),
            )
            .with_code("model_not_supported"));
        }
        Ok(slot)
    }

    /// The named model, which must recognize speech (the audio endpoints); no name picks the
    /// first speech model known.
    pub async fn find_speech(&self, id: Option<&str>) -> Result<Arc<ModelSlot>, ApiError> {
        let id = match id.map(str::trim).filter(|id| !id.is_empty()) {
            Some(id) => id.to_string(),
            None => self.models.first_of(Some(Kind::Speech)).ok_or_else(|| {
                ApiError::invalid(
                    "model",
                    "no speech recognition model is served; start cyb-llm serve with a \
                     Whisper model",
                )
                .with_code("model_not_supported")
            })?,
        };
        let slot = self.find_model(Some(&id)).await?;
        if !slot.model.is_speech() {
            let what = if slot.model.is_encoder() {
                "an embedding (encoder) model"
            } else {
                "a text generator"
            };
            return Err(ApiError::invalid(
                "model",
                format!(
                    "model {} is {what}, not a speech recognition model: the audio endpoints \
                     need a Whisper model",
                    slot.id
                ),
            )
            .with_code("model_not_supported"));
        }
        Ok(slot)
    }
}

/// A speech model asked for text generation, embeddings or reranking.
fn not_speech_endpoint(id: &str) -> ApiError {
    ApiError::invalid(
        "model",
        format!(
            "model {id} is a speech recognition (Whisper) model: it answers \
             /v1/audio/transcriptions and /v1/audio/translations"
        ),
    )
    .with_code("model_not_supported")
}

/// Seconds since the Unix epoch (`created` fields).
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A unique-enough id for responses and tool calls: a process-wide counter mixed with the
/// clock and a per-process random key, printed as hex.
pub(crate) fn new_id(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("{prefix}{:016x}", h.finish())
}

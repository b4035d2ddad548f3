//! Server settings and the models it serves.

use cyb_runtime::Model;
use std::sync::Arc;
use std::time::Duration;

/// Loads a model at run time from what a client or an earlier start named it by (a file,
/// a directory or a hub name): `POST /v1/models/load`, and a model unloaded for being idle
/// or for room loading again. The id it gives is the default one; the source it sets is what
/// loads the model again.
pub type ModelLoader = Arc<dyn Fn(&str) -> Result<ServedModel, String> + Send + Sync>;

/// Limits and sizes; `cyb-llm serve` flags map one to one.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Generations running at once (over all models).
    pub parallel: usize,
    /// Requests that may wait for a free slot; one more gets 429.
    pub queue: usize,
    /// Context size of each session; `None`: the model's, capped at 4096.
    pub ctx: Option<usize>,
    /// Allow a `ctx` past the context a model was trained for (refused otherwise).
    pub allow_ctx_overflow: bool,
    /// Largest request body accepted (413 above), except on the audio endpoints.
    pub max_body_bytes: usize,
    /// Largest body of an audio upload (`/v1/audio/*`; 413 above).
    pub max_audio_bytes: usize,
    /// Largest `max_tokens` a request may ask for (400 above); also the default.
    pub max_tokens_limit: usize,
    /// Concurrent generations of one model advance in shared forward steps (continuous
    /// batching) of at most this many tokens; 0 turns batching off (each runs on its own).
    pub batch_tokens: usize,
    /// A chat whose messages do not fit the context (with room for the answer: `max_tokens`,
    /// at most half the context, a quarter when not given) drops its oldest turns until they
    /// do, keeping the system messages and the last turn; off, it is a 400.
    pub context_shift: bool,
    /// A model nobody used for this long leaves memory (it stays listed and the next request
    /// that names it loads it again); only models the loader can load again.
    pub idle_unload: Option<Duration>,
    /// The bytes of model files loaded at once: loading one more first unloads the least
    /// recently used idle models, and is refused (503) when the models in use leave no room.
    pub memory_budget: Option<u64>,
    /// `POST /v1/models/load` and `/v1/models/unload` are answered (403 otherwise): loading
    /// reads any model file the server can read, so it is for servers whose clients are
    /// trusted.
    pub model_admin: bool,
    /// The folder `POST /slots/{id}?action=save|restore` write and read session files in
    /// (`None`: those actions answer 501).
    pub slot_save_path: Option<std::path::PathBuf>,
    /// Speculative decoding for every text generator served: what proposes tokens and how
    /// many a step. Generations run one at a time then (no batching: `batch_tokens` 0 or
    /// `parallel` 1).
    pub draft: Option<(cyb_runtime::Drafter, usize)>,
    /// Vision models: YOLO detectors (`POST /v1/detections`) and ViTStyle models
    /// (`POST /v1/classifications`, images in `POST /v1/embeddings`).
    pub vision: Vec<ServedVision>,
    /// Largest body of a request carrying images (`/v1/detections`, `/v1/classifications`,
    /// `/v1/embeddings`; 413 above).
    pub max_image_bytes: usize,
    /// `file://` image URLs in chat messages are read from under this folder (`None`: they
    /// are refused; data URLs and base64 always work).
    pub image_dir: Option<std::path::PathBuf>,
}

/// A loaded vision model and the id clients name it by.
#[derive(Clone, Debug)]
pub struct ServedVision {
    pub id: String,
    pub net: VisionNet,
}

/// What a vision model is.
#[derive(Clone, Debug)]
pub enum VisionNet {
    Detector(std::sync::Arc<cyb_runtime::Detector>),
    Image(std::sync::Arc<cyb_runtime::ImageModel>),
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            parallel: 2,
            queue: 64,
            ctx: None,
            allow_ctx_overflow: false,
            max_body_bytes: 2 << 20,
            max_audio_bytes: 100 << 20,
            max_tokens_limit: 4096,
            batch_tokens: 512,
            context_shift: false,
            idle_unload: None,
            memory_budget: None,
            model_admin: false,
            slot_save_path: None,
            draft: None,
            vision: Vec::new(),
            max_image_bytes: 40 << 20,
            image_dir: None,
        }
    }
}

/// A loaded model and the id clients name it by.
#[derive(Clone)]
pub struct ServedModel {
    pub id: String,
    pub model: Model,
    /// What the server's [`ModelLoader`] takes to load this model again (`None`: it cannot,
    /// so it is never unloaded for being idle or for room).
    pub source: Option<String>,
}

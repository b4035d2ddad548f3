//! Server settings and the models it serves.

use cyb_runtime::Model;

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
        }
    }
}

/// A loaded model and the id clients name it by.
#[derive(Clone)]
pub struct ServedModel {
    pub id: String,
    pub model: Model,
}

//! cyb-runtime: the public API of cyb-llm.
//!
//! `Runtime` (backend chain and options) loads a `Model` (weights in place in the file
//! mapping, tokenizer, chat template); `Model::generator` opens a session with its own KV
//! cache whose `generate` streams tokens with their text and reports metrics. Tokenizers,
//! chat templates, sampling and the default model's fetch live here too.
//!
//! This crate must not know how ops are computed or how files are parsed.

mod batch;
mod bench;
pub mod chat_template;
mod default_model;
mod embed;
mod embed_load;
mod embed_pairs;
mod fill_mask;
mod generator;
mod graph_model;
mod kl_divergence;
mod logprobs;
mod model;
mod perplexity;
mod runtime;
pub mod sampling;
pub mod tokenizer;
pub mod transcribe;
pub mod vision;

pub use batch::{BatchLimits, BatchStats, Batcher, Member};
pub use bench::BenchSession;
pub use chat_template::{
    drop_oldest_turns, fit_chat, ChatMessage, ChatTemplate, ContentPart, RenderOptions,
};
pub use cyb_cpu::CpuOptions;
pub use cyb_models::Pooling;
#[cfg(feature = "wgpu")]
pub use cyb_wgpu::WgpuOptions;
pub use default_model::{cache_dir, default_model_path, ensure_default_model};
pub use embed::{
    ClassifyOptions, EmbedInput, EmbedOptions, Embeddings, LabelScore, ScoreFunction, TokenLabel,
};
pub use embed_pairs::ZeroShotOptions;
pub use fill_mask::MaskFill;
pub use generator::{Drafter, FinishReason, Generation, GenerationMetrics, Generator, Piece};
pub use graph_model::{read_graph, GraphModel};
pub use kl_divergence::{KldBaseWriter, KldComparison, KldReport};
pub use logprobs::TokenLogprobs;
pub use model::Model;
pub use perplexity::PerplexityReport;
pub use runtime::{auto_backend, BackendChoice, ExecPath, Lora, Runtime, RuntimeOptions};
pub use sampling::{Sampler, SamplingParams, StopMatcher, TokenConstraint};
pub use tokenizer::{IncrementalDecoder, PairEncoding, Tokenizer};
pub use transcribe::{Segment, Task, TranscribeOptions, Transcriber, Transcript, TranscriptFormat};
pub use vision::{DetectOptions, Detection, Detector, ImageModel};

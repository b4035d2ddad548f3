//! The LlamaStyle decoder family: config, weights, the op-by-op model and its graph template,
//! the KV cache and the replay plans of decode steps.

mod config;
mod graph;
mod kv_cache;
mod lora;
mod model;
mod replay;
mod weights;

pub use config::{
    Activation, LayerAttention, LlamaConfig, LlamaVariant, WeightNaming, SUPPORTED_ARCHITECTURES,
};
pub use kv_cache::KvCache;
pub use lora::{LoraAdapter, LoraPair, LoraTarget};
pub use model::{BatchSeq, LlamaModel};

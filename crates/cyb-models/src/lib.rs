//! cyb-models: curated model families, one file per family, written once against the
//! dispatcher's op API (`Dispatcher::run` with `cyb_ops::Op` values) so the same code runs on
//! every backend. Variants of a family are config flags, not copies.
//!
//! This crate knows tensor names and layer order; it must not know how an op is computed
//! (that is cyb-ops and the backends) nor how a file is parsed (that is cyb-format), nor
//! tokenizers, chat templates or sampling (cyb-runtime).

mod bert;
mod bert_batch;
mod bert_config;
mod bert_gguf;
mod bert_modern;
mod bert_modern_heads;
mod bert_pooling;
mod bert_weights;
mod deberta;
mod deberta_config;
mod deberta_weights;
mod jina;
mod kv_cache;
mod llama;
mod llama_config;
mod llama_graph;
mod llama_weights;
mod replay;

pub use bert::BertModel;
pub use bert_batch::BatchLayout;
pub use bert_config::{BertActivation, BertConfig, BertHead, BertVariant, BERT_ARCHITECTURES};
pub use bert_gguf::gguf_pooling;
pub use bert_modern::{ModernBertModel, ModernSettings};
pub use bert_pooling::{l2_normalize, pool_rows, EncoderOutput, Pooling};
pub use deberta::{ConvActivation, DebertaConv, DebertaModel, DebertaSettings};
pub use jina::{alibi_slopes, JinaBertModel, JinaSettings};
pub use kv_cache::KvCache;
pub use llama::LlamaModel;
pub use llama_config::{
    Activation, LayerAttention, LlamaConfig, LlamaVariant, WeightNaming, SUPPORTED_ARCHITECTURES,
};

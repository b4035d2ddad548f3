//! The BertStyle encoder family: the shared pieces (config, settings, batch layout, pooling,
//! weights, GGUF reading) and the post-LN model, with ModernBERT, DeBERTa and Jina-v2 on top.

mod batch;
mod config;
mod deberta;
mod deberta_config;
mod deberta_weights;
mod gguf;
mod jina;
mod model;
mod modern;
mod modern_heads;
mod pooling;
mod settings;
mod weights;

pub use batch::BatchLayout;
pub use config::{BertConfig, BertHead, BertVariant, BERT_ARCHITECTURES};
pub use deberta::DebertaModel;
pub use deberta_config::{ConvActivation, DebertaConv, DebertaSettings};
pub use gguf::gguf_pooling;
pub use jina::{alibi_slopes, JinaBertModel};
pub use model::BertModel;
pub use modern::ModernBertModel;
pub use pooling::{l2_normalize, pool_rows, EncoderOutput, Pooling};
pub use settings::{BertActivation, JinaSettings, ModernSettings};

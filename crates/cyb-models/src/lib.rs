//! cyb-models: curated model families, one folder per family (`llama/`, the LlamaStyle
//! decoders; `bert/`, the BertStyle encoders with the pieces its members share: config,
//! settings, batch layout, pooling, weights; `whisper/`, the speech recognizers, over the
//! encoder–decoder pieces of `encdec/`), written once against the dispatcher's op API
//! (`Dispatcher::run` with `cyb_ops::Op` values) so the same code runs on every backend.
//! Variants of a family are config flags, not copies.
//!
//! This crate knows tensor names and layer order; it must not know how an op is computed
//! (that is cyb-ops and the backends) nor how a file is parsed (that is cyb-format), nor
//! tokenizers, chat templates or sampling (cyb-runtime).

mod bert;
mod encdec;
mod llama;
mod step;
mod vit;
mod vlm;
mod whisper;

pub use bert::{
    alibi_slopes, gguf_pooling, l2_normalize, pool_rows, BatchLayout, BertActivation, BertConfig,
    BertHead, BertModel, BertVariant, ConvActivation, DebertaConv, DebertaModel, DebertaSettings,
    EncoderOutput, JinaBertModel, JinaSettings, ModernBertModel, ModernSettings, Pooling,
    BERT_ARCHITECTURES,
};
pub use encdec::CrossKv;
pub use llama::{
    Activation, BatchSeq, KvCache, LayerAttention, LlamaConfig, LlamaModel, LlamaVariant,
    LoraAdapter, LoraPair, LoraTarget, WeightNaming, SUPPORTED_ARCHITECTURES,
};
pub use vit::{
    TextConfig as VisionTextConfig, TowerConfig, VisionArch, VisionConfig, VisionModel,
    VisionOutput,
};
pub use vlm::{VlmConfig, VlmFamily, VlmModel, VlmParts};
pub use whisper::{EncodedAudio, WhisperConfig, WhisperModel};

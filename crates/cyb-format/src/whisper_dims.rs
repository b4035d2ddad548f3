//! The shape of a Whisper model as read from a converted file (CTranslate2 `model.bin`,
//! whisper.cpp ggml), and the transformers `WhisperConfig` keys that describe it.

use serde_json::{Map, Value};

/// The hyper-parameters read off the shapes and settings.
#[derive(Clone, Debug, Default)]
pub(crate) struct WhisperDims {
    pub(crate) d_model: usize,
    pub(crate) num_mel_bins: usize,
    pub(crate) encoder_layers: usize,
    pub(crate) decoder_layers: usize,
    pub(crate) encoder_heads: usize,
    pub(crate) decoder_heads: usize,
    pub(crate) encoder_ffn: usize,
    pub(crate) decoder_ffn: usize,
    pub(crate) vocab_size: usize,
    pub(crate) max_source_positions: usize,
    pub(crate) max_target_positions: usize,
    pub(crate) tied: bool,
}

impl WhisperDims {
    /// transformers' `WhisperConfig` keys for these dimensions (GELU, no embedding scale).
    pub(crate) fn config_json(&self) -> Map<String, Value> {
        let d = self;
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        put("model_type", "whisper".into());
        put(
            "architectures",
            Value::Array(vec!["WhisperForConditionalGeneration".into()]),
        );
        put("d_model", d.d_model.into());
        put("encoder_layers", d.encoder_layers.into());
        put("decoder_layers", d.decoder_layers.into());
        put("num_hidden_layers", d.encoder_layers.into());
        put("encoder_attention_heads", d.encoder_heads.into());
        put("decoder_attention_heads", d.decoder_heads.into());
        put("encoder_ffn_dim", d.encoder_ffn.into());
        put("decoder_ffn_dim", d.decoder_ffn.into());
        put("num_mel_bins", d.num_mel_bins.into());
        put("vocab_size", d.vocab_size.into());
        put("max_source_positions", d.max_source_positions.into());
        put("max_target_positions", d.max_target_positions.into());
        put("activation_function", "gelu".into());
        put("scale_embedding", false.into());
        put("tie_word_embeddings", d.tied.into());
        m
    }
}

//! The WhisperStyle hyper-parameters under transformers' `WhisperConfig` names, read from a
//! model's config (a Hugging Face `config.json`, the config a `.model` container carries, or the
//! one a CTranslate2 directory is presented with).

use cyb_format::ModelFile;
use cyb_tensor::{Error, Result};
use serde_json::{Map, Value};

/// What the encoder and decoder are made of. Every published size (tiny … large-v3, `.en` and
/// multilingual, distil-whisper and large-v3-turbo) is one of these.
#[derive(Clone, Debug, PartialEq)]
pub struct WhisperConfig {
    /// Mel bins of the input features (80; 128 for large-v3 and turbo).
    pub num_mel_bins: usize,
    pub d_model: usize,
    pub encoder_layers: usize,
    pub encoder_heads: usize,
    pub encoder_ffn_dim: usize,
    pub decoder_layers: usize,
    pub decoder_heads: usize,
    pub decoder_ffn_dim: usize,
    pub vocab_size: usize,
    /// Encoder positions: a window of `2 · max_source_positions` mel frames (1500 for 30 s).
    pub max_source_positions: usize,
    /// Decoder positions (448): the longest prompt plus generated text of one window.
    pub max_target_positions: usize,
    /// `(decoder layer, head)` pairs whose cross-attention follows the audio in time (for word
    /// timestamps); empty when the checkpoint does not name them.
    pub alignment_heads: Vec<(usize, usize)>,
}

/// Layer norm epsilon of every Whisper checkpoint (PyTorch's default).
pub(crate) const LAYER_NORM_EPS: f32 = 1e-5;

impl WhisperConfig {
    /// True when `file`'s config names the Whisper architecture.
    pub fn is_whisper_file(file: &ModelFile) -> bool {
        file.metadata_value("model_type")
            .is_some_and(|v| v.as_str() == Some("whisper"))
    }

    /// Reads the config of `file` (see the module doc).
    pub fn from_file(file: &ModelFile) -> Result<WhisperConfig> {
        let map: Map<String, Value> = file.metadata().into_iter().collect();
        WhisperConfig::from_json(&Value::Object(map))
    }

    /// From `config.json`'s fields.
    pub fn from_json(config: &Value) -> Result<WhisperConfig> {
        let model_type = config.get("model_type").and_then(Value::as_str);
        if model_type != Some("whisper") {
            return Err(Error::invalid(
                "whisper config",
                format!("model_type is {model_type:?}, not \"whisper\""),
            ));
        }
        let uint = |name: &str| -> Result<usize> {
            let v = config.get(name).ok_or_else(|| {
                Error::invalid("whisper config", format!("config.json lacks {name}"))
            })?;
            v.as_u64()
                .and_then(|v| usize::try_from(v).ok())
                .filter(|&v| v > 0 && v <= 1 << 20)
                .ok_or_else(|| {
                    Error::invalid(
                        "whisper config",
                        format!("{name} is {v}, not a positive integer up to 2^20"),
                    )
                })
        };
        if let Some(act) = config.get("activation_function").and_then(Value::as_str) {
            if act != "gelu" {
                return Err(Error::invalid(
                    "whisper config",
                    format!("activation_function {act:?} is not supported (Whisper uses \"gelu\")"),
                ));
            }
        }
        if config.get("scale_embedding").and_then(Value::as_bool) == Some(true) {
            return Err(Error::invalid(
                "whisper config",
                "scale_embedding = true is not supported (no Whisper checkpoint sets it)",
            ));
        }
        let c = WhisperConfig {
            num_mel_bins: uint("num_mel_bins")?,
            d_model: uint("d_model")?,
            encoder_layers: uint("encoder_layers")?,
            encoder_heads: uint("encoder_attention_heads")?,
            encoder_ffn_dim: uint("encoder_ffn_dim")?,
            decoder_layers: uint("decoder_layers")?,
            decoder_heads: uint("decoder_attention_heads")?,
            decoder_ffn_dim: uint("decoder_ffn_dim")?,
            vocab_size: uint("vocab_size")?,
            max_source_positions: uint("max_source_positions")?,
            max_target_positions: uint("max_target_positions")?,
            alignment_heads: alignment_heads(config)?,
        };
        for (name, heads) in [
            ("encoder_attention_heads", c.encoder_heads),
            ("decoder_attention_heads", c.decoder_heads),
        ] {
            if !c.d_model.is_multiple_of(heads) {
                return Err(Error::invalid(
                    "whisper config",
                    format!("d_model {} is not a multiple of {name} {heads}", c.d_model),
                ));
            }
        }
        if let Some(&(l, h)) = c
            .alignment_heads
            .iter()
            .find(|&&(l, h)| l >= c.decoder_layers || h >= c.decoder_heads)
        {
            return Err(Error::invalid(
                "whisper config",
                format!(
                    "alignment head ({l}, {h}) is outside the decoder's {} layers × {} heads",
                    c.decoder_layers, c.decoder_heads
                ),
            ));
        }
        Ok(c)
    }

    /// Layer norm epsilon of every Whisper checkpoint.
    pub const LAYER_NORM_EPS: f32 = LAYER_NORM_EPS;

    /// Mel frames of one encoder window (3000 for 30 s).
    pub fn window_frames(&self) -> usize {
        2 * self.max_source_positions
    }
}

/// `alignment_heads`: a list of `[layer, head]` pairs (as CTranslate2's config.json and
/// transformers' generation config carry them).
fn alignment_heads(config: &Value) -> Result<Vec<(usize, usize)>> {
    let Some(list) = config.get("alignment_heads").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let bad = || {
        Error::invalid(
            "whisper config",
            "alignment_heads is not a list of [layer, head] pairs",
        )
    };
    let pair = |v: &Value| -> Option<(usize, usize)> {
        let p = v.as_array()?;
        let n = |i: usize| p.get(i)?.as_u64().and_then(|v| usize::try_from(v).ok());
        (p.len() == 2).then_some((n(0)?, n(1)?))
    };
    list.as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|v| pair(v).ok_or_else(bad))
        .collect()
}

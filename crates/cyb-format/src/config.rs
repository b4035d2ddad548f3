//! `ModelConfig`: the hyper-parameters a runtime needs, normalized from GGUF metadata
//! (llama.cpp's `<arch>.*` keys) or a Hugging Face `config.json`.
//!
//! Required: architecture, vocab_size, hidden_size, num_layers, num_heads (a missing one is
//! `Error::InvalidConfig`). Defaults where both sources have one: num_kv_heads = num_heads,
//! head_dim = hidden_size / num_heads, rope_theta = 10000. Everything not understood here is
//! kept raw in `extra`.

use crate::gguf::GgufFile;
use crate::metadata::MetaValue;
use cyb_tensor::{Error, Result};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// RoPE scaling (`linear`, `dynamic`, `yarn`, `llama3`, `longrope`, ...).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RopeScaling {
    pub kind: String,
    pub factor: Option<f64>,
    pub original_max_position: Option<usize>,
    /// The other parameters as the source wrote them (low/high freq factors, attn factor...).
    pub extra: BTreeMap<String, Value>,
}

/// Normalized model hyper-parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelConfig {
    /// `"gguf"` or `"huggingface"`.
    pub source: String,
    /// llama.cpp's `general.architecture` or Hugging Face's `model_type` (`llama`, `qwen2`...).
    pub architecture: String,
    /// Hugging Face class names (`LlamaForCausalLM`); empty for GGUF.
    pub architectures: Vec<String>,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: Option<usize>,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Dimensions rotated by RoPE when fewer than head_dim (partial rotary).
    pub rope_dim: Option<usize>,
    /// Longest position the model was trained for (`max_position_embeddings`).
    pub max_position: Option<usize>,
    /// Context length the file advertises (GGUF `<arch>.context_length`; HF: `max_position`).
    pub context_length: Option<usize>,
    pub rope_theta: f64,
    pub rope_scaling: Option<RopeScaling>,
    /// RMSNorm or LayerNorm epsilon.
    pub norm_eps: Option<f64>,
    /// Whether the output projection reuses the token embedding.
    pub tie_word_embeddings: bool,
    pub sliding_window: Option<usize>,
    pub num_experts: Option<usize>,
    pub num_experts_per_token: Option<usize>,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    pub pad_token_id: Option<u32>,
    /// Every source field not mapped above, raw (for GGUF, `<arch>.*` keys without the prefix).
    pub extra: BTreeMap<String, Value>,
}

fn missing(field: &str, source: &str) -> Error {
    Error::InvalidConfig {
        field: field.to_string(),
        reason: format!("required but absent from {source}"),
    }
}

fn positive(field: &str, v: usize) -> Result<usize> {
    if v == 0 {
        return Err(Error::InvalidConfig {
            field: field.into(),
            reason: "must be at least 1".into(),
        });
    }
    Ok(v)
}

/// A real-valued setting that must be finite and at least `min` (`strict`: above it).
fn finite_at_least(field: &str, v: f64, min: f64, strict: bool) -> Result<f64> {
    let ok = v.is_finite() && if strict { v > min } else { v >= min };
    if !ok {
        return Err(Error::InvalidConfig {
            field: field.into(),
            reason: format!(
                "is {v}, expected a finite number {} {min}",
                if strict { "above" } else { "of at least" }
            ),
        });
    }
    Ok(v)
}

impl ModelConfig {
    /// Refuses values no model can run with: a norm epsilon that is negative or not finite, a
    /// RoPE base that is not positive, zero layers or heads. `eps_key` and `theta_key` name the
    /// fields as the source spells them.
    fn checked(self, eps_key: &str, theta_key: &str) -> Result<ModelConfig> {
        if let Some(e) = self.norm_eps {
            finite_at_least(eps_key, e, 0.0, false)?;
        }
        finite_at_least(theta_key, self.rope_theta, 0.0, true)?;
        positive("num_layers", self.num_layers)?;
        positive("num_heads", self.num_heads)?;
        positive("hidden_size", self.hidden_size)?;
        Ok(self)
    }

    /// Checks the layer count against the tensors: where tensor names number their layers
    /// (`blk.N.`, `layers.N.`, `layer.N.`, `h.N.`, `blocks.N.`), `num_layers` may not exceed
    /// the layers present, so nothing is sized by a count the file does not back.
    pub fn check_layers<'a>(&self, names: impl Iterator<Item = &'a str>) -> Result<()> {
        let mut found: Option<usize> = None;
        for name in names {
            let parts: Vec<&str> = name.split('.').collect();
            for w in parts.windows(2) {
                if matches!(w[0], "blk" | "layers" | "layer" | "h" | "blocks") {
                    if let Ok(i) = w[1].parse::<usize>() {
                        found = Some(found.map_or(i + 1, |f| f.max(i + 1)));
                    }
                }
            }
        }
        match found {
            Some(n) if self.num_layers > n => Err(Error::InvalidConfig {
                field: "num_layers".into(),
                reason: format!(
                    "{} layers, but the weights hold layers 0 to {} only",
                    self.num_layers,
                    n - 1
                ),
            }),
            _ => Ok(()),
        }
    }
}

/// Applies the defaults and cross-field checks shared by both sources.
struct Dims {
    hidden: usize,
    heads: usize,
    kv_heads: Option<usize>,
    head_dim: Option<usize>,
}

impl Dims {
    fn resolve(self) -> Result<(usize, usize)> {
        let kv = positive("num_kv_heads", self.kv_heads.unwrap_or(self.heads))?;
        if !self.heads.is_multiple_of(kv) {
            return Err(Error::InvalidConfig {
                field: "num_kv_heads".into(),
                reason: format!("{kv} does not divide num_heads {}", self.heads),
            });
        }
        let head_dim = match self.head_dim {
            Some(d) => positive("head_dim", d)?,
            None if self.hidden.is_multiple_of(self.heads) => self.hidden / self.heads,
            None => {
                return Err(Error::InvalidConfig {
                    field: "head_dim".into(),
                    reason: format!(
                        "absent, and hidden_size {} is not a multiple of num_heads {}",
                        self.hidden, self.heads
                    ),
                })
            }
        };
        Ok((kv, head_dim))
    }
}

/// Items an architecture's array setting may have (per-layer values; models have at most a
/// few hundred layers).
const MAX_SETTING_ITEMS: usize = 1 << 16;

impl ModelConfig {
    /// From GGUF metadata. Without an `output.weight` tensor the token embedding is tied, as
    /// llama.cpp assumes.
    pub fn from_gguf(f: &GgufFile) -> Result<ModelConfig> {
        const SRC: &str = "GGUF metadata";
        let arch = f
            .get("general.architecture")
            .and_then(MetaValue::as_str)
            .ok_or_else(|| missing("general.architecture", SRC))?
            .to_string();
        let prefix = format!("{arch}.");
        let key = |k: &str| f.get(&format!("{prefix}{k}"));
        let uint = |k: &str| -> Result<Option<usize>> {
            match key(k) {
                None => Ok(None),
                // Per-layer arrays (e.g. head_count_kv of hybrid models): the first non-zero.
                Some(MetaValue::Array(a)) => Ok(a
                    .iter()
                    .filter_map(|v| v.as_u64())
                    .find(|&v| v != 0)
                    .and_then(|v| usize::try_from(v).ok())),
                Some(v) => v
                    .as_u64()
                    .and_then(|v| usize::try_from(v).ok())
                    .map(Some)
                    .ok_or_else(|| Error::InvalidConfig {
                        field: format!("{prefix}{k}"),
                        reason: format!("expected an unsigned integer, got {}", v.summary()),
                    }),
            }
        };
        let req = |k: &str| -> Result<usize> {
            let v = uint(k)?.ok_or_else(|| missing(&format!("{prefix}{k}"), SRC))?;
            positive(&format!("{prefix}{k}"), v)
        };
        let float = |k: &str| key(k).and_then(MetaValue::as_f64);
        let token_id = |k: &str| {
            f.get(&format!("tokenizer.ggml.{k}"))
                .and_then(MetaValue::as_u64)
                .and_then(|v| u32::try_from(v).ok())
        };

        let vocab_size = match uint("vocab_size")? {
            Some(v) => v,
            None => f
                .get("tokenizer.ggml.tokens")
                .and_then(MetaValue::as_array)
                .map(crate::MetaArray::len)
                .ok_or_else(|| {
                    missing(
                        &format!("{prefix}vocab_size (or tokenizer.ggml.tokens)"),
                        SRC,
                    )
                })?,
        };
        let hidden = req("embedding_length")?;
        let heads = req("attention.head_count")?;
        let (num_kv_heads, head_dim) = Dims {
            hidden,
            heads,
            kv_heads: uint("attention.head_count_kv")?,
            head_dim: uint("attention.key_length")?,
        }
        .resolve()?;
        let rope_scaling = match key("rope.scaling.type").and_then(MetaValue::as_str) {
            Some(kind) if kind != "none" => Some(RopeScaling {
                kind: kind.to_string(),
                factor: float("rope.scaling.factor"),
                original_max_position: uint("rope.scaling.original_context_length")?,
                extra: f
                    .metadata()
                    .iter()
                    .filter_map(|(k, v)| {
                        let s = k.strip_prefix(&format!("{prefix}rope.scaling."))?;
                        let known = ["type", "factor", "original_context_length"];
                        (!known.contains(&s)).then(|| (s.to_string(), v.to_json()))
                    })
                    .collect(),
            }),
            _ => None,
        };
        let context_length = uint("context_length")?;
        let eos_token_ids = token_id("eos_token_id").into_iter().collect();
        let used = [
            "vocab_size",
            "embedding_length",
            "feed_forward_length",
            "block_count",
            "attention.head_count",
            "attention.head_count_kv",
            "attention.key_length",
            "rope.dimension_count",
            "context_length",
            "rope.freq_base",
            "attention.layer_norm_rms_epsilon",
            "attention.layer_norm_epsilon",
            "attention.sliding_window",
            "expert_count",
            "expert_used_count",
        ];
        let mut extra = BTreeMap::new();
        for (k, v) in f.metadata() {
            let Some(s) = k.strip_prefix(&prefix) else {
                continue;
            };
            if used.contains(&s) || s.starts_with("rope.scaling.") {
                continue;
            }
            // Architecture keys are settings, per layer at most: a long array is not one.
            if let Some(a) = v.as_array().filter(|a| a.len() > MAX_SETTING_ITEMS) {
                return Err(Error::InvalidConfig {
                    field: k.clone(),
                    reason: format!(
                        "an array of {} items, where a setting (at most one per layer) is \
                         expected",
                        a.len()
                    ),
                });
            }
            extra.insert(s.to_string(), v.to_json());
        }
        ModelConfig {
            source: "gguf".into(),
            architectures: Vec::new(),
            vocab_size: positive("vocab_size", vocab_size)?,
            hidden_size: hidden,
            intermediate_size: uint("feed_forward_length")?,
            num_layers: req("block_count")?,
            num_heads: heads,
            num_kv_heads,
            head_dim,
            rope_dim: uint("rope.dimension_count")?,
            max_position: context_length,
            context_length,
            rope_theta: float("rope.freq_base").unwrap_or(10_000.0),
            rope_scaling,
            norm_eps: float("attention.layer_norm_rms_epsilon")
                .or_else(|| float("attention.layer_norm_epsilon")),
            tie_word_embeddings: f.tensor_info("output.weight").is_none(),
            sliding_window: uint("attention.sliding_window")?,
            num_experts: uint("expert_count")?,
            num_experts_per_token: uint("expert_used_count")?,
            bos_token_id: token_id("bos_token_id"),
            eos_token_ids,
            pad_token_id: token_id("padding_token_id"),
            architecture: arch.clone(),
            extra,
        }
        .checked(
            &format!("{arch}.attention.layer_norm_(rms_)epsilon"),
            &format!("{arch}.rope.freq_base"),
        )
    }

    /// From a Hugging Face `config.json`. Multimodal configs that nest the language model under
    /// `text_config` are read from there when a field is absent at the top level.
    /// `generation_config` supplies bos/eos ids the config lacks; `has_lm_head` decides tying
    /// when the config does not say.
    pub fn from_hf(
        config: &Value,
        generation_config: Option<&Value>,
        has_lm_head: bool,
    ) -> Result<ModelConfig> {
        const SRC: &str = "config.json";
        let empty = Map::new();
        let top = config.as_object().unwrap_or(&empty);
        let text = top
            .get("text_config")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let mut used: Vec<&str> = vec!["text_config"];
        let mut get = |names: &[&'static str]| -> Option<(&'static str, &Value)> {
            for &n in names {
                if let Some(v) = top.get(n).or_else(|| text.get(n)).filter(|v| !v.is_null()) {
                    used.push(n);
                    return Some((n, v));
                }
            }
            None
        };
        let as_uint = |hit: Option<(&str, &Value)>| -> Result<Option<usize>> {
            match hit {
                None => Ok(None),
                Some((n, v)) => v
                    .as_u64()
                    .and_then(|v| usize::try_from(v).ok())
                    .map(Some)
                    .ok_or_else(|| Error::InvalidConfig {
                        field: n.into(),
                        reason: format!("expected an unsigned integer, got {v}"),
                    }),
            }
        };
        let req = |hit: Option<(&str, &Value)>, field: &str| -> Result<usize> {
            let name = hit.map_or(field, |(n, _)| n).to_string();
            positive(&name, as_uint(hit)?.ok_or_else(|| missing(field, SRC))?)
        };

        let architecture = get(&["model_type"])
            .and_then(|(_, v)| v.as_str())
            .ok_or_else(|| missing("model_type", SRC))?
            .to_string();
        let architectures = get(&["architectures"])
            .and_then(|(_, v)| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let vocab_size = req(get(&["vocab_size"]), "vocab_size")?;
        let hidden = req(get(&["hidden_size", "n_embd", "d_model"]), "hidden_size")?;
        let num_layers = req(
            get(&["num_hidden_layers", "n_layer", "num_layers"]),
            "num_hidden_layers",
        )?;
        // Encoder-decoder configs (Whisper, BART) name the heads per stack; the encoder's stand
        // for the model as `num_hidden_layers` does.
        let heads = req(
            get(&[
                "num_attention_heads",
                "n_head",
                "num_heads",
                "encoder_attention_heads",
            ]),
            "num_attention_heads",
        )?;
        let (num_kv_heads, head_dim) = Dims {
            hidden,
            heads,
            kv_heads: as_uint(get(&["num_key_value_heads"]))?,
            head_dim: as_uint(get(&["head_dim"]))?,
        }
        .resolve()?;
        let intermediate_size = as_uint(get(&[
            "intermediate_size",
            "n_inner",
            "ffn_dim",
            "encoder_ffn_dim",
        ]))?;
        // Whisper's decoder context is `max_target_positions`.
        let max_position = as_uint(get(&[
            "max_position_embeddings",
            "n_positions",
            "max_seq_len",
            "max_target_positions",
        ]))?;
        // transformers 5 moved rope_theta and the scaling into `rope_parameters`.
        let rope_params = get(&["rope_parameters"]).map(|(_, v)| v.clone());
        let rope_theta = get(&["rope_theta"])
            .and_then(|(_, v)| v.as_f64())
            .or_else(|| rope_params.as_ref()?.get("rope_theta")?.as_f64())
            .unwrap_or(10_000.0);
        let scaling = get(&["rope_scaling"])
            .map(|(_, v)| v.clone())
            .or(rope_params);
        let rope_scaling = scaling.as_ref().and_then(rope_scaling_from_json);
        let rope_dim = match (
            get(&["partial_rotary_factor"]).and_then(|(_, v)| v.as_f64()),
            as_uint(get(&["rotary_dim", "rotary_emb_dim"]))?,
        ) {
            (_, Some(d)) => Some(d),
            (Some(p), None) if p > 0.0 && p < 1.0 => Some((head_dim as f64 * p) as usize),
            _ => None,
        };
        let norm_eps = get(&[
            "rms_norm_eps",
            "layer_norm_eps",
            "layer_norm_epsilon",
            "norm_eps",
        ])
        .and_then(|(_, v)| v.as_f64());
        let tie = get(&["tie_word_embeddings"]).and_then(|(_, v)| v.as_bool());
        let use_sw = get(&["use_sliding_window"]).and_then(|(_, v)| v.as_bool());
        let sliding_window = as_uint(get(&["sliding_window"]))?.filter(|_| use_sw != Some(false));
        let num_experts = as_uint(get(&[
            "num_local_experts",
            "num_experts",
            "n_routed_experts",
        ]))?;
        let num_experts_per_token =
            as_uint(get(&["num_experts_per_tok", "num_experts_per_token"]))?;
        let gen_id = |n: &str| {
            generation_config
                .and_then(|g| g.get(n))
                .filter(|v| !v.is_null())
        };
        let bos = get(&["bos_token_id"])
            .map(|(_, v)| v)
            .or_else(|| gen_id("bos_token_id"));
        let eos = get(&["eos_token_id"])
            .map(|(_, v)| v)
            .or_else(|| gen_id("eos_token_id"));
        let pad = get(&["pad_token_id"])
            .map(|(_, v)| v)
            .or_else(|| gen_id("pad_token_id"));
        let ids = |v: Option<&Value>| -> Vec<u32> {
            match v {
                Some(Value::Array(a)) => a.iter().filter_map(id_of).collect(),
                Some(v) => id_of(v).into_iter().collect(),
                None => Vec::new(),
            }
        };
        let eos_token_ids = ids(eos);
        let bos_token_id = ids(bos).first().copied();
        let pad_token_id = ids(pad).first().copied();
        used.extend(["rope_theta", "rope_scaling", "rope_parameters"]);
        let extra = top
            .iter()
            .filter(|(k, _)| !used.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        ModelConfig {
            source: "huggingface".into(),
            architecture,
            architectures,
            vocab_size,
            hidden_size: hidden,
            intermediate_size,
            num_layers,
            num_heads: heads,
            num_kv_heads,
            head_dim,
            rope_dim,
            max_position,
            context_length: max_position,
            rope_theta,
            rope_scaling,
            norm_eps,
            tie_word_embeddings: tie.unwrap_or(!has_lm_head),
            sliding_window,
            num_experts,
            num_experts_per_token,
            bos_token_id,
            eos_token_ids,
            pad_token_id,
            extra,
        }
        .checked("layer_norm_eps / rms_norm_eps", "rope_theta")
    }
}

fn id_of(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|v| u32::try_from(v).ok())
}

fn rope_scaling_from_json(v: &Value) -> Option<RopeScaling> {
    let o = v.as_object()?;
    let kind = o
        .get("rope_type")
        .or_else(|| o.get("type"))
        .and_then(Value::as_str)?
        .to_string();
    if kind == "default" || kind == "none" {
        return None;
    }
    let known = [
        "rope_type",
        "type",
        "factor",
        "original_max_position_embeddings",
        "rope_theta",
    ];
    Some(RopeScaling {
        kind,
        factor: o.get("factor").and_then(Value::as_f64),
        original_max_position: o
            .get("original_max_position_embeddings")
            .and_then(Value::as_u64)
            .and_then(|v| usize::try_from(v).ok()),
        extra: o
            .iter()
            .filter(|(k, _)| !known.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::finite_at_least;

    #[test]
    fn non_finite_settings_are_refused() {
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1e-6] {
            assert!(finite_at_least("eps", v, 0.0, false).is_err(), "{v}");
        }
        assert!(finite_at_least("theta", 0.0, 0.0, true).is_err());
        assert_eq!(finite_at_least("eps", 0.0, 0.0, false).unwrap(), 0.0);
        assert_eq!(finite_at_least("theta", 1e6, 0.0, true).unwrap(), 1e6);
    }
}

//! `LlamaConfig`: every switch of the LlamaStyle family, resolved once from a file's
//! `ModelConfig` (GGUF metadata or a Hugging Face config.json), so the forward pass reads flags
//! and never architecture names.
//!
//! The two sources differ in more than names: llama.cpp's converter stores Gemma norm weights
//! as `1 + w` and permutes the q/k rows of arch "llama" so that NORMAL (adjacent-pair) rope
//! applies, while Hugging Face checkpoints keep `w` and use NEOX (`rotate_half`) pairs.

use cyb_format::{ModelConfig, ModelFile};
use cyb_ops::{RopeLayout, RopeScaling};
use cyb_tensor::{Error, Result};
use serde_json::Value;

/// Architecture names this family runs: llama.cpp's `general.architecture` values and Hugging
/// Face `model_type` values.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &[
    "llama",
    "mistral",
    "smollm",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "phi3",
];

/// The member of the family, which decides the block structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LlamaVariant {
    /// Llama 2/3, Mistral, SmolLM: the plain block.
    Llama,
    /// q/k/v biases (taken from the file when present, for any variant).
    Qwen2,
    /// Per-head RMSNorm of q and k before rope.
    Qwen3,
    /// Embedding × √hidden, (1 + w) norms, GELU-tanh gate.
    Gemma,
    /// Gemma plus post-attention and post-feed-forward norms, softcaps, alternating local and
    /// global layers.
    Gemma2,
    /// Gemma2's block plus q/k norms and separate rope bases for local and global layers.
    Gemma3,
    /// Fused qkv and gate_up projections, optionally partial rotary.
    Phi3,
}

/// Which tensor names the file uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightNaming {
    /// llama.cpp: `token_embd`, `blk.N.attn_q`, ...
    Gguf,
    /// Hugging Face: `model.embed_tokens`, `model.layers.N.self_attn.q_proj`, ...
    HuggingFace,
}

/// The gated feed-forward activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `silu(gate) · up`.
    SwiGlu,
    /// `gelu_tanh(gate) · up`.
    GeGluTanh,
}

/// How one layer attends: its window and its rotary frequencies.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerAttention {
    /// `Some(w)`: each token sees itself and the `w - 1` tokens before it.
    pub sliding_window: Option<usize>,
    pub rope_base: f32,
    pub rope_scaling: RopeScaling,
}

/// The resolved hyper-parameters and switches of a LlamaStyle model.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// The architecture name as the file gives it.
    pub architecture: String,
    pub variant: LlamaVariant,
    pub naming: WeightNaming,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Leading dimensions of each head that rope rotates (partial rotary when < head_dim).
    pub rot_dims: usize,
    pub rope_layout: RopeLayout,
    pub norm_eps: f32,
    /// Added to every RMSNorm weight: 1 for Hugging Face Gemma's `(1 + w)`, else 0.
    pub norm_weight_offset: f32,
    /// Multiplies the token embedding (Gemma: √hidden).
    pub embedding_scale: Option<f32>,
    pub activation: Activation,
    /// Factor on q·k before the softmax.
    pub attention_scale: f32,
    /// `c · tanh(s / c)` on attention scores.
    pub attn_softcap: Option<f32>,
    /// `c · tanh(l / c)` on the output logits.
    pub final_softcap: Option<f32>,
    pub qk_norm: bool,
    /// Norms after attention and after the feed-forward (Gemma2/3).
    pub sandwich_norms: bool,
    pub tie_word_embeddings: bool,
    /// One entry per layer.
    pub layers: Vec<LayerAttention>,
}

impl LlamaConfig {
    /// From an opened file: its `ModelConfig`, plus Hugging Face's per-layer-type
    /// `rope_parameters` (transformers 5 Gemma3), which `ModelConfig` does not keep.
    pub fn from_file(file: &ModelFile) -> Result<LlamaConfig> {
        let cfg = file.config()?;
        let raw_rope = file.metadata_value("rope_parameters");
        let mut c = LlamaConfig::from_model_config(&cfg)?;
        if let Some(per_type) = raw_rope
            .as_ref()
            .filter(|v| v.get("full_attention").is_some())
        {
            c.apply_per_type_rope(per_type)?;
        }
        Ok(c)
    }

    /// From a normalized `ModelConfig` (variant switches from `extra` where the source has them).
    pub fn from_model_config(cfg: &ModelConfig) -> Result<LlamaConfig> {
        let arch = cfg.architecture.as_str();
        let variant = match arch {
            "llama" | "mistral" | "smollm" => LlamaVariant::Llama,
            "qwen2" => LlamaVariant::Qwen2,
            "qwen3" => LlamaVariant::Qwen3,
            "gemma" => LlamaVariant::Gemma,
            "gemma2" => LlamaVariant::Gemma2,
            "gemma3" | "gemma3_text" => LlamaVariant::Gemma3,
            "phi3" => LlamaVariant::Phi3,
            other => {
                return Err(Error::InvalidConfig {
                    field: "architecture".into(),
                    reason: format!(
                        "unknown architecture \"{other}\": the LlamaStyle family runs {}",
                        SUPPORTED_ARCHITECTURES.join(", ")
                    ),
                })
            }
        };
        let naming = match cfg.source.as_str() {
            "gguf" => WeightNaming::Gguf,
            _ => WeightNaming::HuggingFace,
        };
        let gemma = matches!(
            variant,
            LlamaVariant::Gemma | LlamaVariant::Gemma2 | LlamaVariant::Gemma3
        );
        let sandwich = matches!(variant, LlamaVariant::Gemma2 | LlamaVariant::Gemma3);
        let extra = |k: &str| cfg.extra.get(k).filter(|v| !v.is_null());
        let extra_f32 = |k: &str| extra(k).and_then(Value::as_f64).map(|v| v as f32);

        if naming == WeightNaming::HuggingFace && !gemma {
            if let Some(act) = extra("hidden_act").and_then(Value::as_str) {
                if act != "silu" && act != "swish" {
                    return Err(Error::InvalidConfig {
                        field: "hidden_act".into(),
                        reason: format!("\"{act}\": the {arch} block is built for silu"),
                    });
                }
            }
        }
        let intermediate_size = cfg.intermediate_size.ok_or_else(|| Error::InvalidConfig {
            field: "intermediate_size".into(),
            reason: "required by the LlamaStyle family but absent".into(),
        })?;
        let rot_dims = cfg.rope_dim.unwrap_or(cfg.head_dim);
        if rot_dims == 0 || !rot_dims.is_multiple_of(2) || rot_dims > cfg.head_dim {
            return Err(Error::InvalidConfig {
                field: "rope dimension count".into(),
                reason: format!("{rot_dims} must be even and ≤ head_dim {}", cfg.head_dim),
            });
        }
        // llama.cpp runs arch "llama" (and so Mistral and SmolLM GGUFs) with NORMAL rope on
        // rows its converter permuted; every other member, and every HF checkpoint, is NEOX.
        let rope_layout = match (naming, variant) {
            (WeightNaming::Gguf, LlamaVariant::Llama) => RopeLayout::Normal,
            _ => RopeLayout::Neox,
        };
        let attention_scale = match (naming, variant) {
            (WeightNaming::HuggingFace, _) if extra_f32("query_pre_attn_scalar").is_some() => {
                extra_f32("query_pre_attn_scalar").map_or(1.0, |s| 1.0 / s.sqrt())
            }
            (WeightNaming::Gguf, _) if extra_f32("attention.scale").is_some() => {
                extra_f32("attention.scale").unwrap_or(1.0)
            }
            // llama.cpp's rule for Gemma2/3 GGUFs without the key: the 27B models (46 and 62
            // layers) scale by hidden/heads, the others by head_dim.
            (WeightNaming::Gguf, LlamaVariant::Gemma2 | LlamaVariant::Gemma3)
                if cfg.num_layers == 46 || cfg.num_layers == 62 =>
            {
                1.0 / ((cfg.hidden_size / cfg.num_heads) as f32).sqrt()
            }
            _ => 1.0 / (cfg.head_dim as f32).sqrt(),
        };
        let rope_scaling = scaling_of(cfg.rope_scaling.as_ref())?;
        let sliding = sliding_layers(cfg, variant, naming)?;
        let local_base = match naming {
            WeightNaming::Gguf => extra_f32("rope.freq_base_swa"),
            WeightNaming::HuggingFace => extra_f32("rope_local_base_freq"),
        };
        let layers = sliding
            .iter()
            .map(|&is_local| {
                let window = if is_local { cfg.sliding_window } else { None };
                // Gemma3's local layers have their own base and no scaling.
                if variant == LlamaVariant::Gemma3 && is_local {
                    LayerAttention {
                        sliding_window: window,
                        rope_base: local_base.unwrap_or(10_000.0),
                        rope_scaling: RopeScaling::None,
                    }
                } else {
                    LayerAttention {
                        sliding_window: window,
                        rope_base: cfg.rope_theta as f32,
                        rope_scaling,
                    }
                }
            })
            .collect();
        Ok(LlamaConfig {
            architecture: arch.to_string(),
            variant,
            naming,
            vocab_size: cfg.vocab_size,
            hidden_size: cfg.hidden_size,
            intermediate_size,
            num_layers: cfg.num_layers,
            num_heads: cfg.num_heads,
            num_kv_heads: cfg.num_kv_heads,
            head_dim: cfg.head_dim,
            rot_dims,
            rope_layout,
            norm_eps: cfg.norm_eps.unwrap_or(1e-5) as f32,
            norm_weight_offset: if gemma && naming == WeightNaming::HuggingFace {
                1.0
            } else {
                0.0
            },
            embedding_scale: gemma.then(|| (cfg.hidden_size as f32).sqrt()),
            activation: if gemma {
                Activation::GeGluTanh
            } else {
                Activation::SwiGlu
            },
            attention_scale,
            attn_softcap: extra_f32("attn_logit_softcapping").filter(|&c| c > 0.0),
            final_softcap: extra_f32("final_logit_softcapping").filter(|&c| c > 0.0),
            qk_norm: matches!(variant, LlamaVariant::Qwen3 | LlamaVariant::Gemma3),
            sandwich_norms: sandwich,
            tie_word_embeddings: cfg.tie_word_embeddings,
            layers,
        })
    }

    /// transformers 5 writes Gemma3's rope as `{"full_attention": {...}, "sliding_attention":
    /// {...}}`, one parameter set per layer type.
    fn apply_per_type_rope(&mut self, per_type: &Value) -> Result<()> {
        for layer in &mut self.layers {
            let kind = if layer.sliding_window.is_some() {
                "sliding_attention"
            } else {
                "full_attention"
            };
            let Some(p) = per_type.get(kind) else {
                continue;
            };
            if let Some(theta) = p.get("rope_theta").and_then(Value::as_f64) {
                layer.rope_base = theta as f32;
            }
            let parsed = p.as_object().and_then(|o| {
                let kind = o.get("rope_type").and_then(Value::as_str)?;
                (kind != "default").then(|| cyb_format::RopeScaling {
                    kind: kind.to_string(),
                    factor: o.get("factor").and_then(Value::as_f64),
                    original_max_position: o
                        .get("original_max_position_embeddings")
                        .and_then(Value::as_u64)
                        .and_then(|v| usize::try_from(v).ok()),
                    extra: o.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                })
            });
            layer.rope_scaling = scaling_of(parsed.as_ref())?;
        }
        Ok(())
    }
}

/// The op's rope scaling for a file's scaling entry (llama.cpp GGUFs carry Llama 3 scaling as
/// the `rope_freqs` tensor instead, so they arrive here as `None`).
fn scaling_of(s: Option<&cyb_format::RopeScaling>) -> Result<RopeScaling> {
    let Some(s) = s else {
        return Ok(RopeScaling::None);
    };
    let bad = |reason: String| Error::InvalidConfig {
        field: "rope_scaling".into(),
        reason,
    };
    let factor =
        s.factor
            .ok_or_else(|| bad(format!("{} scaling without a factor", s.kind)))? as f32;
    let num = |k: &str| s.extra.get(k).and_then(Value::as_f64).map(|v| v as f32);
    match s.kind.as_str() {
        "linear" => Ok(RopeScaling::Linear { factor }),
        "llama3" => Ok(RopeScaling::Llama3 {
            factor,
            low_freq_factor: num("low_freq_factor").unwrap_or(1.0),
            high_freq_factor: num("high_freq_factor").unwrap_or(4.0),
            original_max_position: s
                .original_max_position
                .ok_or_else(|| bad("llama3 scaling without original_max_position".into()))?,
        }),
        other => Err(bad(format!(
            "\"{other}\" scaling is not supported by the LlamaStyle family yet"
        ))),
    }
}

/// Which layers use the sliding window: an explicit per-layer list when the source has one
/// (HF `layer_types`, GGUF `attention.sliding_window_pattern`), else Gemma's defaults (Gemma2:
/// even layers; Gemma3: five local then one global), else every layer when a window is set.
fn sliding_layers(
    cfg: &ModelConfig,
    variant: LlamaVariant,
    naming: WeightNaming,
) -> Result<Vec<bool>> {
    let n = cfg.num_layers;
    let key = match naming {
        WeightNaming::Gguf => "attention.sliding_window_pattern",
        WeightNaming::HuggingFace => "layer_types",
    };
    if let Some(list) = cfg.extra.get(key).and_then(Value::as_array) {
        let flags: Option<Vec<bool>> = list
            .iter()
            .map(|v| {
                v.as_bool()
                    .or_else(|| v.as_str().map(|s| s == "sliding_attention"))
            })
            .collect();
        return match flags {
            Some(f) if f.len() == n => Ok(f),
            _ => Err(Error::InvalidConfig {
                field: key.into(),
                reason: format!("expected {n} per-layer entries, got {}", list.len()),
            }),
        };
    }
    Ok((0..n)
        .map(|i| match variant {
            LlamaVariant::Gemma2 => i % 2 == 0,
            LlamaVariant::Gemma3 => (i + 1) % 6 != 0,
            _ => true,
        })
        .collect())
}

//! [`VisionConfig`] from a Hugging Face `config.json` (`model_type` vit, clip,
//! clip_vision_model, siglip, siglip_vision_model, dinov2, dinov2_with_registers).

use cyb_tensor::{Error, Result};
use serde_json::Value;

/// Which member of the family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VisionArch {
    Vit,
    Clip,
    Siglip,
    Dinov2,
}

/// The feed-forward activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    Gelu,
    GeluTanh,
    QuickGelu,
    Relu,
}

/// The sizes of one transformer tower.
#[derive(Clone, Debug, PartialEq)]
pub struct TowerConfig {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub eps: f32,
    pub act: Act,
}

impl TowerConfig {
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

/// CLIP's and SigLIP's text tower.
#[derive(Clone, Debug, PartialEq)]
pub struct TextConfig {
    pub tower: TowerConfig,
    pub vocab: usize,
    pub max_positions: usize,
    /// CLIP pools at the first `eos` token (or, with the legacy `eos_token_id` 2, at the highest
    /// token id); SigLIP at the last position.
    pub eos: Option<u32>,
    pub pad: Option<u32>,
}

/// A ViTStyle model's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct VisionConfig {
    pub arch: VisionArch,
    pub architecture: String,
    pub tower: TowerConfig,
    /// The square image size the position embeddings were made for.
    pub image_size: usize,
    pub patch: usize,
    pub channels: usize,
    pub registers: usize,
    /// Class names of a classification head (`id2label`), in id order.
    pub labels: Vec<String>,
    pub text: Option<TextConfig>,
    /// The prefix of the vision tensors' names (`vit.`, `vision_model.`, `dinov2.` or none).
    pub prefix: String,
}

fn invalid(field: &str, reason: impl Into<String>) -> Error {
    Error::InvalidConfig {
        field: field.into(),
        reason: reason.into(),
    }
}

fn uint(c: &Value, k: &str) -> Result<Option<usize>> {
    match c.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|&n| n > 0 && n < 1 << 24)
            .map(|n| Some(n as usize))
            .ok_or_else(|| invalid(k, format!("expected a positive integer, got {v}"))),
    }
}

fn need(c: &Value, k: &str, default: Option<usize>) -> Result<usize> {
    uint(c, k)?
        .or(default)
        .ok_or_else(|| invalid(k, "missing from config.json"))
}

fn act(c: &Value, default: &str) -> Result<Act> {
    let name = c
        .get("hidden_act")
        .and_then(Value::as_str)
        .unwrap_or(default);
    match name {
        "gelu" => Ok(Act::Gelu),
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Act::GeluTanh),
        "quick_gelu" => Ok(Act::QuickGelu),
        "relu" => Ok(Act::Relu),
        other => Err(invalid("hidden_act", format!("{other} is not supported"))),
    }
}

fn tower(c: &Value, eps_default: f64, act_default: &str) -> Result<TowerConfig> {
    let hidden = need(c, "hidden_size", None)?;
    let heads = need(c, "num_attention_heads", None)?;
    if hidden % heads != 0 {
        return Err(invalid(
            "num_attention_heads",
            format!("{heads} heads do not divide hidden_size {hidden}"),
        ));
    }
    let intermediate = match uint(c, "intermediate_size")? {
        Some(n) => n,
        // DINOv2 gives the feed-forward as a ratio.
        None => {
            let ratio = c.get("mlp_ratio").and_then(Value::as_f64).unwrap_or(4.0);
            (hidden as f64 * ratio) as usize
        }
    };
    Ok(TowerConfig {
        hidden,
        layers: need(c, "num_hidden_layers", None)?,
        heads,
        intermediate,
        eps: c
            .get("layer_norm_eps")
            .and_then(Value::as_f64)
            .unwrap_or(eps_default) as f32,
        act: act(c, act_default)?,
    })
}

/// The `model_type`s this family reads.
pub(crate) const VISION_TYPES: &[&str] = &[
    "vit",
    "clip",
    "clip_vision_model",
    "siglip",
    "siglip_vision_model",
    "dinov2",
    "dinov2_with_registers",
];

impl VisionConfig {
    /// True when `model_type` names a vision model (one of this family, or SigLIP 2's
    /// variable-resolution form, which loads only to be refused by name).
    pub fn is_vision_type(model_type: &str) -> bool {
        VISION_TYPES.contains(&model_type) || model_type == "siglip2"
    }

    /// From `config.json` and the names of the checkpoint's tensors.
    pub fn from_hf_json(c: &Value, names: &[String]) -> Result<VisionConfig> {
        let model_type = c.get("model_type").and_then(Value::as_str).unwrap_or("");
        let architecture = c
            .get("architectures")
            .and_then(|a| a.get(0))
            .and_then(Value::as_str)
            .unwrap_or(model_type)
            .to_string();
        let has = |n: &str| names.iter().any(|x| x == n);
        let (arch, vc, text, prefix) = match model_type {
            "vit" => {
                let prefix = if has("vit.embeddings.cls_token") {
                    "vit."
                } else {
                    ""
                };
                (VisionArch::Vit, c, None, prefix)
            }
            "dinov2" | "dinov2_with_registers" => {
                let prefix = if has("dinov2.embeddings.cls_token") {
                    "dinov2."
                } else {
                    ""
                };
                (VisionArch::Dinov2, c, None, prefix)
            }
            "clip" | "siglip" => {
                let vc = c
                    .get("vision_config")
                    .ok_or_else(|| invalid("vision_config", "missing from config.json"))?;
                let tc = c.get("text_config");
                let arch = if model_type == "clip" {
                    VisionArch::Clip
                } else {
                    VisionArch::Siglip
                };
                (arch, vc, tc, "vision_model.")
            }
            "clip_vision_model" => (VisionArch::Clip, c, None, "vision_model."),
            "siglip_vision_model" => (VisionArch::Siglip, c, None, "vision_model."),
            "siglip2" => {
                return Err(invalid(
                    "model_type",
                    "SigLIP 2's variable-resolution (NaFlex) models are not supported; the \
                     fixed-resolution SigLIP 2 checkpoints (model_type siglip) are",
                ))
            }
            other => {
                return Err(invalid(
                    "model_type",
                    format!("{other} is not a ViTStyle model"),
                ))
            }
        };
        let (eps, act_default) = match arch {
            VisionArch::Vit => (1e-12, "gelu"),
            VisionArch::Clip => (1e-5, "quick_gelu"),
            VisionArch::Siglip => (1e-6, "gelu_pytorch_tanh"),
            VisionArch::Dinov2 => (1e-6, "gelu"),
        };
        if vc.get("use_swiglu_ffn").and_then(Value::as_bool) == Some(true) {
            return Err(invalid(
                "use_swiglu_ffn",
                "DINOv2's SwiGLU feed-forward (the giant model) is not supported",
            ));
        }
        let tower = tower(vc, eps, act_default)?;
        let text = match text {
            Some(tc) => {
                let t = tower_text(tc, arch)?;
                Some(t)
            }
            None => None,
        };
        let labels = labels(c)?;
        Ok(VisionConfig {
            arch,
            architecture,
            tower,
            image_size: need(vc, "image_size", Some(224))?,
            patch: need(vc, "patch_size", Some(16))?,
            channels: need(vc, "num_channels", Some(3))?,
            registers: uint(vc, "num_register_tokens")?.unwrap_or(0),
            labels,
            text,
            prefix: prefix.to_string(),
        })
    }

    /// Tokens a `h × w` image becomes: patches, plus the class token and registers.
    pub fn tokens(&self, h: usize, w: usize) -> usize {
        let cls = usize::from(self.arch != VisionArch::Siglip);
        (h / self.patch) * (w / self.patch) + cls + self.registers
    }
}

fn tower_text(tc: &Value, arch: VisionArch) -> Result<TextConfig> {
    let (eps, act_default) = match arch {
        VisionArch::Clip => (1e-5, "quick_gelu"),
        _ => (1e-6, "gelu_pytorch_tanh"),
    };
    let id = |k: &str| tc.get(k).and_then(Value::as_u64).map(|v| v as u32);
    Ok(TextConfig {
        tower: tower(tc, eps, act_default)?,
        vocab: need(tc, "vocab_size", None)?,
        max_positions: need(tc, "max_position_embeddings", None)?,
        eos: if arch == VisionArch::Clip {
            id("eos_token_id")
        } else {
            None
        },
        pad: id("pad_token_id"),
    })
}

fn labels(c: &Value) -> Result<Vec<String>> {
    let Some(map) = c.get("id2label").and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    let mut pairs = Vec::with_capacity(map.len());
    for (k, v) in map {
        let i: usize = k
            .parse()
            .map_err(|_| invalid("id2label", format!("key {k:?} is not an index")))?;
        if i >= map.len() {
            return Err(invalid(
                "id2label",
                format!("index {i} with {} labels", map.len()),
            ));
        }
        pairs.push((i, v.as_str().unwrap_or_default().to_string()));
    }
    pairs.sort();
    Ok(pairs.into_iter().map(|(_, l)| l).collect())
}

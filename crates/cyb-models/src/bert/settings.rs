//! The encoder family's shared switches, leaf of the family's imports: the feed-forward
//! activation and what ModernBERT and Jina-v2 add to the family's `BertConfig`, read from
//! `config.json`, with the config-error helper the readers share.

use cyb_ops::GeluApprox;
use cyb_tensor::{Error, Result};
use serde_json::Value;

pub(super) fn invalid(field: &str, reason: impl Into<String>) -> Error {
    Error::InvalidConfig {
        field: field.into(),
        reason: reason.into(),
    }
}

/// The feed-forward activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BertActivation {
    Gelu(GeluApprox),
    Relu,
}

/// What ModernBERT adds to the family's config.
#[derive(Clone, Debug, PartialEq)]
pub struct ModernSettings {
    /// Per layer: `true` for global attention.
    pub global: Vec<bool>,
    /// Half width of the local window: `|i - j| ≤ window`.
    pub window: usize,
    pub rope_global: f32,
    pub rope_local: f32,
    /// The task head's activation (`classifier_activation`, transformers' name).
    pub head_activation: String,
    /// Sequence classification pools by the mean (`classifier_pooling: mean`), not the first
    /// token.
    pub mean_pool: bool,
}

impl ModernSettings {
    pub(super) fn from_hf_json(config: &Value, num_layers: usize) -> Result<ModernSettings> {
        let num = |k: &str| config.get(k).and_then(Value::as_f64);
        let local_attention = num("local_attention").unwrap_or(128.0) as usize;
        let global = match config.get("layer_types").and_then(Value::as_array) {
            Some(types) => types
                .iter()
                .map(|t| match t.as_str() {
                    Some("full_attention") => Ok(true),
                    Some("sliding_attention") => Ok(false),
                    _ => Err(invalid("layer_types", format!("unknown layer type {t}"))),
                })
                .collect::<Result<Vec<_>>>()?,
            None => {
                let every = num("global_attn_every_n_layers").unwrap_or(3.0).max(1.0) as usize;
                (0..num_layers).map(|i| i % every == 0).collect()
            }
        };
        if global.len() != num_layers {
            return Err(invalid(
                "layer_types",
                format!("{} entries for {num_layers} layers", global.len()),
            ));
        }
        let theta = |kind: &str, old: &str, default: f64| {
            config
                .get("rope_parameters")
                .and_then(|r| r.get(kind))
                .and_then(|r| r.get("rope_theta"))
                .and_then(Value::as_f64)
                .or_else(|| num(old))
                .unwrap_or(default) as f32
        };
        let pooling = config
            .get("classifier_pooling")
            .and_then(Value::as_str)
            .unwrap_or("cls");
        if !matches!(pooling, "cls" | "mean") {
            return Err(invalid(
                "classifier_pooling",
                format!("{pooling:?} (expected cls or mean)"),
            ));
        }
        Ok(ModernSettings {
            head_activation: config
                .get("classifier_activation")
                .and_then(Value::as_str)
                .unwrap_or("gelu")
                .into(),
            mean_pool: pooling == "mean",
            global,
            window: local_attention / 2,
            rope_global: theta("full_attention", "global_rope_theta", 160_000.0),
            rope_local: theta("sliding_attention", "local_rope_theta", 10_000.0),
        })
    }
}

/// What Jina-v2 adds to the family's config.
#[derive(Clone, Debug, PartialEq)]
pub struct JinaSettings {
    /// `true` for GELU (`geglu`), `false` for ReLU (`reglu`) on the gated half.
    pub gelu: bool,
}

impl JinaSettings {
    pub(super) fn from_hf_json(config: &Value) -> Result<JinaSettings> {
        let kind = config
            .get("feed_forward_type")
            .and_then(Value::as_str)
            .unwrap_or("geglu");
        let gelu = match kind {
            "geglu" | "glu" => true,
            "reglu" => false,
            other => {
                return Err(Error::InvalidConfig {
                    field: "feed_forward_type".into(),
                    reason: format!("\"{other}\": supported are geglu, glu and reglu"),
                })
            }
        };
        Ok(JinaSettings { gelu })
    }
}

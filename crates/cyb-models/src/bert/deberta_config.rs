//! `DebertaSettings`: what DeBERTa (v1, v2, v3) adds to the family's config, read from
//! `config.json`, with the relative-position bucketing it implies.

use super::settings::{invalid, BertActivation};
use cyb_ops::GeluApprox;
use cyb_tensor::Result;
use serde_json::Value;

/// What DeBERTa adds to the family's config.
#[derive(Clone, Debug, PartialEq)]
pub struct DebertaSettings {
    /// Whether relative attention is on at all (`relative_attention`).
    pub relative: bool,
    /// `position_buckets` (≤ 0: no log buckets).
    pub buckets: i64,
    /// `max_relative_positions`, resolved to `max_position_embeddings` when < 1.
    pub max_relative: i64,
    /// Half the rows of the relative table a layer reads (`buckets` when set, else
    /// `max_relative`).
    pub span: usize,
    pub c2p: bool,
    pub p2c: bool,
    /// Position keys/queries come from the content projections (`share_att_key`).
    pub share_att_key: bool,
    /// LayerNorm on the relative table (`norm_rel_ebd` contains `layer_norm`).
    pub norm_rel: bool,
    /// Absolute position embeddings added to the input (`position_biased_input`).
    pub position_biased_input: bool,
    /// Width of the embedding tables (`embedding_size`); projected to `hidden_size` when it
    /// differs.
    pub embedding_size: usize,
    /// The sequence head's pooler activation (`pooler_hidden_act`).
    pub pooler_act: BertActivation,
    /// transformers' `legacy` switch between masked-LM head layouts (default true); only
    /// consulted when a file holds both.
    pub legacy_mlm: bool,
    /// DeBERTa v1 (`model_type: deberta`): fused `in_proj`, `pos_proj` / `pos_q_proj`.
    pub v1: bool,
    /// deberta-v2-xlarge's convolution after the first layer (`conv_kernel_size` > 0).
    pub conv: Option<DebertaConv>,
}

/// DeBERTa-v2's `ConvLayer`: the first layer's output becomes
/// `LayerNorm(out_0 + act(conv1d(embeddings)))`, a same-length 1-D convolution over the
/// sequence of the (padding-zeroed) embedding output.
#[derive(Clone, Debug, PartialEq)]
pub struct DebertaConv {
    /// `conv_kernel_size` (odd, so the output keeps the sequence length).
    pub kernel: usize,
    /// `conv_act` (default tanh).
    pub act: ConvActivation,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConvActivation {
    Tanh,
    Gelu(GeluApprox),
    Relu,
}

impl DebertaConv {
    fn from_hf_json(config: &Value, kernel: i64) -> Result<DebertaConv> {
        if kernel % 2 == 0 {
            return Err(invalid(
                "conv_kernel_size",
                format!("{kernel}: an even kernel changes the sequence length"),
            ));
        }
        let groups = config
            .get("conv_groups")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        if groups != 1 {
            return Err(invalid(
                "conv_groups",
                format!("{groups}: only the ungrouped convolution (1) is supported"),
            ));
        }
        let act = match config
            .get("conv_act")
            .and_then(Value::as_str)
            .unwrap_or("tanh")
        {
            "tanh" => ConvActivation::Tanh,
            "gelu" => ConvActivation::Gelu(GeluApprox::Erf),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => {
                ConvActivation::Gelu(GeluApprox::Tanh)
            }
            "relu" => ConvActivation::Relu,
            other => {
                return Err(invalid(
                    "conv_act",
                    format!("\"{other}\": supported are tanh, gelu, gelu_new, relu"),
                ))
            }
        };
        Ok(DebertaConv {
            kernel: usize::try_from(kernel)
                .map_err(|_| invalid("conv_kernel_size", "too large"))?,
            act,
        })
    }
}

impl DebertaSettings {
    pub(super) fn from_hf_json(config: &Value, hidden: usize) -> Result<DebertaSettings> {
        let int = |k: &str| config.get(k).and_then(Value::as_i64);
        let flag = |k: &str, d: bool| config.get(k).and_then(Value::as_bool).unwrap_or(d);
        let v1 = config.get("model_type").and_then(Value::as_str) == Some("deberta");
        if v1 && flag("talking_head", false) {
            return Err(invalid(
                "talking_head",
                "DeBERTa v1's talking-head attention is not supported",
            ));
        }
        let conv = match int("conv_kernel_size").unwrap_or(0) {
            k if v1 || k <= 0 => None,
            k => Some(DebertaConv::from_hf_json(config, k)?),
        };
        if let Some(size) = int("attention_head_size") {
            let heads = int("num_attention_heads").unwrap_or(1).max(1);
            if size * heads != hidden as i64 {
                return Err(invalid(
                    "attention_head_size",
                    "a head size other than hidden_size / num_attention_heads",
                ));
            }
        }
        let relative = flag("relative_attention", false);
        let max_pos = int("max_position_embeddings").unwrap_or(512);
        let max_relative = match int("max_relative_positions").unwrap_or(-1) {
            m if m < 1 => max_pos,
            m => m,
        };
        // v1 has no log buckets, shared keys or table norm, whatever the config says.
        let buckets = match v1 {
            true => -1,
            false => int("position_buckets").unwrap_or(-1),
        };
        let span = if buckets > 0 { buckets } else { max_relative };
        let types: Vec<String> = match config.get("pos_att_type") {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_lowercase)
                .collect(),
            Some(Value::String(s)) => s.split('|').map(|t| t.trim().to_lowercase()).collect(),
            _ => Vec::new(),
        };
        if let Some(t) = types.iter().find(|t| !matches!(t.as_str(), "c2p" | "p2c")) {
            return Err(invalid(
                "pos_att_type",
                format!("\"{t}\": supported are c2p and p2c"),
            ));
        }
        let norm_rel = !v1
            && config
                .get("norm_rel_ebd")
                .and_then(Value::as_str)
                .is_some_and(|s| {
                    s.to_lowercase()
                        .split('|')
                        .any(|t| t.trim() == "layer_norm")
                });
        let act = config
            .get("pooler_hidden_act")
            .and_then(Value::as_str)
            .unwrap_or("gelu");
        let pooler_act = match act {
            "gelu" => BertActivation::Gelu(GeluApprox::Erf),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => {
                BertActivation::Gelu(GeluApprox::Tanh)
            }
            "relu" => BertActivation::Relu,
            other => {
                return Err(invalid(
                    "pooler_hidden_act",
                    format!("\"{other}\": supported are gelu, gelu_new, relu"),
                ))
            }
        };
        Ok(DebertaSettings {
            relative,
            buckets,
            max_relative,
            span: usize::try_from(span.max(1)).map_err(|_| invalid("position_buckets", "<1"))?,
            c2p: types.iter().any(|t| t == "c2p"),
            p2c: types.iter().any(|t| t == "p2c"),
            share_att_key: !v1 && flag("share_att_key", false),
            norm_rel,
            position_biased_input: flag("position_biased_input", true),
            embedding_size: int("embedding_size")
                .and_then(|e| usize::try_from(e).ok())
                .unwrap_or(hidden),
            pooler_act,
            legacy_mlm: flag("legacy", true),
            v1,
            conv,
        })
    }

    /// `1 / sqrt(d · (1 + number of position attention types))`.
    pub(super) fn scale(&self, head_dim: usize) -> f32 {
        let factor = 1 + usize::from(self.c2p) + usize::from(self.p2c);
        1.0 / ((head_dim * factor) as f32).sqrt()
    }

    /// transformers' `make_log_bucket_position` for one relative position, in f32.
    pub fn bucket(&self, rel: i64) -> i64 {
        if self.buckets <= 0 {
            return rel;
        }
        let mid = self.buckets / 2;
        if rel.abs() <= mid {
            return rel;
        }
        let abs = rel.abs() as f32;
        let midf = mid as f32;
        let base = (((self.max_relative - 1) as f64) / mid as f64) as f32;
        let log_pos = ((abs / midf).ln() / base.ln() * (mid - 1) as f32).ceil() + midf;
        rel.signum() * log_pos as i64
    }

    /// `δ(i, j)` for a sequence of `l` positions, row-major `[l, l]`; transposed when
    /// `transposed` (`[j, i]`, for the p2c gather over key rows).
    pub(super) fn index(&self, l: usize, transposed: bool) -> Vec<i64> {
        let span = self.span as i64;
        let mut out = Vec::with_capacity(l * l);
        for a in 0..l as i64 {
            for b in 0..l as i64 {
                let (i, j) = if transposed { (b, a) } else { (a, b) };
                out.push((self.bucket(i - j) + span).clamp(0, 2 * span - 1));
            }
        }
        out
    }
}

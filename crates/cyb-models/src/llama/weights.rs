//! The LlamaStyle weights: which tensors a model needs, under llama.cpp's or Hugging Face's
//! names, each checked for presence and shape at load time and then used in place (zero-copy
//! from the file mapping, in whatever dtype the file stores).
//!
//! Fused projections (Phi-3's qkv and gate_up) are recognized by the tensors the file holds,
//! not by the architecture name, so any member may come fused or split.

use super::config::{LlamaConfig, WeightNaming};
use crate::step::stack_rows;
use cyb_format::ModelFile;
use cyb_tensor::{Error, Result, Tensor};
use std::collections::HashSet;

/// A tensor's part in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Embed,
    OutputNorm,
    Output,
    RopeFreqs,
    AttnNorm,
    Q,
    K,
    V,
    Qkv,
    QBias,
    KBias,
    VBias,
    QNorm,
    KNorm,
    AttnOut,
    PostAttnNorm,
    FfnNorm,
    Gate,
    Up,
    GateUp,
    Down,
    PostFfwNorm,
}

/// llama.cpp's name for `role` of block `layer`.
fn gguf_name(role: Role, layer: usize) -> String {
    let block = |s: &str| format!("blk.{layer}.{s}");
    match role {
        Role::Embed => "token_embd.weight".into(),
        Role::OutputNorm => "output_norm.weight".into(),
        Role::Output => "output.weight".into(),
        Role::RopeFreqs => "rope_freqs.weight".into(),
        Role::AttnNorm => block("attn_norm.weight"),
        Role::Q => block("attn_q.weight"),
        Role::K => block("attn_k.weight"),
        Role::V => block("attn_v.weight"),
        Role::Qkv => block("attn_qkv.weight"),
        Role::QBias => block("attn_q.bias"),
        Role::KBias => block("attn_k.bias"),
        Role::VBias => block("attn_v.bias"),
        Role::QNorm => block("attn_q_norm.weight"),
        Role::KNorm => block("attn_k_norm.weight"),
        Role::AttnOut => block("attn_output.weight"),
        Role::PostAttnNorm => block("post_attention_norm.weight"),
        Role::FfnNorm => block("ffn_norm.weight"),
        Role::Gate => block("ffn_gate.weight"),
        // llama.cpp keeps a fused gate_up projection under the up name.
        Role::Up | Role::GateUp => block("ffn_up.weight"),
        Role::Down => block("ffn_down.weight"),
        Role::PostFfwNorm => block("post_ffw_norm.weight"),
    }
}

/// Hugging Face's name for `role` of layer `layer`. With sandwich norms (Gemma2/3),
/// `post_attention_layernorm` is the norm after attention and `pre_feedforward_layernorm` the
/// one before the MLP; in the plain block `post_attention_layernorm` is the one before the MLP.
fn hf_name(role: Role, layer: usize, sandwich: bool) -> String {
    let block = |s: &str| format!("model.layers.{layer}.{s}");
    match role {
        Role::Embed => "model.embed_tokens.weight".into(),
        Role::OutputNorm => "model.norm.weight".into(),
        Role::Output => "lm_head.weight".into(),
        // Hugging Face computes rope frequencies from the config; there is no such tensor.
        Role::RopeFreqs => "rope_freqs (not a Hugging Face tensor)".into(),
        Role::AttnNorm => block("input_layernorm.weight"),
        Role::Q => block("self_attn.q_proj.weight"),
        Role::K => block("self_attn.k_proj.weight"),
        Role::V => block("self_attn.v_proj.weight"),
        Role::Qkv => block("self_attn.qkv_proj.weight"),
        Role::QBias => block("self_attn.q_proj.bias"),
        Role::KBias => block("self_attn.k_proj.bias"),
        Role::VBias => block("self_attn.v_proj.bias"),
        Role::QNorm => block("self_attn.q_norm.weight"),
        Role::KNorm => block("self_attn.k_norm.weight"),
        Role::AttnOut => block("self_attn.o_proj.weight"),
        Role::PostAttnNorm => block("post_attention_layernorm.weight"),
        Role::FfnNorm if sandwich => block("pre_feedforward_layernorm.weight"),
        Role::FfnNorm => block("post_attention_layernorm.weight"),
        Role::Gate => block("mlp.gate_proj.weight"),
        Role::Up => block("mlp.up_proj.weight"),
        Role::GateUp => block("mlp.gate_up_proj.weight"),
        Role::Down => block("mlp.down_proj.weight"),
        Role::PostFfwNorm => block("post_feedforward_layernorm.weight"),
    }
}

/// The q, k and v projections, split or fused (`[q; k; v]` rows).
pub(super) enum QkvWeights {
    Split { q: Tensor, k: Tensor, v: Tensor },
    Fused(Tensor),
}

/// The gate and up projections, split or fused (`[gate; up]` rows).
pub(super) enum GateUpWeights {
    Split { gate: Tensor, up: Tensor },
    Fused(Tensor),
}

/// One transformer block.
pub(super) struct LayerWeights {
    pub attn_norm: Tensor,
    pub qkv: QkvWeights,
    pub q_bias: Option<Tensor>,
    pub k_bias: Option<Tensor>,
    pub v_bias: Option<Tensor>,
    pub q_norm: Option<Tensor>,
    pub k_norm: Option<Tensor>,
    pub attn_out: Tensor,
    pub post_attn_norm: Option<Tensor>,
    pub ffn_norm: Tensor,
    pub gate_up: GateUpWeights,
    pub down: Tensor,
    pub post_ffw_norm: Option<Tensor>,
}

/// Every weight of the model.
pub(super) struct LlamaWeights {
    pub embed: Tensor,
    pub output_norm: Tensor,
    /// The output projection `[vocab, hidden]` (the embedding itself when tied).
    pub output: Tensor,
    /// llama.cpp's per-pair rope frequency divisors (Llama 3.1 scaling in GGUF files).
    pub rope_freqs: Option<Tensor>,
    pub layers: Vec<LayerWeights>,
}

struct Loader<'a> {
    file: &'a ModelFile,
    names: HashSet<String>,
    cfg: &'a LlamaConfig,
}

impl Loader<'_> {
    fn name(&self, role: Role, layer: usize) -> String {
        match self.cfg.naming {
            WeightNaming::Gguf => gguf_name(role, layer),
            WeightNaming::HuggingFace => hf_name(role, layer, self.cfg.sandwich_norms),
        }
    }

    fn has(&self, role: Role, layer: usize) -> bool {
        self.names.contains(&self.name(role, layer))
    }

    fn required(&self, role: Role, layer: usize, dims: &[usize]) -> Result<Tensor> {
        let name = self.name(role, layer);
        if !self.names.contains(&name) {
            return Err(Error::MissingTensor {
                name,
                required_by: format!(
                    "{} ({:?} block) in {}",
                    self.cfg.architecture,
                    self.cfg.variant,
                    self.file.path().display()
                ),
            });
        }
        let t = self.file.tensor(&name)?;
        if t.dims() != dims {
            return Err(Error::ShapeMismatch {
                op: format!("tensor {name}"),
                expected: dims.to_vec(),
                got: t.dims().to_vec(),
            });
        }
        Ok(t)
    }

    fn optional(&self, role: Role, layer: usize, dims: &[usize]) -> Result<Option<Tensor>> {
        if self.has(role, layer) {
            self.required(role, layer, dims).map(Some)
        } else {
            Ok(None)
        }
    }
}

impl LlamaWeights {
    /// Finds every tensor `cfg` needs in `file` and checks its shape; with `stack`, small split
    /// q/k/v and gate/up projections are stacked into one weight each ([`STACK_MAX_BYTES`]).
    pub(super) fn load(file: &ModelFile, cfg: &LlamaConfig, stack: bool) -> Result<LlamaWeights> {
        let names = file.tensors().into_iter().map(|t| t.name).collect();
        let l = Loader { file, names, cfg };
        let (hidden, d, inter) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let (q_dim, kv_dim) = (cfg.num_heads * d, cfg.num_kv_heads * d);
        let embed = l.required(Role::Embed, 0, &[cfg.vocab_size, hidden])?;
        let output = if cfg.tie_word_embeddings {
            embed.clone()
        } else {
            l.required(Role::Output, 0, &[cfg.vocab_size, hidden])?
        };
        let rope_freqs = match cfg.naming {
            WeightNaming::Gguf => l.optional(Role::RopeFreqs, 0, &[cfg.rot_dims / 2])?,
            WeightNaming::HuggingFace => None,
        };
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            let norm = |role| l.required(role, i, &[hidden]);
            let head_norm = |role| l.required(role, i, &[d]);
            let qkv = if l.has(Role::Qkv, i) {
                QkvWeights::Fused(l.required(Role::Qkv, i, &[q_dim + 2 * kv_dim, hidden])?)
            } else {
                let q = l.required(Role::Q, i, &[q_dim, hidden])?;
                let k = l.required(Role::K, i, &[kv_dim, hidden])?;
                let v = l.required(Role::V, i, &[kv_dim, hidden])?;
                match stack_small(stack, &[&q, &k, &v]) {
                    Some(w) => QkvWeights::Fused(w),
                    None => QkvWeights::Split { q, k, v },
                }
            };
            let gate_up = if l.has(Role::Gate, i) {
                let gate = l.required(Role::Gate, i, &[inter, hidden])?;
                let up = l.required(Role::Up, i, &[inter, hidden])?;
                match stack_small(stack, &[&gate, &up]) {
                    Some(w) => GateUpWeights::Fused(w),
                    None => GateUpWeights::Split { gate, up },
                }
            } else {
                GateUpWeights::Fused(l.required(Role::GateUp, i, &[2 * inter, hidden])?)
            };
            let sandwich = cfg.sandwich_norms;
            layers.push(LayerWeights {
                attn_norm: norm(Role::AttnNorm)?,
                qkv,
                q_bias: l.optional(Role::QBias, i, &[q_dim])?,
                k_bias: l.optional(Role::KBias, i, &[kv_dim])?,
                v_bias: l.optional(Role::VBias, i, &[kv_dim])?,
                q_norm: cfg.qk_norm.then(|| head_norm(Role::QNorm)).transpose()?,
                k_norm: cfg.qk_norm.then(|| head_norm(Role::KNorm)).transpose()?,
                attn_out: l.required(Role::AttnOut, i, &[hidden, q_dim])?,
                post_attn_norm: sandwich.then(|| norm(Role::PostAttnNorm)).transpose()?,
                ffn_norm: norm(Role::FfnNorm)?,
                gate_up,
                down: l.required(Role::Down, i, &[hidden, inter])?,
                post_ffw_norm: sandwich.then(|| norm(Role::PostFfwNorm)).transpose()?,
            });
        }
        Ok(LlamaWeights {
            embed,
            output_norm: l.required(Role::OutputNorm, 0, &[hidden])?,
            output,
            rope_freqs,
            layers,
        })
    }
}

/// Projections of one input at most this large together are stacked into one weight at load:
/// a small model's decode step is bound by the number of ops, not by bytes (SmolLM2-135M:
/// q/k/v and gate/up stacked, +8% decode on F16, +4% on Q4_0, for 29% more resident memory on
/// F16), while a large model's gains nothing for a copy of its biggest matrices.
const STACK_MAX_BYTES: usize = 8 << 20;

/// [`stack_rows`] with `stack` when the parts hold at most [`STACK_MAX_BYTES`] together.
fn stack_small(stack: bool, parts: &[&Tensor]) -> Option<Tensor> {
    let bytes: usize = parts.iter().map(|p| p.storage().byte_len()).sum();
    (stack && bytes <= STACK_MAX_BYTES)
        .then(|| stack_rows(parts))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_rows_concatenates_rows() {
        let a = Tensor::from_f32(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let b = Tensor::from_f32(&[1, 3], &[7.0, 8.0, 9.0]).unwrap();
        let s = stack_rows(&[&a, &b]).unwrap();
        assert_eq!(s.dims(), [3, 3]);
        assert_eq!(
            s.to_f32_vec().unwrap(),
            (1..=9).map(|v| v as f32).collect::<Vec<_>>()
        );
        assert!(matches!(s.storage(), cyb_tensor::Storage::Shared { .. }));
        let wide = Tensor::from_f32(&[1, 4], &[0.0; 4]).unwrap();
        assert!(stack_rows(&[&a, &wide]).is_none(), "widths differ");
        let half = Tensor::from_bytes(&[1, 3], cyb_tensor::DType::F16, &[0; 6]).unwrap();
        assert!(stack_rows(&[&a, &half]).is_none(), "dtypes differ");
    }
}

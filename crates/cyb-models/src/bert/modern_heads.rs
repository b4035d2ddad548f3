//! ModernBERT's task heads, as transformers' `ModernBertFor{MaskedLM, SequenceClassification,
//! TokenClassification}`:
//!
//! ```text
//! head(h) = LayerNorm(act(dense(h)))          (ModernBertPredictionHead; biases per config)
//! masked LM:       decoder(head(h)) per token   (decoder tied to the token embeddings unless saved)
//! sequence class.: classifier(head(pool(h)))    pool: first token (`cls`) or mean of the sequence
//! token class.:    classifier(head(h)) per token
//! ```

use super::config::BertHead;
use super::settings::{invalid, ModernSettings};
use crate::step::Linear;
use crate::step::Step;
use cyb_ops::{GeluApprox, Op};
use cyb_tensor::{Result, Tensor};

/// A loaded head.
pub(super) struct ModernHead {
    pub(super) kind: BertHead,
    dense: Linear,
    act: Op,
    norm: (Tensor, Option<Tensor>),
    /// The decoder (masked LM) or classifier.
    pub(super) out: Linear,
    /// Sequence classification pools by the mean, not the first token.
    pub(super) mean_pool: bool,
}

/// transformers' `ACT2FN` names a ModernBERT head may use.
fn activation(name: &str) -> Result<Op> {
    Ok(match name {
        "gelu" => Op::Gelu {
            approx: GeluApprox::Erf,
        },
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Op::Gelu {
            approx: GeluApprox::Tanh,
        },
        "relu" => Op::Relu,
        "silu" | "swish" => Op::Silu,
        "tanh" => Op::Tanh,
        other => {
            return Err(invalid(
                "classifier_activation",
                format!("{other:?} is not supported"),
            ))
        }
    })
}

impl ModernHead {
    /// The head `kind` asks for, from tensors fetched by `tensor(name, dims, required)`
    /// (head names have no `model.` prefix). `embed` is the decoder when none is saved.
    pub(super) fn load(
        kind: BertHead,
        settings: &ModernSettings,
        hidden: usize,
        labels: usize,
        embed: &Tensor,
        tensor: impl Fn(&str, &[usize], bool) -> Result<Option<Tensor>>,
    ) -> Result<Option<ModernHead>> {
        if kind == BertHead::None {
            return Ok(None);
        }
        let need = |name: &str, dims: &[usize]| {
            tensor(name, dims, true)?.ok_or_else(|| invalid(name, "missing"))
        };
        let out = if kind == BertHead::MaskedLm {
            let vocab = embed.dims()[0];
            Linear {
                w: match tensor("decoder.weight", &[vocab, hidden], false)? {
                    Some(w) => w,
                    None => embed.clone(),
                },
                b: tensor("decoder.bias", &[vocab], false)?,
            }
        } else {
            Linear {
                w: need("classifier.weight", &[labels, hidden])?,
                b: tensor("classifier.bias", &[labels], false)?,
            }
        };
        Ok(Some(ModernHead {
            kind,
            dense: Linear {
                w: need("head.dense.weight", &[hidden, hidden])?,
                b: tensor("head.dense.bias", &[hidden], false)?,
            },
            act: activation(&settings.head_activation)?,
            norm: (
                need("head.norm.weight", &[hidden])?,
                tensor("head.norm.bias", &[hidden], false)?,
            ),
            out,
            mean_pool: settings.mean_pool,
        }))
    }

    /// `out(head(x))` for the rows of `x`.
    pub(super) fn run(&self, step: &mut Step<'_>, x: &Tensor, eps: f32) -> Result<Tensor> {
        let y = step.linear(x, &self.dense)?;
        let y = step.run(self.act.clone(), &[&y])?;
        let op = Op::LayerNorm { eps };
        let y = match &self.norm.1 {
            Some(b) => step.run(op, &[&y, &self.norm.0, b])?,
            None => step.run(op, &[&y, &self.norm.0])?,
        };
        step.linear(&y, &self.out)
    }
}

//! ModernBERT, the pre-LN member of the encoder family:
//!
//! ```text
//! x = LayerNorm(tok_embeddings[id])                     (no position table: rope)
//! per layer:  x += Wo(attention(rope(q), rope(k), v))    on LayerNorm(x) (layer 0: x itself)
//!             x += Wo(gelu(a) · g), [a; g] = Wi(LayerNorm(x))
//! x = LayerNorm(x)
//! ```
//! Attention alternates between global layers and local ones whose tokens see only the keys
//! within `local_attention / 2` positions on either side, with a rope base per kind (Hugging
//! Face `layer_types` and `rope_parameters`, or the older `global_attn_every_n_layers`,
//! `global_rope_theta`, `local_rope_theta`). No biases unless the config asks for them.
//! Sequences of a batch are packed back to back and attend one at a time (see
//! [`super::batch`]).

use super::batch;
use super::config::{BertConfig, BertHead};
use super::modern_heads::ModernHead;
use super::pooling::{EncoderOutput, Pooling};
use super::settings::{invalid, ModernSettings};
use crate::step::Linear;
use crate::step::Step;
use cyb_backend::{Dispatcher, ExecContext};
use cyb_format::ModelFile;
use cyb_ops::{GeluApprox, Op, RopeLayout, RopeScaling};
use cyb_tensor::{Error, Result, Tensor};
use std::collections::HashSet;
use std::sync::Arc;

struct ModernLayer {
    attn_norm: Option<(Tensor, Option<Tensor>)>,
    wqkv: Linear,
    wo: Linear,
    mlp_norm: (Tensor, Option<Tensor>),
    wi: Linear,
    mlp_out: Linear,
}

/// A loaded ModernBERT encoder.
pub struct ModernBertModel {
    config: BertConfig,
    modern: ModernSettings,
    embed: Tensor,
    embed_norm: (Tensor, Option<Tensor>),
    layers: Vec<ModernLayer>,
    final_norm: (Tensor, Option<Tensor>),
    head: Option<ModernHead>,
    dispatcher: Arc<Dispatcher>,
}

impl std::fmt::Debug for ModernBertModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModernBertModel")
            .field("config", &self.config)
            .field("modern", &self.modern)
            .finish_non_exhaustive()
    }
}

struct Loader<'a> {
    file: &'a ModelFile,
    names: HashSet<String>,
    prefix: String,
}

impl Loader<'_> {
    fn tensor(&self, name: &str, dims: &[usize]) -> Result<Tensor> {
        let name = format!("{}{name}", self.prefix);
        if !self.names.contains(&name) {
            return Err(Error::MissingTensor {
                name,
                required_by: format!("modernbert in {}", self.file.path().display()),
            });
        }
        let t = self.file.tensor(&name)?;
        if t.dims() != dims {
            return Err(Error::shape(format!("tensor {name}"), dims, t.dims()));
        }
        Ok(t)
    }

    fn optional(&self, name: &str, dims: &[usize]) -> Result<Option<Tensor>> {
        if self.names.contains(&format!("{}{name}", self.prefix)) {
            self.tensor(name, dims).map(Some)
        } else {
            Ok(None)
        }
    }

    fn linear(&self, name: &str, out: usize, inp: usize) -> Result<Linear> {
        Ok(Linear {
            w: self.tensor(&format!("{name}.weight"), &[out, inp])?,
            b: self.optional(&format!("{name}.bias"), &[out])?,
        })
    }

    fn norm(&self, name: &str, d: usize) -> Result<(Tensor, Option<Tensor>)> {
        Ok((
            self.tensor(&format!("{name}.weight"), &[d])?,
            self.optional(&format!("{name}.bias"), &[d])?,
        ))
    }
}

impl ModernBertModel {
    /// Loads a Hugging Face ModernBERT directory (`model_type: modernbert`).
    pub fn load(file: &ModelFile, dispatcher: Arc<Dispatcher>) -> Result<ModernBertModel> {
        let config = BertConfig::from_file(file)?;
        let modern = config
            .modern
            .clone()
            .ok_or_else(|| invalid("model_type", "not a ModernBERT config"))?;
        let names: HashSet<String> = file.tensors().into_iter().map(|t| t.name).collect();
        let prefix = if names.contains("model.embeddings.tok_embeddings.weight") {
            "model."
        } else {
            ""
        };
        let l = Loader {
            file,
            names,
            prefix: prefix.into(),
        };
        let (h, f) = (config.hidden_size, config.intermediate_size);
        let layers = (0..config.num_layers)
            .map(|i| {
                let b = format!("layers.{i}");
                Ok(ModernLayer {
                    attn_norm: if i == 0 {
                        None
                    } else {
                        Some(l.norm(&format!("{b}.attn_norm"), h)?)
                    },
                    wqkv: l.linear(&format!("{b}.attn.Wqkv"), 3 * h, h)?,
                    wo: l.linear(&format!("{b}.attn.Wo"), h, h)?,
                    mlp_norm: l.norm(&format!("{b}.mlp_norm"), h)?,
                    wi: l.linear(&format!("{b}.mlp.Wi"), 2 * f, h)?,
                    mlp_out: l.linear(&format!("{b}.mlp.Wo"), h, f)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let embed = l.tensor("embeddings.tok_embeddings.weight", &[config.vocab_size, h])?;
        // Heads sit beside the encoder, without its `model.` prefix.
        let heads = Loader {
            file,
            names: l.names.clone(),
            prefix: String::new(),
        };
        let head = ModernHead::load(
            config.head,
            &modern,
            h,
            config.labels.len(),
            &embed,
            |name, dims, required| {
                if required {
                    heads.tensor(name, dims).map(Some)
                } else {
                    heads.optional(name, dims)
                }
            },
        )?;
        Ok(ModernBertModel {
            head,
            embed,
            embed_norm: l.norm("embeddings.norm", h)?,
            layers,
            final_norm: l.norm("final_norm", h)?,
            config,
            modern,
            dispatcher,
        })
    }

    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The final hidden states of every token of each sequence.
    pub fn hidden_states(&self, seqs: &[Vec<u32>]) -> Result<EncoderOutput> {
        let h = self.config.hidden_size;
        let host = self.in_step(seqs, |_, _, x| Ok(x))?;
        Ok(EncoderOutput {
            hidden: h,
            states: split_rows(&host, seqs, h)?,
        })
    }

    /// Masked-LM vocabulary logits, `[len_i, vocab]` row-major per sequence
    /// (`ModernBertForMaskedLM`).
    pub fn masked_lm_logits(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let head = self.head_of(BertHead::MaskedLm, "masked LM")?;
        let eps = self.config.norm_eps;
        let host = self.in_step(seqs, |_, step, x| head.run(step, &x, eps))?;
        split_rows(&host, seqs, self.config.vocab_size)
    }

    /// Masked-LM vocabulary logits of the tokens at `positions` of one sequence only,
    /// `[positions.len(), vocab]` row-major (the head runs on those rows alone).
    pub fn masked_lm_logits_at(&self, seq: &[u32], positions: &[usize]) -> Result<Vec<f32>> {
        super::model::check_positions(seq, positions)?;
        let head = self.head_of(BertHead::MaskedLm, "masked LM")?;
        let eps = self.config.norm_eps;
        self.in_step(std::slice::from_ref(&seq.to_vec()), |_, step, x| {
            let x = super::model::rows_at(step, &x, 0, positions)?;
            head.run(step, &x, eps)
        })
    }

    /// Per-token label logits, `[len_i, labels]` per sequence
    /// (`ModernBertForTokenClassification`).
    pub fn token_logits(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let head = self.head_of(BertHead::TokenClassification, "token classification")?;
        let eps = self.config.norm_eps;
        let host = self.in_step(seqs, |_, step, x| head.run(step, &x, eps))?;
        split_rows(&host, seqs, self.config.labels.len())
    }

    /// Label logits per sequence (`ModernBertForSequenceClassification`): the first token's
    /// state, or the mean of the sequence's, through the head.
    pub fn sequence_logits(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let head = self.head_of(BertHead::SequenceClassification, "sequence classification")?;
        let pooling = if head.mean_pool {
            Pooling::Mean
        } else {
            Pooling::Cls
        };
        let pooled: Vec<f32> = self.hidden_states(seqs)?.pool(pooling, false).concat();
        let x = Tensor::from_f32(&[seqs.len(), self.config.hidden_size], &pooled)?;
        let eps = self.config.norm_eps;
        let host = self.steps(|step| head.run(step, &x, eps))?;
        let n = self.config.labels.len();
        Ok(host.chunks(n.max(1)).map(<[f32]>::to_vec).collect())
    }

    fn head_of(&self, kind: BertHead, what: &str) -> Result<&ModernHead> {
        self.head
            .as_ref()
            .filter(|h| h.kind == kind)
            .ok_or_else(|| {
                Error::invalid(
                    what,
                    format!(
                        "this ModernBERT checkpoint has no {what} head (config.json names {})",
                        self.config.architecture
                    ),
                )
            })
    }

    /// Runs the encoder on `seqs` (packed back to back) and then `then` on its output, in one
    /// step; the result on the host.
    fn in_step(
        &self,
        seqs: &[Vec<u32>],
        then: impl FnOnce(&Self, &mut Step<'_>, Tensor) -> Result<Tensor>,
    ) -> Result<Vec<f32>> {
        batch::check(&self.config, seqs)?;
        let ids: Vec<i64> = seqs.iter().flatten().map(|&t| i64::from(t)).collect();
        let ids = Tensor::from_i64(&[ids.len()], &ids)?;
        self.steps(|step| {
            let x = self.encode(step, &ids, seqs)?;
            then(self, step, x)
        })
    }

    /// `body` inside one dispatcher step; its result on the host.
    fn steps(&self, body: impl FnOnce(&mut Step<'_>) -> Result<Tensor>) -> Result<Vec<f32>> {
        let mut step = Step {
            dispatcher: &self.dispatcher,
            ctx: ExecContext::default(),
        };
        let begun = self.dispatcher.begin_step(&mut step.ctx);
        let result = begun
            .and_then(|()| body(&mut step))
            .and_then(|t| self.dispatcher.to_host(&t));
        let ended = self.dispatcher.end_step(&mut step.ctx);
        let x = result?;
        ended?;
        x.to_f32_vec()
    }

    fn norm(
        &self,
        step: &mut Step<'_>,
        x: &Tensor,
        n: &(Tensor, Option<Tensor>),
    ) -> Result<Tensor> {
        let op = Op::LayerNorm {
            eps: self.config.norm_eps,
        };
        match &n.1 {
            Some(b) => step.run(op, &[x, &n.0, b]),
            None => step.run(op, &[x, &n.0]),
        }
    }

    fn encode(&self, step: &mut Step<'_>, ids: &Tensor, seqs: &[Vec<u32>]) -> Result<Tensor> {
        let x = step.run(Op::Embedding, &[&self.embed, ids])?;
        let mut x = self.norm(step, &x, &self.embed_norm)?;
        for (layer, &global) in self.layers.iter().zip(&self.modern.global) {
            let hn = match &layer.attn_norm {
                Some(n) => self.norm(step, &x, n)?,
                None => x.clone(),
            };
            let a = self.attention(step, layer, global, &hn, seqs)?;
            x = step.run(Op::Add, &[&x, &a])?;
            let hn = self.norm(step, &x, &layer.mlp_norm)?;
            let gi = step.linear(&hn, &layer.wi)?;
            let act = step.run(
                Op::GeGlu {
                    approx: GeluApprox::Erf,
                },
                &[&gi],
            )?;
            let m = step.linear(&act, &layer.mlp_out)?;
            x = step.run(Op::Add, &[&x, &m])?;
        }
        self.norm(step, &x, &self.final_norm)
    }

    fn attention(
        &self,
        step: &mut Step<'_>,
        layer: &ModernLayer,
        global: bool,
        x: &Tensor,
        seqs: &[Vec<u32>],
    ) -> Result<Tensor> {
        let c = &self.config;
        let (nh, d) = (c.num_heads, c.head_dim);
        let qkv = step.linear(x, &layer.wqkv)?;
        let rope = Op::Rope {
            layout: RopeLayout::Neox,
            rot_dims: d,
            base: if global {
                self.modern.rope_global
            } else {
                self.modern.rope_local
            },
            scaling: RopeScaling::None,
        };
        let mut parts = Vec::with_capacity(seqs.len());
        let mut start = 0usize;
        for s in seqs {
            let n = s.len();
            let rows = Op::Slice {
                axis: 0,
                start: start as isize,
                end: (start + n) as isize,
                step: 1,
            };
            start += n;
            let t = step.run(rows, &[&qkv])?;
            // Wqkv rows are [q; k; v], each heads × head_dim.
            let t = step.reshape(&t, &[n, 3, nh, d])?;
            let pick = |step: &mut Step<'_>, j: isize| -> Result<Tensor> {
                let part = Op::Slice {
                    axis: 1,
                    start: j,
                    end: j + 1,
                    step: 1,
                };
                let p = step.run(part, &[&t])?;
                step.reshape(&p, &[n, nh, d])
            };
            let positions: Vec<i64> = (0..n as i64).collect();
            let positions = Tensor::from_i64(&[n], &positions)?;
            let q = pick(step, 0)?;
            let q = step.run(rope.clone(), &[&q, &positions])?;
            let k = pick(step, 1)?;
            let k = step.run(rope.clone(), &[&k, &positions])?;
            let v = pick(step, 2)?;
            let w = self.modern.window;
            let a = if global || n <= w + 1 {
                step.attend(d, [&q, &k, &v], None)?
            } else {
                let mask: Vec<f32> = (0..n)
                    .flat_map(|i| {
                        (0..n).map(move |j| {
                            if i.abs_diff(j) <= w {
                                0.0
                            } else {
                                f32::NEG_INFINITY
                            }
                        })
                    })
                    .collect();
                let mask = Tensor::from_f32(&[1, n, n], &mask)?;
                step.attend(d, [&q, &k, &v], Some(&mask))?
            };
            parts.push(step.reshape(&a, &[n, nh * d])?);
        }
        let refs: Vec<&Tensor> = parts.iter().collect();
        let a = step.run(Op::Concat { axis: 0 }, &refs)?;
        step.linear(&a, &layer.wo)
    }
}

/// `rows`-wide results of the packed tokens, split per sequence.
fn split_rows(host: &[f32], seqs: &[Vec<u32>], width: usize) -> Result<Vec<Vec<f32>>> {
    let mut out = Vec::with_capacity(seqs.len());
    let mut start = 0;
    for s in seqs {
        let rows = host
            .get(start * width..(start + s.len()) * width)
            .ok_or_else(|| Error::invalid("modernbert", "result shorter than the batch"))?;
        out.push(rows.to_vec());
        start += s.len();
    }
    Ok(out)
}

//! The BertStyle encoder family: BERT (MiniLM, e5, bge), RoBERTa, XLM-RoBERTa, CamemBERT and
//! DistilBERT, as one post-LN block whose differences are switches of [`BertConfig`].
//!
//! ```text
//! x = LayerNorm(word[id] + position[pos] (+ token_type[0]))
//! per block:  x = LayerNorm(x + o_proj(attention(q, k, v; padding mask)))
//!             x = LayerNorm(x + down(act(up(x))))
//! ```
//! Attention is bidirectional. A batch of sequences of different lengths is right-padded to
//! the longest with the pad id and an additive `-inf` mask hides the padding keys, so each
//! sequence's real tokens get exactly the states they would get alone. Every step is an `Op`
//! run by the dispatcher; pooling (see [`crate::bert_pooling`]) is done on the host rows.

use crate::bert_config::{BertActivation, BertConfig, BertVariant};
use crate::bert_pooling::EncoderOutput;
use crate::bert_weights::{BertLayer, BertWeights, HeadWeights, Linear, Norm};
use cyb_backend::{Dispatcher, ExecContext};
use cyb_format::ModelFile;
use cyb_ops::Op;
use cyb_tensor::{Error, Result, Tensor};
use std::sync::Arc;

/// A loaded BertStyle model: config, weights in place in the file mapping, and the
/// dispatcher that runs its ops.
pub struct BertModel {
    config: BertConfig,
    weights: BertWeights,
    dispatcher: Arc<Dispatcher>,
}

impl std::fmt::Debug for BertModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BertModel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Runs ops through the dispatcher within one forward step.
struct Step<'a> {
    dispatcher: &'a Dispatcher,
    ctx: ExecContext,
}

impl Step<'_> {
    fn run(&mut self, op: Op, inputs: &[&Tensor]) -> Result<Tensor> {
        let inputs: Vec<Tensor> = inputs.iter().map(|&t| t.clone()).collect();
        let mut out = self.dispatcher.run_with(&op, &inputs, &mut self.ctx)?;
        if out.is_empty() {
            return Err(Error::invalid(op.name(), "returned no output"));
        }
        Ok(out.swap_remove(0))
    }

    fn linear(&mut self, x: &Tensor, l: &Linear) -> Result<Tensor> {
        let mm = Op::MatMul {
            rhs_transposed: true,
        };
        let y = self.run(mm, &[x, &l.w])?;
        match &l.b {
            Some(b) => self.run(Op::Add, &[&y, b]),
            None => Ok(y),
        }
    }

    fn layer_norm(&mut self, x: &Tensor, n: &Norm, eps: f32) -> Result<Tensor> {
        self.run(Op::LayerNorm { eps }, &[x, &n.w, &n.b])
    }

    fn reshape(&mut self, x: &Tensor, dims: &[usize]) -> Result<Tensor> {
        let dims = dims.iter().map(|&d| d as isize).collect();
        self.run(Op::Reshape { dims }, &[x])
    }

    fn permute(&mut self, x: &Tensor, perm: &[usize]) -> Result<Tensor> {
        self.run(
            Op::Permute {
                perm: perm.to_vec(),
            },
            &[x],
        )
    }
}

/// A right-padded batch: ids, positions and token types `[b, l]`, the optional padding mask
/// `[b, 1, 1, l]`, and each sequence's real length.
struct Batch {
    ids: Tensor,
    positions: Tensor,
    types: Tensor,
    mask: Option<Tensor>,
    lens: Vec<usize>,
    len: usize,
}

impl BertModel {
    /// Resolves the config from `file` and checks every tensor it needs (`MissingTensor` /
    /// `ShapeMismatch` name the tensor).
    pub fn load(file: &ModelFile, dispatcher: Arc<Dispatcher>) -> Result<BertModel> {
        let config = BertConfig::from_file(file)?;
        let weights = BertWeights::load(file, &config)?;
        Ok(BertModel {
            config,
            weights,
            dispatcher,
        })
    }

    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.dispatcher
    }

    /// The final hidden states of every real token of each sequence.
    pub fn hidden_states(&self, seqs: &[Vec<u32>]) -> Result<EncoderOutput> {
        let h = self.config.hidden_size;
        let (x, batch) = self.in_step(seqs, |m, step, batch| m.encode(step, batch))?;
        let host = x.to_f32_vec()?;
        let states = batch
            .lens
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let start = i * batch.len * h;
                host.get(start..start + n * h)
                    .map(<[f32]>::to_vec)
                    .ok_or_else(|| Error::invalid("bert", "hidden states shorter than the batch"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(EncoderOutput { hidden: h, states })
    }

    /// Sequence classification logits `[labels]` per sequence (models saved as
    /// `*ForSequenceClassification`).
    pub fn sequence_logits(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let HeadWeights::Sequence { dense, out } = &self.weights.head else {
            return Err(self.no_head("sequence classification"));
        };
        let (h, n) = (self.config.hidden_size, self.config.labels.len());
        let (logits, batch) = self.in_step(seqs, |m, step, batch| {
            let x = m.encode(step, batch)?;
            let b = batch.lens.len();
            let x = step.reshape(&x, &[b, batch.len, h])?;
            let first = Op::Slice {
                axis: 1,
                start: 0,
                end: 1,
                step: 1,
            };
            let x = step.run(first, &[&x])?;
            let x = step.reshape(&x, &[b, h])?;
            let x = step.linear(&x, dense)?;
            let act = match m.config.variant {
                BertVariant::DistilBert => Op::Relu,
                BertVariant::Bert | BertVariant::Roberta => Op::Tanh,
            };
            let x = step.run(act, &[&x])?;
            step.linear(&x, out)
        })?;
        let host = logits.to_f32_vec()?;
        Ok(host
            .chunks_exact(n.max(1))
            .take(batch.lens.len())
            .map(<[f32]>::to_vec)
            .collect())
    }

    /// Token classification logits, `[len_i, labels]` row-major per sequence (models saved
    /// as `*ForTokenClassification`).
    pub fn token_logits(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let HeadWeights::Token { out } = &self.weights.head else {
            return Err(self.no_head("token classification"));
        };
        let n = self.config.labels.len();
        let (logits, batch) = self.in_step(seqs, |m, step, batch| {
            let x = m.encode(step, batch)?;
            step.linear(&x, out)
        })?;
        let host = logits.to_f32_vec()?;
        batch
            .lens
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let start = i * batch.len * n;
                host.get(start..start + len * n)
                    .map(<[f32]>::to_vec)
                    .ok_or_else(|| Error::invalid("bert", "logits shorter than the batch"))
            })
            .collect()
    }

    fn no_head(&self, what: &str) -> Error {
        Error::invalid(
            what,
            format!(
                "this {} checkpoint has no {what} head (its config.json names no \
                 *For{}Classification class)",
                self.config.architecture,
                if what.starts_with("token") {
                    "Token"
                } else {
                    "Sequence"
                }
            ),
        )
    }

    /// Builds the batch, runs `body` inside one forward step (always ended, also after an
    /// error, once the result is on the host) and returns its host result.
    fn in_step(
        &self,
        seqs: &[Vec<u32>],
        body: impl FnOnce(&Self, &mut Step<'_>, &Batch) -> Result<Tensor>,
    ) -> Result<(Tensor, Batch)> {
        let batch = self.batch(seqs)?;
        let mut step = Step {
            dispatcher: &self.dispatcher,
            ctx: ExecContext::default(),
        };
        let begun = self.dispatcher.begin_step(&mut step.ctx);
        let result = begun
            .and_then(|()| body(self, &mut step, &batch))
            .and_then(|t| self.dispatcher.to_host(&t));
        let ended = self.dispatcher.end_step(&mut step.ctx);
        let out = result?;
        ended?;
        Ok((out, batch))
    }

    fn batch(&self, seqs: &[Vec<u32>]) -> Result<Batch> {
        let c = &self.config;
        if seqs.is_empty() {
            return Err(Error::invalid("encode", "no sequences to encode"));
        }
        let max = c.max_tokens();
        for (i, s) in seqs.iter().enumerate() {
            if s.is_empty() {
                return Err(Error::invalid("encode", format!("sequence {i} is empty")));
            }
            if s.len() > max {
                return Err(Error::invalid(
                    "encode",
                    format!(
                        "sequence {i} has {} tokens; the model takes at most {max} \
                         (max_position_embeddings {})",
                        s.len(),
                        c.max_position
                    ),
                ));
            }
            if let Some(id) = s.iter().find(|&&id| id as usize >= c.vocab_size) {
                return Err(Error::invalid(
                    "encode",
                    format!(
                        "token id {id} is outside the vocabulary of {}",
                        c.vocab_size
                    ),
                ));
            }
        }
        let b = seqs.len();
        let len = seqs.iter().map(Vec::len).max().unwrap_or(0);
        let pad = i64::from(c.pad_token_id);
        let mut ids = Vec::with_capacity(b * len);
        let mut positions = Vec::with_capacity(b * len);
        for s in seqs {
            for j in 0..len {
                let real = s.get(j).map(|&t| i64::from(t));
                ids.push(real.unwrap_or(pad));
                // RoBERTa gives padding the pad id's own position (transformers'
                // create_position_ids_from_input_ids); BERT numbers every slot.
                positions.push(match (real, c.variant) {
                    (None, BertVariant::Roberta) => pad,
                    _ => (c.position_offset + j) as i64,
                });
            }
        }
        let lens: Vec<usize> = seqs.iter().map(Vec::len).collect();
        let mask = if lens.iter().all(|&n| n == len) {
            None
        } else {
            let m: Vec<f32> = lens
                .iter()
                .flat_map(|&n| (0..len).map(move |j| if j < n { 0.0 } else { f32::NEG_INFINITY }))
                .collect();
            Some(Tensor::from_f32(&[b, 1, 1, len], &m)?)
        };
        Ok(Batch {
            ids: Tensor::from_i64(&[b * len], &ids)?,
            positions: Tensor::from_i64(&[b * len], &positions)?,
            types: Tensor::from_i64(&[b * len], &vec![0; b * len])?,
            mask,
            lens,
            len,
        })
    }

    /// Embeddings and every block; returns the final states `[b·l, hidden]`.
    fn encode(&self, step: &mut Step<'_>, batch: &Batch) -> Result<Tensor> {
        let (c, w) = (&self.config, &self.weights);
        let mut x = step.run(Op::Embedding, &[&w.word, &batch.ids])?;
        let p = step.run(Op::Embedding, &[&w.position, &batch.positions])?;
        x = step.run(Op::Add, &[&x, &p])?;
        if let Some(tt) = &w.token_type {
            let t = step.run(Op::Embedding, &[tt, &batch.types])?;
            x = step.run(Op::Add, &[&x, &t])?;
        }
        x = step.layer_norm(&x, &w.embed_norm, c.norm_eps)?;
        for layer in &w.layers {
            let a = self.attention(step, layer, &x, batch)?;
            let y = step.run(Op::Add, &[&x, &a])?;
            x = step.layer_norm(&y, &layer.attn_norm, c.norm_eps)?;
            let f = self.feed_forward(step, layer, &x)?;
            let y = step.run(Op::Add, &[&x, &f])?;
            x = step.layer_norm(&y, &layer.ffn_norm, c.norm_eps)?;
        }
        Ok(x)
    }

    fn attention(
        &self,
        step: &mut Step<'_>,
        layer: &BertLayer,
        x: &Tensor,
        batch: &Batch,
    ) -> Result<Tensor> {
        let c = &self.config;
        let (b, l, nh, d) = (batch.lens.len(), batch.len, c.num_heads, c.head_dim);
        let mut heads = |proj: &Linear| -> Result<Tensor> {
            let t = step.linear(x, proj)?;
            let t = step.reshape(&t, &[b, l, nh, d])?;
            step.permute(&t, &[0, 2, 1, 3])
        };
        let q = heads(&layer.q)?;
        let k = heads(&layer.k)?;
        let v = heads(&layer.v)?;
        let sdpa = Op::Sdpa {
            scale: 1.0 / (d as f32).sqrt(),
            causal: false,
            sliding_window: None,
            softcap: None,
            alibi_max_bias: None,
        };
        let a = match &batch.mask {
            Some(m) => step.run(sdpa, &[&q, &k, &v, m])?,
            None => step.run(sdpa, &[&q, &k, &v])?,
        };
        let a = step.permute(&a, &[0, 2, 1, 3])?;
        let a = step.reshape(&a, &[b * l, nh * d])?;
        step.linear(&a, &layer.attn_out)
    }

    fn feed_forward(&self, step: &mut Step<'_>, layer: &BertLayer, x: &Tensor) -> Result<Tensor> {
        let h = step.linear(x, &layer.up)?;
        let act = match self.config.activation {
            BertActivation::Gelu(approx) => Op::Gelu { approx },
            BertActivation::Relu => Op::Relu,
        };
        let h = step.run(act, &[&h])?;
        step.linear(&h, &layer.down)
    }
}

//! The BertStyle encoder family: BERT (MiniLM, e5, bge), RoBERTa, XLM-RoBERTa, CamemBERT and
//! DistilBERT, as one post-LN block whose differences are switches of [`BertConfig`].
//!
//! ```text
//! x = LayerNorm(word[id] + position[pos] (+ token_type[0]))
//! per block:  x = LayerNorm(x + o_proj(attention(q, k, v; padding mask)))
//!             x = LayerNorm(x + down(act(up(x))))
//! ```
//! Attention is bidirectional. A batch of sequences of different lengths is padded and
//! masked, or packed (see [`super::batch`]), so each sequence's real tokens get exactly
//! the states they would get alone. Every step is an `Op` run by the dispatcher; pooling (see
//! [`super::pooling`]) is done on the host rows.

use super::batch::{Batch, BatchLayout};
use super::config::{BertConfig, BertVariant};
use super::pooling::EncoderOutput;
use super::settings::BertActivation;
use super::weights::{BertLayer, BertWeights, HeadWeights};
use crate::step::{runs, sdpa_op, Linear, Norm, Step};
use cyb_backend::Dispatcher;
use cyb_format::ModelFile;
use cyb_ops::{LinearAct, Op, SdpaLayout};
use cyb_tensor::{Error, Result, Tensor};
use std::sync::Arc;

/// A loaded BertStyle model: config, weights in place in the file mapping, and the
/// dispatcher that runs its ops.
pub struct BertModel {
    config: BertConfig,
    weights: BertWeights,
    dispatcher: Arc<Dispatcher>,
    layout: BatchLayout,
}

impl std::fmt::Debug for BertModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BertModel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl BertModel {
    /// Resolves the config from `file` and checks every tensor it needs (`MissingTensor` /
    /// `ShapeMismatch` name the tensor).
    pub fn load(file: &ModelFile, dispatcher: Arc<Dispatcher>) -> Result<BertModel> {
        let config = BertConfig::from_file(file)?;
        if config.modern.is_some() {
            return Err(Error::invalid(
                "load",
                "a ModernBERT checkpoint: load it with ModernBertModel",
            ));
        }
        if config.deberta.is_some() || config.jina.is_some() {
            return Err(Error::invalid(
                "load",
                format!(
                    "a {} checkpoint: load it with {}",
                    config.architecture,
                    if config.jina.is_some() {
                        "JinaBertModel"
                    } else {
                        "DebertaModel"
                    }
                ),
            ));
        }
        let weights = BertWeights::load(file, &config)?;
        Ok(BertModel {
            config,
            weights,
            dispatcher,
            layout: BatchLayout::Auto,
        })
    }

    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.dispatcher
    }

    /// Forces the padded or packed batch layout (both give the same results; `Auto` picks
    /// the faster one for the dispatcher's primary backend).
    pub fn set_layout(&mut self, layout: BatchLayout) {
        self.layout = layout;
    }

    /// The final hidden states of every real token of each sequence.
    pub fn hidden_states(&self, seqs: &[Vec<u32>]) -> Result<EncoderOutput> {
        let h = self.config.hidden_size;
        let (x, batch) = self.in_step(seqs, None, |m, step, batch| m.encode(step, batch))?;
        let states = batch.split_rows(&x.to_f32_vec()?, h)?;
        Ok(EncoderOutput { hidden: h, states })
    }

    /// Sequence classification logits `[labels]` per sequence (models saved as
    /// `*ForSequenceClassification`).
    pub fn sequence_logits(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        self.sequence_logits_typed(seqs, None)
    }

    /// [`sequence_logits`](Self::sequence_logits) with token types (text pairs: 0 for the
    /// first text's tokens, 1 for the second's).
    pub fn sequence_logits_typed(
        &self,
        seqs: &[Vec<u32>],
        types: Option<&[Vec<u32>]>,
    ) -> Result<Vec<Vec<f32>>> {
        let (dense, out) = match &self.weights.head {
            HeadWeights::Sequence { dense, out } => (Some(dense), Some(out)),
            HeadWeights::Rank { cls, out } => (cls.as_ref(), out.as_ref()),
            _ => return Err(self.no_head("sequence classification")),
        };
        let act = match self.config.variant {
            BertVariant::DistilBert => Op::Relu,
            BertVariant::Bert | BertVariant::Roberta => Op::Tanh,
        };
        let (logits, batch) = self.in_step(seqs, types, |m, step, batch| {
            let x = m.encode(step, batch)?;
            sequence_head(step, &x, batch, dense.map(|d| (d, act)), out)
        })?;
        per_sequence(&logits, self.config.labels.len(), &batch)
    }

    /// Token classification logits, `[len_i, labels]` row-major per sequence (models saved
    /// as `*ForTokenClassification`).
    pub fn token_logits(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let HeadWeights::Token { out } = &self.weights.head else {
            return Err(self.no_head("token classification"));
        };
        let n = self.config.labels.len();
        let (logits, batch) = self.in_step(seqs, None, |m, step, batch| {
            let x = m.encode(step, batch)?;
            step.linear(&x, out)
        })?;
        batch.split_rows(&logits.to_f32_vec()?, n)
    }

    /// Masked-LM vocabulary logits, `[len_i, vocab]` row-major per sequence (models saved as
    /// `*ForMaskedLM`).
    pub fn masked_lm_logits(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let (logits, batch) = self.masked_lm(seqs, None)?;
        batch.split_rows(&logits.to_f32_vec()?, self.config.vocab_size)
    }

    /// Masked-LM vocabulary logits of the tokens at `positions` of one sequence only,
    /// `[positions.len(), vocab]` row-major: the head runs on those rows alone (the whole
    /// sequence's logits would take `len × vocab` floats).
    pub fn masked_lm_logits_at(&self, seq: &[u32], positions: &[usize]) -> Result<Vec<f32>> {
        check_positions(seq, positions)?;
        let (logits, _) = self.masked_lm(std::slice::from_ref(&seq.to_vec()), Some(positions))?;
        logits.to_f32_vec()
    }

    /// The masked-LM head on every row of the batch, or on `positions` of its one sequence.
    fn masked_lm(&self, seqs: &[Vec<u32>], positions: Option<&[usize]>) -> Result<(Tensor, Batch)> {
        let HeadWeights::MaskedLm {
            dense,
            act,
            norm,
            decoder,
        } = &self.weights.head
        else {
            return Err(self.no_head("masked LM"));
        };
        self.in_step(seqs, None, |m, step, batch| {
            let mut x = m.encode(step, batch)?;
            if let Some(p) = positions {
                x = rows_at(step, &x, batch.starts[0], p)?;
            }
            masked_lm_head(step, &x, (dense, *act, norm, decoder), m.config.norm_eps)
        })
    }

    fn no_head(&self, what: &str) -> Error {
        no_head(&self.config.architecture, what, "*For")
    }

    /// Builds the batch, runs `body` inside one forward step (always ended, also after an
    /// error, once the result is on the host) and returns its host result.
    fn in_step(
        &self,
        seqs: &[Vec<u32>],
        types: Option<&[Vec<u32>]>,
        body: impl FnOnce(&Self, &mut Step<'_>, &Batch) -> Result<Tensor>,
    ) -> Result<(Tensor, Batch)> {
        let padded = match self.layout {
            BatchLayout::Padded => true,
            BatchLayout::Packed => false,
            BatchLayout::Auto => self.native_masked_attention(seqs),
        };
        let batch = Batch::with_types(&self.config, seqs, types, padded)?;
        let out = in_step(&self.dispatcher, &batch, |step, batch| {
            body(self, step, batch)
        })?;
        Ok((out, batch))
    }

    /// Whether the primary backend runs the padded layout's masked attention itself.
    fn native_masked_attention(&self, seqs: &[Vec<u32>]) -> bool {
        let c = &self.config;
        let (b, l) = (seqs.len(), seqs.iter().map(Vec::len).max().unwrap_or(0));
        let qkv = vec![b, c.num_heads, l, c.head_dim];
        let op = sdpa_op(SdpaLayout::HeadMajor, c.head_dim, false);
        runs(
            &self.dispatcher,
            &op,
            vec![qkv.clone(), qkv.clone(), qkv, vec![b, 1, 1, l]],
        )
    }

    /// Embeddings and every block; returns the final states, one row per batch row.
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
            x = step.add_layer_norm(&x, &a, &layer.attn_norm, c.norm_eps)?;
            let f = self.feed_forward(step, layer, &x)?;
            x = step.add_layer_norm(&x, &f, &layer.ffn_norm, c.norm_eps)?;
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
        let (nh, d) = (c.num_heads, c.head_dim);
        let q = step.linear(x, &layer.q)?;
        let k = step.linear(x, &layer.k)?;
        let v = step.linear(x, &layer.v)?;
        let a = match &batch.padded {
            Some((l, mask)) => {
                let b = batch.lens.len();
                let heads = |step: &mut Step<'_>, t: &Tensor| step.reshape(t, &[b, *l, nh, d]);
                let (q, k, v) = (heads(step, &q)?, heads(step, &k)?, heads(step, &v)?);
                let a = step.attend(d, [&q, &k, &v], mask.as_ref())?;
                step.reshape(&a, &[batch.rows, nh * d])?
            }
            None => {
                let mut parts = Vec::with_capacity(batch.lens.len());
                for (&s, &n) in batch.starts.iter().zip(&batch.lens) {
                    let rows = Op::Slice {
                        axis: 0,
                        start: s as isize,
                        end: (s + n) as isize,
                        step: 1,
                    };
                    let mut heads = |t: &Tensor| -> Result<Tensor> {
                        let t = step.run(rows.clone(), &[t])?;
                        step.reshape(&t, &[n, nh, d])
                    };
                    let (qs, ks, vs) = (heads(&q)?, heads(&k)?, heads(&v)?);
                    let a = step.attend(d, [&qs, &ks, &vs], None)?;
                    parts.push(step.reshape(&a, &[n, nh * d])?);
                }
                let refs: Vec<&Tensor> = parts.iter().collect();
                step.run(Op::Concat { axis: 0 }, &refs)?
            }
        };
        step.linear(&a, &layer.attn_out)
    }

    fn feed_forward(&self, step: &mut Step<'_>, layer: &BertLayer, x: &Tensor) -> Result<Tensor> {
        let act = match self.config.activation {
            BertActivation::Gelu(approx) => LinearAct::Gelu(approx),
            BertActivation::Relu => LinearAct::Relu,
        };
        let h = step.linear_act(x, &layer.up, act)?;
        step.linear(&h, &layer.down)
    }
}

/// Refuses positions outside `seq` (and an empty list).
pub(super) fn check_positions(seq: &[u32], positions: &[usize]) -> Result<()> {
    if positions.is_empty() {
        return Err(Error::invalid("masked LM", "no positions asked for"));
    }
    match positions.iter().find(|&&p| p >= seq.len()) {
        Some(p) => Err(Error::invalid(
            "masked LM",
            format!("position {p} is outside the {}-token sequence", seq.len()),
        )),
        None => Ok(()),
    }
}

/// The BERT-style masked-LM head: dense, activation, layer norm, then the vocabulary decoder.
pub(super) fn masked_lm_head(
    step: &mut Step<'_>,
    x: &Tensor,
    (dense, act, norm, decoder): (&Linear, BertActivation, &Norm, &Linear),
    eps: f32,
) -> Result<Tensor> {
    let x = step.linear(x, dense)?;
    let x = step.run(activation_op(act), &[&x])?;
    let x = step.layer_norm(&x, norm, eps)?;
    step.linear(&x, decoder)
}

/// Rows `start + p` of `x` for each `p` in `positions` (a lookup in the states).
pub(super) fn rows_at(
    step: &mut Step<'_>,
    x: &Tensor,
    start: usize,
    positions: &[usize],
) -> Result<Tensor> {
    let rows: Vec<i64> = positions.iter().map(|&p| (start + p) as i64).collect();
    let rows = Tensor::from_i64(&[rows.len()], &rows)?;
    step.run(Op::Embedding, &[x, &rows])
}

fn activation_op(act: BertActivation) -> Op {
    match act {
        BertActivation::Gelu(approx) => Op::Gelu { approx },
        BertActivation::Relu => Op::Relu,
    }
}

/// The sequence-classification head on the final states `x` of `batch`: the first row of each
/// sequence, then `act(dense(..))` and `out(..)` where given.
pub(super) fn sequence_head(
    step: &mut Step<'_>,
    x: &Tensor,
    batch: &Batch,
    dense: Option<(&Linear, Op)>,
    out: Option<&Linear>,
) -> Result<Tensor> {
    // The first row of each sequence, gathered as a lookup in the states.
    let first: Vec<i64> = batch.starts.iter().map(|&s| s as i64).collect();
    let first = Tensor::from_i64(&[first.len()], &first)?;
    let mut x = step.run(Op::Embedding, &[x, &first])?;
    if let Some((dense, act)) = dense {
        x = step.linear(&x, dense)?;
        x = step.run(act, &[&x])?;
    }
    match out {
        Some(out) => step.linear(&x, out),
        None => Ok(x),
    }
}

/// `logits` (`[sequences, n]`) as one vector per sequence of `batch`.
pub(super) fn per_sequence(logits: &Tensor, n: usize, batch: &Batch) -> Result<Vec<Vec<f32>>> {
    let host = logits.to_f32_vec()?;
    Ok(host
        .chunks_exact(n.max(1))
        .take(batch.lens.len())
        .map(<[f32]>::to_vec)
        .collect())
}

/// Bidirectional attention in `layout`, scaled by `1/sqrt(head_dim)`.
/// Runs `body` on `batch` inside one forward step of `dispatcher` (always ended, also after
/// an error, once the result is on the host) and returns its host result.
pub(super) fn in_step(
    dispatcher: &Dispatcher,
    batch: &Batch,
    body: impl FnOnce(&mut Step<'_>, &Batch) -> Result<Tensor>,
) -> Result<Tensor> {
    crate::step::run_step(dispatcher, |step| body(step, batch))
}

/// The error for a `what` head (`"sequence classification"`, `"token classification"`,
/// `"masked LM"`) a checkpoint of `architecture` lacks; `family` prefixes the class names
/// that carry it (`"*For"`, `"JinaBertFor"`).
pub(super) fn no_head(architecture: &str, what: &str, family: &str) -> Error {
    let class = if what.starts_with("token") {
        "TokenClassification"
    } else if what.starts_with("masked") {
        "MaskedLM"
    } else {
        "SequenceClassification"
    };
    Error::invalid(
        what,
        format!(
            "this {architecture} checkpoint has no {what} head (its config.json names no \
             {family}{class} class)"
        ),
    )
}

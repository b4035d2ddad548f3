//! DeBERTa (v1, v2, v3): the post-LN BERT block with disentangled attention. Besides content to
//! content, a query attends to the relative position of each key (c2p) and a key to the
//! relative position of each query (p2c), through a shared table of relative-position
//! embeddings:
//!
//! ```text
//! δ(i, j) = clamp(bucket(i - j) + span, 0, 2·span - 1)
//! s[i, j] = (q_i·k_j + q_i·Pk[δ(i, j)] + k_j·Pq[δ(i, j)]) / sqrt(d · (1 + #pos_att_types))
//! Pk = key_proj(R) (or pos_key_proj), Pq = query_proj(R) (or pos_query_proj),
//! R = LayerNorm(rel_embeddings) with norm_rel_ebd = layer_norm
//! ```
//! `bucket` is the identity for `|x| ≤ buckets/2` and grows logarithmically beyond, up to
//! `max_relative_positions` (transformers' `make_log_bucket_position`, computed in f32 as it
//! is there). The p2c term reads `k_j·Pq[clamp(-bucket(j - i) + span)]`, the same index since
//! `bucket` is odd. Inference has no dropout, so StableDropout is the identity.
//!
//! The relative terms and the padding mask are one additive bias of the attention op; batches
//! are always padded (the bias needs the square score matrix anyway).
//!
//! DeBERTa v1 (`model_type: deberta`) is the same computation with other weights: one fused
//! `in_proj` (per head `[q; k; v]` rows, split at load) with separate `q_bias`/`v_bias` and no
//! key bias, `pos_proj` (c2p, no bias) and `pos_q_proj` (p2c), no log buckets, no table norm.
//! Its attention span `min(len, max_relative_positions)` reads the same table rows as the
//! v2 formula with `span = max_relative_positions`: below the limit no distance is clamped.

use super::batch::Batch;
use super::config::{BertConfig, BertHead};
use super::deberta_config::{ConvActivation, DebertaSettings};
use super::deberta_weights::{DebertaHead, DebertaWeights};
use super::pooling::EncoderOutput;
use super::settings::{invalid, BertActivation};
use crate::step::Linear;
use crate::step::Step;
use cyb_backend::{Dispatcher, ExecContext};
use cyb_format::ModelFile;
use cyb_ops::{Op, PadMode, SdpaLayout};
use cyb_tensor::{Error, Result, Tensor};
use std::sync::Arc;

/// A loaded DeBERTa (v1, v2, v3) encoder.
pub struct DebertaModel {
    config: BertConfig,
    settings: DebertaSettings,
    weights: DebertaWeights,
    dispatcher: Arc<Dispatcher>,
}

impl std::fmt::Debug for DebertaModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebertaModel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl DebertaModel {
    /// Loads a Hugging Face DeBERTa directory (`model_type: deberta-v2` for v2/v3, `deberta`
    /// for v1).
    pub fn load(file: &ModelFile, dispatcher: Arc<Dispatcher>) -> Result<DebertaModel> {
        let config = BertConfig::from_file(file)?;
        let settings = config
            .deberta
            .clone()
            .ok_or_else(|| invalid("model_type", "not a DeBERTa config (deberta or deberta-v2)"))?;
        let weights = DebertaWeights::load(file, &config, &settings)?;
        Ok(DebertaModel {
            config,
            settings,
            weights,
            dispatcher,
        })
    }

    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    pub fn settings(&self) -> &DebertaSettings {
        &self.settings
    }

    /// The final hidden states of every real token of each sequence.
    pub fn hidden_states(&self, seqs: &[Vec<u32>]) -> Result<EncoderOutput> {
        let h = self.config.hidden_size;
        let (x, batch) = self.in_step(seqs, None, |m, step, batch| m.encode(step, batch))?;
        let states = batch.split_rows(&x.to_f32_vec()?, h)?;
        Ok(EncoderOutput { hidden: h, states })
    }

    /// Sequence classification logits per sequence: `classifier(act(pooler(h_first)))`.
    pub fn sequence_logits(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        self.sequence_logits_typed(seqs, None)
    }

    /// [`sequence_logits`](Self::sequence_logits) with token types (text pairs); they only
    /// matter when the model has a token type table (DeBERTa-v3 has none).
    pub fn sequence_logits_typed(
        &self,
        seqs: &[Vec<u32>],
        types: Option<&[Vec<u32>]>,
    ) -> Result<Vec<Vec<f32>>> {
        let DebertaHead::Sequence { pooler, out } = &self.weights.head else {
            return Err(self.no_head(BertHead::SequenceClassification));
        };
        let n = self.config.labels.len().max(1);
        let act = match self.settings.pooler_act {
            BertActivation::Gelu(approx) => Op::Gelu { approx },
            BertActivation::Relu => Op::Relu,
        };
        let (logits, batch) = self.in_step(seqs, types, |m, step, batch| {
            let x = m.encode(step, batch)?;
            let first: Vec<i64> = batch.starts.iter().map(|&s| s as i64).collect();
            let first = Tensor::from_i64(&[first.len()], &first)?;
            let x = step.run(Op::Embedding, &[&x, &first])?;
            let x = step.linear(&x, pooler)?;
            let x = step.run(act, &[&x])?;
            step.linear(&x, out)
        })?;
        let host = logits.to_f32_vec()?;
        Ok(host
            .chunks_exact(n)
            .take(batch.lens.len())
            .map(<[f32]>::to_vec)
            .collect())
    }

    /// Token classification logits, `[len_i, labels]` row-major per sequence.
    pub fn token_logits(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let DebertaHead::Token { out } = &self.weights.head else {
            return Err(self.no_head(BertHead::TokenClassification));
        };
        let (logits, batch) = self.in_step(seqs, None, |m, step, batch| {
            let x = m.encode(step, batch)?;
            step.linear(&x, out)
        })?;
        batch.split_rows(&logits.to_f32_vec()?, self.config.labels.len())
    }

    /// Masked-LM vocabulary logits, `[len_i, vocab]` row-major per sequence
    /// (`DebertaV2ForMaskedLM`).
    pub fn masked_lm_logits(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let (logits, batch) = self.masked_lm(seqs, None)?;
        batch.split_rows(&logits.to_f32_vec()?, self.config.vocab_size)
    }

    /// Masked-LM vocabulary logits of the tokens at `positions` of one sequence only,
    /// `[positions.len(), vocab]` row-major (the head runs on those rows alone).
    pub fn masked_lm_logits_at(&self, seq: &[u32], positions: &[usize]) -> Result<Vec<f32>> {
        super::model::check_positions(seq, positions)?;
        let (logits, _) = self.masked_lm(std::slice::from_ref(&seq.to_vec()), Some(positions))?;
        logits.to_f32_vec()
    }

    /// The masked-LM head on every row of the batch, or on `positions` of its one sequence.
    fn masked_lm(&self, seqs: &[Vec<u32>], positions: Option<&[usize]>) -> Result<(Tensor, Batch)> {
        let DebertaHead::MaskedLm {
            dense,
            act,
            norm,
            decoder,
        } = &self.weights.head
        else {
            return Err(self.no_head(BertHead::MaskedLm));
        };
        self.in_step(seqs, None, |m, step, batch| {
            let mut x = m.encode(step, batch)?;
            if let Some(p) = positions {
                x = super::model::rows_at(step, &x, batch.starts[0], p)?;
            }
            let head = (dense, *act, norm, decoder);
            super::model::masked_lm_head(step, &x, head, m.config.norm_eps)
        })
    }

    fn no_head(&self, want: BertHead) -> Error {
        let op = match want {
            BertHead::MaskedLm => "masked LM",
            _ => "classify",
        };
        Error::invalid(
            op,
            format!(
                "this {} checkpoint has no {want:?} head (its config.json names {:?})",
                self.config.architecture, self.config.head
            ),
        )
    }

    fn in_step(
        &self,
        seqs: &[Vec<u32>],
        types: Option<&[Vec<u32>]>,
        body: impl FnOnce(&Self, &mut Step<'_>, &Batch) -> Result<Tensor>,
    ) -> Result<(Tensor, Batch)> {
        let batch = Batch::with_types(&self.config, seqs, types, true)?;
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

    fn encode(&self, step: &mut Step<'_>, batch: &Batch) -> Result<Tensor> {
        let (c, s, w) = (&self.config, &self.settings, &self.weights);
        let mut x = step.run(Op::Embedding, &[&w.word, &batch.ids])?;
        if let Some(p) = &w.position {
            let p = step.run(Op::Embedding, &[p, &batch.positions])?;
            x = step.run(Op::Add, &[&x, &p])?;
        }
        if let Some(tt) = &w.token_type {
            let t = step.run(Op::Embedding, &[tt, &batch.types])?;
            x = step.run(Op::Add, &[&x, &t])?;
        }
        if let Some(proj) = &w.embed_proj {
            x = step.linear(&x, proj)?;
        }
        x = step.layer_norm(&x, &w.embed_norm, c.norm_eps)?;
        let b = batch.lens.len();
        let l = match &batch.padded {
            Some((l, _)) => *l,
            None => return Err(Error::invalid("deberta", "expected a padded batch")),
        };
        let rel = match &w.rel {
            Some(r) if s.relative => {
                let rows = Op::Slice {
                    axis: 0,
                    start: 0,
                    end: (2 * s.span) as isize,
                    step: 1,
                };
                let r = step.run(rows, &[r])?;
                Some(match &w.rel_norm {
                    Some(n) => step.layer_norm(&r, n, c.norm_eps)?,
                    None => r,
                })
            }
            _ => None,
        };
        // The gather indices are the same in every layer: built and expanded to the score
        // shape once per forward pass.
        let full = vec![b, c.num_heads, l, l];
        let mut index = |want: bool, transposed: bool| -> Result<Option<Tensor>> {
            if !want || rel.is_none() {
                return Ok(None);
            }
            let idx = Tensor::from_i64(&[1, 1, l, l], &s.index(l, transposed))?;
            let dims = full.clone();
            step.run(Op::Expand { dims }, &[&idx]).map(Some)
        };
        let (idx, idx_t) = (index(s.c2p, false)?, index(s.p2c, true)?);
        let mut ctx = AttnCtx {
            b,
            l,
            rel: rel.as_ref(),
            idx: idx.as_ref(),
            idx_t: idx_t.as_ref(),
            mask: batch.padded.as_ref().and_then(|(_, m)| m.as_ref()),
        };
        let emb = x.clone();
        for (i, layer) in w.layers.iter().enumerate() {
            let a = self.attention(step, layer, &x, &mut ctx)?;
            let y = step.run(Op::Add, &[&x, &a])?;
            x = step.layer_norm(&y, &layer.attn_norm, c.norm_eps)?;
            let f = step.linear(&x, &layer.up)?;
            let f = step.run(
                match c.activation {
                    BertActivation::Gelu(approx) => Op::Gelu { approx },
                    BertActivation::Relu => Op::Relu,
                },
                &[&f],
            )?;
            let f = step.linear(&f, &layer.down)?;
            let y = step.run(Op::Add, &[&x, &f])?;
            x = step.layer_norm(&y, &layer.ffn_norm, c.norm_eps)?;
            if let (0, Some(conv)) = (i, &w.conv) {
                x = self.conv(step, batch, l, &emb, &x, conv)?;
            }
        }
        Ok(x)
    }

    /// `LayerNorm(x + act(conv1d(emb)))` over each padded sequence, the embedding output's
    /// padding rows zeroed first (as transformers masks them) so that no real token's window
    /// reads them.
    fn conv(
        &self,
        step: &mut Step<'_>,
        batch: &Batch,
        l: usize,
        emb: &Tensor,
        x: &Tensor,
        (proj, norm): &(Linear, crate::step::Norm),
    ) -> Result<Tensor> {
        let (h, b) = (self.config.hidden_size, batch.lens.len());
        let Some(settings) = &self.settings.conv else {
            return Err(Error::invalid(
                "deberta",
                "conv weights without conv settings",
            ));
        };
        let k = settings.kernel;
        let mut e = emb.clone();
        if batch.lens.iter().any(|&n| n < l) {
            let keep: Vec<f32> = batch
                .lens
                .iter()
                .flat_map(|&n| (0..l).map(move |i| if i < n { 1.0 } else { 0.0 }))
                .collect();
            let keep = Tensor::from_f32(&[b * l, 1], &keep)?;
            e = step.run(Op::Mul, &[&e, &keep])?;
        }
        let e = step.reshape(&e, &[b, l, h])?;
        let p = ((k - 1) / 2) as isize;
        let e = step.run(
            Op::Pad {
                pads: vec![0, p, 0, 0, p, 0],
                mode: PadMode::Constant { value: 0.0 },
            },
            &[&e],
        )?;
        let taps = (0..k)
            .map(|t| {
                let rows = Op::Slice {
                    axis: 1,
                    start: t as isize,
                    end: (t + l) as isize,
                    step: 1,
                };
                step.run(rows, &[&e])
            })
            .collect::<Result<Vec<_>>>()?;
        let taps: Vec<&Tensor> = taps.iter().collect();
        let u = step.run(Op::Concat { axis: 2 }, &taps)?;
        let u = step.reshape(&u, &[b * l, k * h])?;
        let out = step.linear(&u, proj)?;
        let act = match settings.act {
            ConvActivation::Tanh => Op::Tanh,
            ConvActivation::Gelu(approx) => Op::Gelu { approx },
            ConvActivation::Relu => Op::Relu,
        };
        let out = step.run(act, &[&out])?;
        let y = step.run(Op::Add, &[x, &out])?;
        step.layer_norm(&y, norm, self.config.norm_eps)
    }

    fn attention(
        &self,
        step: &mut Step<'_>,
        layer: &super::deberta_weights::DebertaLayer,
        x: &Tensor,
        a: &mut AttnCtx<'_>,
    ) -> Result<Tensor> {
        let (c, s) = (&self.config, &self.settings);
        let (nh, d, b, l) = (c.num_heads, c.head_dim, a.b, a.l);
        let scale = s.scale(d);
        let heads = |step: &mut Step<'_>, t: &Tensor| -> Result<Tensor> {
            let t = step.reshape(t, &[b, l, nh, d])?;
            step.permute(&t, &[0, 2, 1, 3])
        };
        let q = step.linear(x, &layer.q)?;
        let q = heads(step, &q)?;
        let k = step.linear(x, &layer.k)?;
        let k = heads(step, &k)?;
        let v = step.linear(x, &layer.v)?;
        let v = heads(step, &v)?;
        let mut bias: Option<Tensor> = None;
        if let Some(rel) = a.rel {
            let rows = 2 * s.span;
            let rel_heads = |step: &mut Step<'_>, proj: &Linear| -> Result<Tensor> {
                let t = step.linear(rel, proj)?;
                let t = step.reshape(&t, &[rows, nh, d])?;
                step.permute(&t, &[1, 0, 2])
            };
            let mm = Op::MatMul {
                rhs_transposed: true,
            };
            if s.c2p {
                let proj = if s.share_att_key {
                    &layer.k
                } else {
                    pos(&layer.pos_k, "pos_key_proj")?
                };
                let pk = rel_heads(step, proj)?;
                let scores = step.run(mm.clone(), &[&q, &pk])?;
                let idx = expanded(a.idx)?;
                let c2p = step.run(Op::GatherElements { axis: 3 }, &[&scores, idx])?;
                bias = Some(c2p);
            }
            if s.p2c {
                let proj = if s.share_att_key {
                    &layer.q
                } else {
                    pos(&layer.pos_q, "pos_query_proj")?
                };
                let pq = rel_heads(step, proj)?;
                let scores = step.run(mm, &[&k, &pq])?;
                let idx = expanded(a.idx_t)?;
                let p2c = step.run(Op::GatherElements { axis: 3 }, &[&scores, idx])?;
                let p2c = step.permute(&p2c, &[0, 1, 3, 2])?;
                bias = Some(match bias {
                    Some(c2p) => step.run(Op::Add, &[&c2p, &p2c])?,
                    None => p2c,
                });
            }
        }
        let bias = match bias {
            Some(t) => {
                let t = step.run(Op::Scale { factor: scale }, &[&t])?;
                Some(match a.mask {
                    Some(m) => step.run(Op::Add, &[&t, m])?,
                    None => t,
                })
            }
            None => a.mask.cloned(),
        };
        let sdpa = Op::Sdpa {
            layout: SdpaLayout::HeadMajor,
            scale,
            causal: false,
            sliding_window: None,
            softcap: None,
            alibi_max_bias: None,
        };
        let out = match &bias {
            Some(m) => step.run(sdpa, &[&q, &k, &v, m])?,
            None => step.run(sdpa, &[&q, &k, &v])?,
        };
        let out = step.permute(&out, &[0, 2, 1, 3])?;
        let out = step.reshape(&out, &[b * l, nh * d])?;
        step.linear(&out, &layer.attn_out)
    }
}

/// What every layer's attention shares within one forward pass.
struct AttnCtx<'a> {
    b: usize,
    l: usize,
    /// The (normalized) relative table, `[2·span, hidden]`.
    rel: Option<&'a Tensor>,
    /// `δ(i, j)` expanded to the scores' `[b, heads, l, l]` (with c2p), and its transpose
    /// (with p2c).
    idx: Option<&'a Tensor>,
    idx_t: Option<&'a Tensor>,
    /// The padding mask `[b, 1, 1, l]` (`-inf` on padding keys).
    mask: Option<&'a Tensor>,
}

fn expanded(idx: Option<&Tensor>) -> Result<&Tensor> {
    idx.ok_or_else(|| Error::invalid("deberta", "relative index was not built"))
}

fn pos<'a>(l: &'a Option<Linear>, name: &str) -> Result<&'a Linear> {
    l.as_ref()
        .ok_or_else(|| Error::invalid("deberta", format!("{name} was not loaded")))
}

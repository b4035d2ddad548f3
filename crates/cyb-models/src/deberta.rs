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

use crate::bert::Step;
use crate::bert_batch::Batch;
use crate::bert_config::{BertActivation, BertConfig, BertHead};
use crate::bert_pooling::EncoderOutput;
use crate::bert_weights::Linear;
use crate::deberta_weights::{DebertaHead, DebertaWeights};
use cyb_backend::{Dispatcher, ExecContext};
use cyb_format::ModelFile;
use cyb_ops::{GeluApprox, Op};
use cyb_tensor::{Error, Result, Tensor};
use serde_json::Value;
use std::sync::Arc;

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
}

fn invalid(field: &str, reason: impl Into<String>) -> Error {
    Error::InvalidConfig {
        field: field.into(),
        reason: reason.into(),
    }
}

impl DebertaSettings {
    pub(crate) fn from_hf_json(config: &Value, hidden: usize) -> Result<DebertaSettings> {
        let int = |k: &str| config.get(k).and_then(Value::as_i64);
        let flag = |k: &str, d: bool| config.get(k).and_then(Value::as_bool).unwrap_or(d);
        let v1 = config.get("model_type").and_then(Value::as_str) == Some("deberta");
        if v1 && flag("talking_head", false) {
            return Err(invalid(
                "talking_head",
                "DeBERTa v1's talking-head attention is not supported",
            ));
        }
        if !v1 && int("conv_kernel_size").unwrap_or(0) > 0 {
            return Err(invalid(
                "conv_kernel_size",
                "DeBERTa-v2's convolution after the first layer (deberta-v2-xlarge) is not \
                 supported yet; DeBERTa-v3 and v2 checkpoints without it are",
            ));
        }
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
        })
    }

    /// `1 / sqrt(d · (1 + number of position attention types))`.
    fn scale(&self, head_dim: usize) -> f32 {
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
    fn index(&self, l: usize, transposed: bool) -> Vec<i64> {
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
        let DebertaHead::MaskedLm {
            dense,
            act,
            norm,
            decoder,
        } = &self.weights.head
        else {
            return Err(self.no_head(BertHead::MaskedLm));
        };
        let act = match act {
            BertActivation::Gelu(approx) => Op::Gelu { approx: *approx },
            BertActivation::Relu => Op::Relu,
        };
        let (logits, batch) = self.in_step(seqs, None, |m, step, batch| {
            let x = m.encode(step, batch)?;
            let x = step.linear(&x, dense)?;
            let x = step.run(act, &[&x])?;
            let x = step.layer_norm(&x, norm, m.config.norm_eps)?;
            step.linear(&x, decoder)
        })?;
        batch.split_rows(&logits.to_f32_vec()?, self.config.vocab_size)
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
        let index = |transposed: bool| -> Result<Tensor> {
            let idx = Tensor::from_i64(&[1, 1, l, l], &s.index(l, transposed))?;
            Ok(idx)
        };
        let (idx, idx_t) = (index(false)?, index(true)?);
        let mut ctx = AttnCtx {
            b,
            l,
            rel: rel.as_ref(),
            idx: &idx,
            idx_t: &idx_t,
            mask: batch.padded.as_ref().and_then(|(_, m)| m.as_ref()),
        };
        for layer in &w.layers {
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
        }
        Ok(x)
    }

    fn attention(
        &self,
        step: &mut Step<'_>,
        layer: &crate::deberta_weights::DebertaLayer,
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
            let full = [b, nh, l, l];
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
                let idx = step.run(
                    Op::Expand {
                        dims: full.to_vec(),
                    },
                    &[a.idx],
                )?;
                let c2p = step.run(Op::GatherElements { axis: 3 }, &[&scores, &idx])?;
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
                let idx = step.run(
                    Op::Expand {
                        dims: full.to_vec(),
                    },
                    &[a.idx_t],
                )?;
                let p2c = step.run(Op::GatherElements { axis: 3 }, &[&scores, &idx])?;
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
    /// `δ(i, j)` as `[1, 1, l, l]`, and its transpose.
    idx: &'a Tensor,
    idx_t: &'a Tensor,
    /// The padding mask `[b, 1, 1, l]` (`-inf` on padding keys).
    mask: Option<&'a Tensor>,
}

fn pos<'a>(l: &'a Option<Linear>, name: &str) -> Result<&'a Linear> {
    l.as_ref()
        .ok_or_else(|| Error::invalid("deberta", format!("{name} was not loaded")))
}

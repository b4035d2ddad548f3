//! Jina-v2 (jina-embeddings-v2, jinaai's JinaBERT): the post-LN BERT block with ALiBi in place
//! of a position table and a gated feed-forward:
//!
//! ```text
//! x = LayerNorm(word[id] + token_type[0])
//! per block:  x = LayerNorm(x + Wo·softmax(q·kᵀ/sqrt(d) - slope_h·|i - j| + mask)·v)
//!             x = LayerNorm(x + wo(act(g) · u)),  [g; u] = gated_layers(x)
//! ```
//! The distance is symmetric because the encoder is bidirectional. Slopes are the ALiBi
//! paper's: for `n` heads a power of two, `slope_h = start^(h+1)` with
//! `start = 2^(-2^-(log2 n - 3))` (i.e. `2^(-8(h+1)/n)`); otherwise the `c` slopes of the
//! largest power of two `c < n`, then every other slope of `2c` for the remaining heads.
//! Config: `model_type: bert`, `position_embedding_type: alibi`, `feed_forward_type`
//! (`geglu`: GELU, `reglu`: ReLU).

use super::batch::Batch;
use super::config::{BertConfig, BertHead};
use super::pooling::EncoderOutput;
use super::settings::JinaSettings;
use super::weights::{rank_head, HeadWeights};
use crate::step::Step;
use crate::step::{Linear, Norm};
use cyb_backend::Dispatcher;
use cyb_format::ModelFile;
use cyb_ops::{GeluApprox, Op};
use cyb_tensor::{Error, Result, Tensor};
use std::collections::HashSet;
use std::sync::Arc;

/// ALiBi slopes for `n` heads (see the module comment): the ALiBi paper's with a maximum bias
/// of 8, as the attention op's `alibi_max_bias` uses them.
pub fn alibi_slopes(n: usize) -> Vec<f32> {
    cyb_ops::reference::alibi_slopes(8.0, n)
}

struct JinaLayer {
    q: Linear,
    k: Linear,
    v: Linear,
    attn_out: Linear,
    attn_norm: Norm,
    gated: Linear,
    wo: Linear,
    ffn_norm: Norm,
}

/// A loaded Jina-v2 encoder.
pub struct JinaBertModel {
    config: BertConfig,
    settings: JinaSettings,
    word: Tensor,
    token_type: Option<Tensor>,
    embed_norm: Norm,
    layers: Vec<JinaLayer>,
    slopes: Vec<f32>,
    head: HeadWeights,
    dispatcher: Arc<Dispatcher>,
}

impl std::fmt::Debug for JinaBertModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JinaBertModel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy)]
struct Loader<'a> {
    file: &'a ModelFile,
    names: &'a HashSet<String>,
    prefix: &'a str,
}

impl Loader<'_> {
    fn tensor(&self, name: &str, dims: &[usize]) -> Result<Tensor> {
        let name = format!("{}{name}", self.prefix);
        // GGUF files keep llama.cpp's names; the loader asks in Hugging Face's.
        let name = match self.file {
            ModelFile::Gguf(_) => super::gguf::gguf_name(&name).unwrap_or(name),
            _ => name,
        };
        if !self.names.contains(&name) {
            return Err(Error::MissingTensor {
                name,
                required_by: format!("jina-bert-v2 in {}", self.file.path().display()),
            });
        }
        let t = self.file.tensor(&name)?;
        if t.dims() != dims {
            return Err(Error::shape(format!("tensor {name}"), dims, t.dims()));
        }
        Ok(t)
    }

    fn linear(&self, name: &str, out: usize, inp: usize, bias: bool) -> Result<Linear> {
        Ok(Linear {
            w: self.tensor(&format!("{name}.weight"), &[out, inp])?,
            b: if bias {
                Some(self.tensor(&format!("{name}.bias"), &[out])?)
            } else {
                None
            },
        })
    }

    fn norm(&self, name: &str, d: usize) -> Result<Norm> {
        Ok(Norm {
            w: self.tensor(&format!("{name}.weight"), &[d])?,
            b: self.tensor(&format!("{name}.bias"), &[d])?,
        })
    }
}

impl JinaBertModel {
    /// Loads a Hugging Face Jina-v2 directory (`position_embedding_type: alibi`).
    pub fn load(file: &ModelFile, dispatcher: Arc<Dispatcher>) -> Result<JinaBertModel> {
        let config = BertConfig::from_file(file)?;
        let settings = config.jina.clone().ok_or_else(|| Error::InvalidConfig {
            field: "position_embedding_type".into(),
            reason: "not a Jina-v2 (ALiBi) config".into(),
        })?;
        let names: HashSet<String> = file.tensors().into_iter().map(|t| t.name).collect();
        let l = Loader {
            file,
            names: &names,
            prefix: &config.prefix,
        };
        let (h, f) = (config.hidden_size, config.intermediate_size);
        let layers = (0..config.num_layers)
            .map(|i| {
                let b = format!("encoder.layer.{i}");
                Ok(JinaLayer {
                    q: l.linear(&format!("{b}.attention.self.query"), h, h, true)?,
                    k: l.linear(&format!("{b}.attention.self.key"), h, h, true)?,
                    v: l.linear(&format!("{b}.attention.self.value"), h, h, true)?,
                    attn_out: l.linear(&format!("{b}.attention.output.dense"), h, h, true)?,
                    attn_norm: l.norm(&format!("{b}.attention.output.LayerNorm"), h)?,
                    gated: l.linear(&format!("{b}.mlp.gated_layers"), 2 * f, h, false)?,
                    wo: l.linear(&format!("{b}.mlp.wo"), h, f, true)?,
                    ffn_norm: l.norm(&format!("{b}.mlp.layernorm"), h)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let token_type = match config.type_vocab_size {
            0 => None,
            n => Some(l.tensor("embeddings.token_type_embeddings.weight", &[n, h])?),
        };
        // JinaBertFor{Sequence,Token}Classification: BERT's heads; the classifier sits outside
        // the encoder prefix. GGUF rerankers carry llama.cpp's `cls` / `cls.output`.
        let n = config.labels.len();
        let bare = Loader { prefix: "", ..l };
        let head = match config.head {
            BertHead::None | BertHead::MaskedLm => HeadWeights::None,
            BertHead::SequenceClassification if matches!(file, ModelFile::Gguf(_)) => {
                rank_head(file, &config)?
            }
            BertHead::SequenceClassification => HeadWeights::Sequence {
                dense: l.linear("pooler.dense", h, h, true)?,
                out: bare.linear("classifier", n, h, true)?,
            },
            BertHead::TokenClassification => HeadWeights::Token {
                out: bare.linear("classifier", n, h, true)?,
            },
        };
        Ok(JinaBertModel {
            word: l.tensor("embeddings.word_embeddings.weight", &[config.vocab_size, h])?,
            token_type,
            embed_norm: l.norm("embeddings.LayerNorm", h)?,
            layers,
            slopes: alibi_slopes(config.num_heads),
            head,
            settings,
            config,
            dispatcher,
        })
    }

    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The final hidden states of every real token of each sequence.
    pub fn hidden_states(&self, seqs: &[Vec<u32>]) -> Result<EncoderOutput> {
        let (x, batch) = self.in_step(seqs, None, |step, batch| self.encode(step, batch))?;
        let h = self.config.hidden_size;
        let states = batch.split_rows(&x.to_f32_vec()?, h)?;
        Ok(EncoderOutput { hidden: h, states })
    }

    /// Sequence classification logits `[labels]` per sequence (JinaBertForSequenceClassification,
    /// the jina-reranker-v1 models), with token types for text pairs when given.
    pub fn sequence_logits_typed(
        &self,
        seqs: &[Vec<u32>],
        types: Option<&[Vec<u32>]>,
    ) -> Result<Vec<Vec<f32>>> {
        let (dense, out) = match &self.head {
            HeadWeights::Sequence { dense, out } => (Some(dense), Some(out)),
            HeadWeights::Rank { cls, out } => (cls.as_ref(), out.as_ref()),
            _ => return Err(self.no_head("sequence classification")),
        };
        let (logits, batch) = self.in_step(seqs, types, |step, batch| {
            let x = self.encode(step, batch)?;
            super::model::sequence_head(step, &x, batch, dense.map(|d| (d, Op::Tanh)), out)
        })?;
        super::model::per_sequence(&logits, self.config.labels.len(), &batch)
    }

    /// Token classification logits, `[len_i, labels]` row-major per sequence
    /// (JinaBertForTokenClassification).
    pub fn token_logits(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let HeadWeights::Token { out } = &self.head else {
            return Err(self.no_head("token classification"));
        };
        let (logits, batch) = self.in_step(seqs, None, |step, batch| {
            let x = self.encode(step, batch)?;
            step.linear(&x, out)
        })?;
        batch.split_rows(&logits.to_f32_vec()?, self.config.labels.len())
    }

    fn no_head(&self, what: &str) -> Error {
        super::model::no_head(&self.config.architecture, what, "JinaBertFor")
    }

    /// Builds the padded batch and runs `body` on it in one forward step.
    fn in_step(
        &self,
        seqs: &[Vec<u32>],
        types: Option<&[Vec<u32>]>,
        body: impl FnOnce(&mut Step<'_>, &Batch) -> Result<Tensor>,
    ) -> Result<(Tensor, Batch)> {
        let batch = Batch::with_types(&self.config, seqs, types, true)?;
        let out = super::model::in_step(&self.dispatcher, &batch, body)?;
        Ok((out, batch))
    }

    fn encode(&self, step: &mut Step<'_>, batch: &Batch) -> Result<Tensor> {
        let c = &self.config;
        let (nh, d) = (c.num_heads, c.head_dim);
        let b = batch.lens.len();
        let (l, mask) = match &batch.padded {
            Some((l, m)) => (*l, m.as_ref()),
            None => return Err(Error::invalid("jina-bert-v2", "expected a padded batch")),
        };
        let alibi: Vec<f32> = self
            .slopes
            .iter()
            .flat_map(|&s| (0..l).flat_map(move |i| (0..l).map(move |j| -s * i.abs_diff(j) as f32)))
            .collect();
        let alibi = Tensor::from_f32(&[1, nh, l, l], &alibi)?;
        let bias = match mask {
            Some(m) => step.run(Op::Add, &[&alibi, m])?,
            None => alibi,
        };
        let mut x = step.run(Op::Embedding, &[&self.word, &batch.ids])?;
        if let Some(tt) = &self.token_type {
            let t = step.run(Op::Embedding, &[tt, &batch.types])?;
            x = step.run(Op::Add, &[&x, &t])?;
        }
        x = step.layer_norm(&x, &self.embed_norm, c.norm_eps)?;
        let geglu = Op::GeGlu {
            approx: GeluApprox::Erf,
        };
        for layer in &self.layers {
            let q = step.linear(&x, &layer.q)?;
            let k = step.linear(&x, &layer.k)?;
            let v = step.linear(&x, &layer.v)?;
            let heads = |step: &mut Step<'_>, t: &Tensor| step.reshape(t, &[b, l, nh, d]);
            let (q, k, v) = (heads(step, &q)?, heads(step, &k)?, heads(step, &v)?);
            let a = step.attend(d, [&q, &k, &v], Some(&bias))?;
            let a = step.reshape(&a, &[batch.rows, nh * d])?;
            let a = step.linear(&a, &layer.attn_out)?;
            let y = step.run(Op::Add, &[&x, &a])?;
            x = step.layer_norm(&y, &layer.attn_norm, c.norm_eps)?;
            let gu = step.linear(&x, &layer.gated)?;
            let m = if self.settings.gelu {
                step.run(geglu.clone(), &[&gu])?
            } else {
                self.reglu(step, &gu)?
            };
            let m = step.linear(&m, &layer.wo)?;
            let y = step.run(Op::Add, &[&x, &m])?;
            x = step.layer_norm(&y, &layer.ffn_norm, c.norm_eps)?;
        }
        Ok(x)
    }

    /// `relu(g) · u` for `[g; u]`.
    fn reglu(&self, step: &mut Step<'_>, gu: &Tensor) -> Result<Tensor> {
        let f = self.config.intermediate_size;
        let half = |start: usize| Op::Slice {
            axis: -1,
            start: start as isize,
            end: (start + f) as isize,
            step: 1,
        };
        let g = step.run(half(0), &[gu])?;
        let u = step.run(half(f), &[gu])?;
        let g = step.run(Op::Relu, &[&g])?;
        step.run(Op::Mul, &[&g, &u])
    }
}

//! DeBERTa weights under transformers' names (`deberta.encoder.layer.N.attention.self.
//! query_proj`, `deberta.encoder.rel_embeddings`; v1's fused `attention.self.in_proj`),
//! checked for presence and shape at load.

use super::config::{BertConfig, BertHead};
use super::deberta_config::DebertaSettings;
use super::settings::BertActivation;
use crate::step::{Linear, Norm};
use cyb_format::ModelFile;
use cyb_tensor::{DType, Error, Result, Tensor};
use std::collections::HashSet;

pub(super) struct DebertaLayer {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    /// Separate position projections (`share_att_key: false`).
    pub pos_k: Option<Linear>,
    pub pos_q: Option<Linear>,
    pub attn_out: Linear,
    pub attn_norm: Norm,
    pub up: Linear,
    pub down: Linear,
    pub ffn_norm: Norm,
}

pub(super) enum DebertaHead {
    None,
    /// `classifier(act(pooler.dense(h_first)))`.
    Sequence {
        pooler: Linear,
        out: Linear,
    },
    /// `classifier(h)` per token.
    Token {
        out: Linear,
    },
    /// `decoder(LayerNorm(act(dense(h))))` per token; see [`DebertaWeights::masked_lm`] for
    /// the two layouts.
    MaskedLm {
        dense: Linear,
        act: BertActivation,
        norm: Norm,
        decoder: Linear,
    },
}

pub(super) struct DebertaWeights {
    pub word: Tensor,
    pub position: Option<Tensor>,
    pub token_type: Option<Tensor>,
    pub embed_proj: Option<Linear>,
    pub embed_norm: Norm,
    pub rel: Option<Tensor>,
    pub rel_norm: Option<Norm>,
    /// deberta-v2-xlarge's convolution, unfolded to one `[h, kernel·h]` projection of the
    /// `kernel` shifted copies of the input side by side, and its LayerNorm.
    pub conv: Option<(Linear, Norm)>,
    pub layers: Vec<DebertaLayer>,
    pub head: DebertaHead,
}

struct Loader<'a> {
    file: &'a ModelFile,
    names: HashSet<String>,
}

impl Loader<'_> {
    fn tensor(&self, name: &str, dims: &[usize]) -> Result<Tensor> {
        if !self.names.contains(name) {
            return Err(Error::MissingTensor {
                name: name.to_string(),
                required_by: format!("deberta in {}", self.file.path().display()),
            });
        }
        let t = self.file.tensor(name)?;
        if t.dims() != dims {
            return Err(Error::shape(format!("tensor {name}"), dims, t.dims()));
        }
        Ok(t)
    }

    fn linear(&self, name: &str, out: usize, inp: usize) -> Result<Linear> {
        Ok(Linear {
            w: self.tensor(&format!("{name}.weight"), &[out, inp])?,
            b: Some(self.tensor(&format!("{name}.bias"), &[out])?),
        })
    }

    fn norm(&self, name: &str, d: usize) -> Result<Norm> {
        Ok(Norm {
            w: self.tensor(&format!("{name}.weight"), &[d])?,
            b: self.tensor(&format!("{name}.bias"), &[d])?,
        })
    }

    /// `conv.weight` `[h, h, k]` (PyTorch's Conv1d) rearranged so that output `o` reads tap `t`
    /// of input channel `c` at column `t·h + c`.
    fn conv(&self, name: &str, h: usize, k: usize) -> Result<(Linear, Norm)> {
        let w = self.tensor(&format!("{name}.conv.weight"), &[h, h, k])?;
        let dtype = w.dtype();
        let w = w.to_f32_vec()?;
        let mut unfolded = vec![0f32; h * k * h];
        for (o, row) in unfolded.chunks_exact_mut(k * h).enumerate() {
            for c in 0..h {
                for t in 0..k {
                    row[t * h + c] = w[(o * h + c) * k + t];
                }
            }
        }
        let w = match dtype {
            DType::F16 | DType::BF16 => Tensor::from_f32_as(&[h, k * h], &unfolded, dtype)?,
            _ => Tensor::from_f32(&[h, k * h], &unfolded)?,
        };
        Ok((
            Linear {
                w,
                b: Some(self.tensor(&format!("{name}.conv.bias"), &[h])?),
            },
            self.norm(&format!("{name}.LayerNorm"), h)?,
        ))
    }

    /// DeBERTa v1's attention inputs: `in_proj` `[3h, h]` holds, per head, its query, key and
    /// value rows in turn (transformers splits the projected heads in three); `q_bias` and
    /// `v_bias` are in plain head order and the key has no bias.
    fn v1_qkv(&self, a: &str, h: usize, d: usize) -> Result<(Linear, Linear, Linear)> {
        let w = self.tensor(&format!("{a}.in_proj.weight"), &[3 * h, h])?;
        let dtype = w.dtype();
        let all = w.to_f32_vec()?;
        let mut parts = [
            Vec::with_capacity(h * h),
            Vec::with_capacity(h * h),
            Vec::with_capacity(h * h),
        ];
        // Rows of 3·d per head: [q rows; k rows; v rows].
        for (r, row) in all.chunks_exact(h).enumerate() {
            parts[(r % (3 * d)) / d].extend_from_slice(row);
        }
        let matrix = |data: &[f32]| -> Result<Tensor> {
            match dtype {
                DType::F16 | DType::BF16 => Tensor::from_f32_as(&[h, h], data, dtype),
                _ => Tensor::from_f32(&[h, h], data),
            }
        };
        let [q, k, v] = parts;
        Ok((
            Linear {
                w: matrix(&q)?,
                b: Some(self.tensor(&format!("{a}.q_bias"), &[h])?),
            },
            Linear {
                w: matrix(&k)?,
                b: None,
            },
            Linear {
                w: matrix(&v)?,
                b: Some(self.tensor(&format!("{a}.v_bias"), &[h])?),
            },
        ))
    }
}

impl DebertaWeights {
    pub(super) fn load(
        file: &ModelFile,
        c: &BertConfig,
        s: &DebertaSettings,
    ) -> Result<DebertaWeights> {
        let names = file.tensors().into_iter().map(|t| t.name).collect();
        let l = Loader { file, names };
        let (p, h, f, e) = (
            &c.prefix,
            c.hidden_size,
            c.intermediate_size,
            s.embedding_size,
        );
        let layers = (0..c.num_layers)
            .map(|i| {
                let b = format!("{p}encoder.layer.{i}");
                let a = format!("{b}.attention.self");
                let separate = s.relative && !s.share_att_key;
                let (q, k, v) = match s.v1 {
                    true => l.v1_qkv(&a, h, c.head_dim)?,
                    false => (
                        l.linear(&format!("{a}.query_proj"), h, h)?,
                        l.linear(&format!("{a}.key_proj"), h, h)?,
                        l.linear(&format!("{a}.value_proj"), h, h)?,
                    ),
                };
                let (pos_k, pos_q) = match s.v1 {
                    true => ("pos_proj", "pos_q_proj"),
                    false => ("pos_key_proj", "pos_query_proj"),
                };
                Ok(DebertaLayer {
                    q,
                    k,
                    v,
                    pos_k: (separate && s.c2p)
                        .then(|| -> Result<Linear> {
                            let w = l.tensor(&format!("{a}.{pos_k}.weight"), &[h, h])?;
                            // v1's pos_proj has no bias.
                            let b = match s.v1 {
                                true => None,
                                false => Some(l.tensor(&format!("{a}.{pos_k}.bias"), &[h])?),
                            };
                            Ok(Linear { w, b })
                        })
                        .transpose()?,
                    pos_q: (separate && s.p2c)
                        .then(|| l.linear(&format!("{a}.{pos_q}"), h, h))
                        .transpose()?,
                    attn_out: l.linear(&format!("{b}.attention.output.dense"), h, h)?,
                    attn_norm: l.norm(&format!("{b}.attention.output.LayerNorm"), h)?,
                    up: l.linear(&format!("{b}.intermediate.dense"), f, h)?,
                    down: l.linear(&format!("{b}.output.dense"), h, f)?,
                    ffn_norm: l.norm(&format!("{b}.output.LayerNorm"), h)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let n = c.labels.len();
        let head = match c.head {
            BertHead::SequenceClassification => DebertaHead::Sequence {
                pooler: l.linear("pooler.dense", h, h)?,
                out: l.linear("classifier", n, h)?,
            },
            BertHead::TokenClassification => DebertaHead::Token {
                out: l.linear("classifier", n, h)?,
            },
            BertHead::None => DebertaHead::None,
            BertHead::MaskedLm => DebertaHead::None,
        };
        let emb = |n: &str| format!("{p}embeddings.{n}");
        let word = l.tensor(&emb("word_embeddings.weight"), &[c.vocab_size, e])?;
        let head = match c.head {
            BertHead::MaskedLm => Self::masked_lm(&l, c, s, &word)?,
            _ => head,
        };
        Ok(DebertaWeights {
            word,
            position: s
                .position_biased_input
                .then(|| l.tensor(&emb("position_embeddings.weight"), &[c.max_position, e]))
                .transpose()?,
            token_type: (c.type_vocab_size > 0)
                .then(|| {
                    l.tensor(
                        &emb("token_type_embeddings.weight"),
                        &[c.type_vocab_size, e],
                    )
                })
                .transpose()?,
            embed_proj: if e == h {
                None
            } else {
                Some(Linear {
                    w: l.tensor(&emb("embed_proj.weight"), &[h, e])?,
                    b: None,
                })
            },
            embed_norm: l.norm(&emb("LayerNorm"), h)?,
            rel: s
                .relative
                .then(|| {
                    l.tensor(
                        &format!("{p}encoder.rel_embeddings.weight"),
                        &[2 * s.span, h],
                    )
                })
                .transpose()?,
            conv: s
                .conv
                .as_ref()
                .map(|conv| l.conv(&format!("{p}encoder.conv"), h, conv.kernel))
                .transpose()?,
            rel_norm: (s.relative && s.norm_rel)
                .then(|| l.norm(&format!("{p}encoder.LayerNorm"), h))
                .transpose()?,
            layers,
            head,
        })
    }

    /// The masked-LM head in either of transformers' layouts:
    /// - `lm_predictions.lm_head.{dense, LayerNorm, bias}` with the word embedding as decoder
    ///   (`legacy: false`; the layout Microsoft's DeBERTa-v2/v3 checkpoints are saved in);
    /// - `cls.predictions.{transform.dense, transform.LayerNorm, decoder, bias}`, BERT's head
    ///   projecting to `embedding_size` (`legacy: true`, transformers' default).
    ///
    /// The layout is the one the file holds; with both, `legacy` decides. A checkpoint whose
    /// config keeps the default `legacy: true` but holds only `lm_predictions` weights gets its
    /// own head here, where transformers would start a freshly initialized one.
    fn masked_lm(
        l: &Loader<'_>,
        c: &BertConfig,
        s: &DebertaSettings,
        word: &Tensor,
    ) -> Result<DebertaHead> {
        let (h, e, v) = (c.hidden_size, s.embedding_size, c.vocab_size);
        let has = |n: &str| l.names.contains(n);
        let modern = has("lm_predictions.lm_head.dense.weight");
        let legacy = has("cls.predictions.transform.dense.weight");
        if modern && (!legacy || !s.legacy_mlm) {
            if e != h {
                return Err(Error::invalid(
                    "load",
                    format!(
                        "{}: the lm_predictions masked-LM head multiplies by the word \
                         embedding, which needs embedding_size ({e}) = hidden_size ({h})",
                        l.file.path().display()
                    ),
                ));
            }
            return Ok(DebertaHead::MaskedLm {
                dense: l.linear("lm_predictions.lm_head.dense", h, h)?,
                act: c.activation,
                norm: l.norm("lm_predictions.lm_head.LayerNorm", h)?,
                decoder: Linear {
                    w: word.clone(),
                    b: Some(l.tensor("lm_predictions.lm_head.bias", &[v])?),
                },
            });
        }
        if !legacy {
            return Err(Error::MissingTensor {
                name: "lm_predictions.lm_head.dense.weight (or the legacy \
                       cls.predictions.transform.dense.weight)"
                    .into(),
                required_by: format!(
                    "the DeBERTa masked LM in {}: neither masked-LM head layout is in the file",
                    l.file.path().display()
                ),
            });
        }
        let w = match has("cls.predictions.decoder.weight") {
            true => l.tensor("cls.predictions.decoder.weight", &[v, e])?,
            false => word.clone(),
        };
        let bias = match has("cls.predictions.bias") {
            true => "cls.predictions.bias",
            false => "cls.predictions.decoder.bias",
        };
        Ok(DebertaHead::MaskedLm {
            dense: l.linear("cls.predictions.transform.dense", e, h)?,
            act: c.activation,
            norm: l.norm("cls.predictions.transform.LayerNorm", e)?,
            decoder: Linear {
                w,
                b: Some(l.tensor(bias, &[v])?),
            },
        })
    }
}

//! The BertStyle weights under Hugging Face's names (BERT/RoBERTa `encoder.layer.N.attention.
//! self.query`, DistilBERT `transformer.layer.N.attention.q_lin`), each checked for presence
//! and shape at load time and then used in place from the file mapping.

use super::config::{BertConfig, BertHead, BertVariant};
use super::settings::BertActivation;
use crate::step::{Linear, Norm};
use cyb_format::ModelFile;
use cyb_ops::GeluApprox;
use cyb_tensor::{Error, Result, Tensor};
use std::collections::HashSet;

/// One post-LN block: attention, then the feed-forward, each followed by a residual LayerNorm.
pub(super) struct BertLayer {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub attn_out: Linear,
    pub attn_norm: Norm,
    pub up: Linear,
    pub down: Linear,
    pub ffn_norm: Norm,
}

/// The classification head on top of the encoder.
pub(super) enum HeadWeights {
    None,
    /// `out(act(dense(h_first)))`: BERT's pooler + tanh, RoBERTa's `classifier.dense` + tanh,
    /// DistilBERT's `pre_classifier` + ReLU.
    Sequence {
        dense: Linear,
        out: Linear,
    },
    /// llama.cpp's classifier from a GGUF file: `out(tanh(cls(h_first)))`, each step only
    /// when its tensor is there (see [`super::gguf`]).
    Rank {
        cls: Option<Linear>,
        out: Option<Linear>,
    },
    /// `classifier(h)` for every token.
    Token {
        out: Linear,
    },
    /// `decoder(LayerNorm(act(dense(h))))` for every token; the decoder is usually the word
    /// embedding (tied) plus its own bias.
    MaskedLm {
        dense: Linear,
        act: BertActivation,
        norm: Norm,
        decoder: Linear,
    },
}

/// Every weight of the model.
pub(super) struct BertWeights {
    pub word: Tensor,
    pub position: Tensor,
    pub token_type: Option<Tensor>,
    pub embed_norm: Norm,
    pub layers: Vec<BertLayer>,
    pub head: HeadWeights,
}

struct Loader<'a> {
    file: &'a ModelFile,
    names: HashSet<String>,
    cfg: &'a BertConfig,
}

impl Loader<'_> {
    fn tensor(&self, name: &str, dims: &[usize]) -> Result<Tensor> {
        // GGUF files keep llama.cpp's names; the loader asks in Hugging Face's.
        let mapped;
        let name = match self.file {
            ModelFile::Gguf(_) => {
                mapped = super::gguf::gguf_name(name).unwrap_or_else(|| name.to_string());
                mapped.as_str()
            }
            _ => name,
        };
        if !self.names.contains(name) {
            return Err(Error::MissingTensor {
                name: name.to_string(),
                required_by: format!(
                    "{} ({:?}) in {}",
                    self.cfg.architecture,
                    self.cfg.variant,
                    self.file.path().display()
                ),
            });
        }
        let t = self.file.tensor(name)?;
        if t.dims() != dims {
            return Err(Error::shape(format!("tensor {name}"), dims, t.dims()));
        }
        Ok(t)
    }

    /// `{name}.weight` `[out, inp]` and `{name}.bias` `[out]`.
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

    fn layer(&self, i: usize) -> Result<BertLayer> {
        let c = self.cfg;
        let (h, f) = (c.hidden_size, c.intermediate_size);
        let p = &c.prefix;
        if c.variant == BertVariant::DistilBert {
            let b = format!("{p}transformer.layer.{i}");
            return Ok(BertLayer {
                q: self.linear(&format!("{b}.attention.q_lin"), h, h)?,
                k: self.linear(&format!("{b}.attention.k_lin"), h, h)?,
                v: self.linear(&format!("{b}.attention.v_lin"), h, h)?,
                attn_out: self.linear(&format!("{b}.attention.out_lin"), h, h)?,
                attn_norm: self.norm(&format!("{b}.sa_layer_norm"), h)?,
                up: self.linear(&format!("{b}.ffn.lin1"), f, h)?,
                down: self.linear(&format!("{b}.ffn.lin2"), h, f)?,
                ffn_norm: self.norm(&format!("{b}.output_layer_norm"), h)?,
            });
        }
        let b = format!("{p}encoder.layer.{i}");
        Ok(BertLayer {
            q: self.linear(&format!("{b}.attention.self.query"), h, h)?,
            k: self.linear(&format!("{b}.attention.self.key"), h, h)?,
            v: self.linear(&format!("{b}.attention.self.value"), h, h)?,
            attn_out: self.linear(&format!("{b}.attention.output.dense"), h, h)?,
            attn_norm: self.norm(&format!("{b}.attention.output.LayerNorm"), h)?,
            up: self.linear(&format!("{b}.intermediate.dense"), f, h)?,
            down: self.linear(&format!("{b}.output.dense"), h, f)?,
            ffn_norm: self.norm(&format!("{b}.output.LayerNorm"), h)?,
        })
    }

    /// The masked-LM head; `word` is the embedding the decoder is tied to when the file has
    /// no decoder weight of its own.
    fn masked_lm(&self, word: &Tensor) -> Result<HeadWeights> {
        let c = self.cfg;
        let (h, v) = (c.hidden_size, c.vocab_size);
        let (dense, norm, decoder, biases, act) = match c.variant {
            BertVariant::Bert => (
                "cls.predictions.transform.dense",
                "cls.predictions.transform.LayerNorm",
                "cls.predictions.decoder",
                ["cls.predictions.bias", "cls.predictions.decoder.bias"],
                c.activation,
            ),
            // transformers' RobertaLMHead applies GELU-erf whatever hidden_act says.
            BertVariant::Roberta => (
                "lm_head.dense",
                "lm_head.layer_norm",
                "lm_head.decoder",
                ["lm_head.bias", "lm_head.decoder.bias"],
                BertActivation::Gelu(GeluApprox::Erf),
            ),
            BertVariant::DistilBert => (
                "vocab_transform",
                "vocab_layer_norm",
                "vocab_projector",
                ["vocab_projector.bias", "vocab_projector.bias"],
                c.activation,
            ),
        };
        let w_name = format!("{decoder}.weight");
        let w = if self.names.contains(&w_name) {
            self.tensor(&w_name, &[v, h])?
        } else {
            word.clone()
        };
        let b_name = biases
            .iter()
            .find(|n| self.names.contains(**n))
            .copied()
            .unwrap_or(biases[0]);
        Ok(HeadWeights::MaskedLm {
            dense: self.linear(dense, h, h)?,
            act,
            norm: self.norm(norm, h)?,
            decoder: Linear {
                w,
                b: Some(self.tensor(b_name, &[v])?),
            },
        })
    }

    fn head(&self, word: &Tensor) -> Result<HeadWeights> {
        let c = self.cfg;
        let (h, n) = (c.hidden_size, c.labels.len());
        Ok(match (c.head, c.variant) {
            (BertHead::None, _) => HeadWeights::None,
            (BertHead::MaskedLm, _) => self.masked_lm(word)?,
            (BertHead::SequenceClassification, _) if matches!(self.file, ModelFile::Gguf(_)) => {
                rank_head(self.file, c)?
            }
            (BertHead::TokenClassification, _) => HeadWeights::Token {
                out: self.linear("classifier", n, h)?,
            },
            (BertHead::SequenceClassification, BertVariant::Bert) => HeadWeights::Sequence {
                dense: self.linear(&format!("{}pooler.dense", c.prefix), h, h)?,
                out: self.linear("classifier", n, h)?,
            },
            (BertHead::SequenceClassification, BertVariant::Roberta) => HeadWeights::Sequence {
                dense: self.linear("classifier.dense", h, h)?,
                out: self.linear("classifier.out_proj", n, h)?,
            },
            (BertHead::SequenceClassification, BertVariant::DistilBert) => HeadWeights::Sequence {
                dense: self.linear("pre_classifier", h, h)?,
                out: self.linear("classifier", n, h)?,
            },
        })
    }
}

impl BertWeights {
    /// Finds every tensor `cfg` needs in `file` and checks its shape.
    pub(super) fn load(file: &ModelFile, cfg: &BertConfig) -> Result<BertWeights> {
        let names = file.tensors().into_iter().map(|t| t.name).collect();
        let l = Loader { file, names, cfg };
        let (p, h) = (&cfg.prefix, cfg.hidden_size);
        let e = |s: &str| format!("{p}embeddings.{s}");
        let token_type = match cfg.type_vocab_size {
            0 => None,
            n => Some(l.tensor(&e("token_type_embeddings.weight"), &[n, h])?),
        };
        let layers = (0..cfg.num_layers)
            .map(|i| l.layer(i))
            .collect::<Result<Vec<_>>>()?;
        let word = l.tensor(&e("word_embeddings.weight"), &[cfg.vocab_size, h])?;
        Ok(BertWeights {
            position: l.tensor(&e("position_embeddings.weight"), &[cfg.max_position, h])?,
            token_type,
            embed_norm: l.norm(&e("LayerNorm"), h)?,
            layers,
            head: l.head(&word)?,
            word,
        })
    }
}

/// The classifier of a `bert` GGUF file (see [`super::gguf`]'s module notes); `cls` is `[hidden, hidden]`
/// when `cls.output` follows it, else `[labels, hidden]`. Biases are optional, as in
/// llama.cpp.
pub(super) fn rank_head(file: &ModelFile, c: &BertConfig) -> Result<HeadWeights> {
    let (h, n) = (c.hidden_size, c.labels.len());
    let names: std::collections::HashSet<String> =
        file.tensors().into_iter().map(|t| t.name).collect();
    let linear = |name: &str, out: usize| -> Result<Option<Linear>> {
        let w_name = format!("{name}.weight");
        if !names.contains(&w_name) {
            return Ok(None);
        }
        let w = file.tensor(&w_name)?;
        if w.dims() != [out, h] {
            return Err(Error::shape(
                format!("tensor {w_name}"),
                &[out, h],
                w.dims(),
            ));
        }
        let b_name = format!("{name}.bias");
        let b = match names.contains(&b_name) {
            true => {
                let b = file.tensor(&b_name)?;
                if b.dims() != [out] {
                    return Err(Error::shape(format!("tensor {b_name}"), &[out], b.dims()));
                }
                Some(b)
            }
            false => None,
        };
        Ok(Some(Linear { w, b }))
    };
    let out = linear("cls.output", n)?;
    let cls = linear("cls", if out.is_some() { h } else { n })?;
    if cls.is_none() && out.is_none() {
        return Err(Error::MissingTensor {
            name: "cls.output.weight (or cls.weight)".into(),
            required_by: format!("the classifier of {}", file.path().display()),
        });
    }
    Ok(HeadWeights::Rank { cls, out })
}

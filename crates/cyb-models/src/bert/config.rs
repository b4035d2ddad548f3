//! `BertConfig`: every switch of the BertStyle encoder family, resolved once from a Hugging
//! Face `config.json` (read raw: DistilBERT names its sizes `dim`, `n_layers`, `hidden_dim`,
//! which the decoder-oriented `ModelConfig` does not know), so the forward pass reads flags
//! and never architecture names.

use super::deberta_config::DebertaSettings;
use super::settings::{invalid, BertActivation, JinaSettings, ModernSettings};
use cyb_format::ModelFile;
use cyb_ops::GeluApprox;
use cyb_tensor::Result;
use serde_json::Value;

/// `model_type` values this family runs.
pub const BERT_ARCHITECTURES: &[&str] = &[
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "distilbert",
    "modernbert",
    "deberta-v2",
    "deberta",
];

/// Encoder `model_type`s (Hugging Face) and GGUF architectures recognized as encoders but not
/// run yet: loading one is an error naming it, not a decoder-family error.
const ENCODERS_NOT_YET: &[&str] = &[
    "nomic_bert",
    "nomic-bert",
    "jina_bert",
    "jina-bert-v2",
    "modern-bert",
    "electra",
    "mpnet",
    "xlm-roberta-xl",
];

/// The member of the family, which decides tensor names, position ids and heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BertVariant {
    /// BERT, MiniLM, e5, bge: absolute positions `0..n`, token types, post-LN blocks.
    Bert,
    /// RoBERTa, XLM-RoBERTa, CamemBERT: positions start after the padding id
    /// (`pad + 1 + i`), one token type.
    Roberta,
    /// DistilBERT: no token types, `q_lin`/`ffn.lin1` names, pre-classifier with ReLU.
    DistilBert,
}

/// What sits on top of the encoder, from the class name in `architectures`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BertHead {
    /// The bare encoder (`BertModel`, sentence-transformers checkpoints).
    None,
    /// One label per text from the first token (`*ForSequenceClassification`).
    SequenceClassification,
    /// One label per token (`*ForTokenClassification`).
    TokenClassification,
    /// Vocabulary logits per token (`*ForMaskedLM`).
    MaskedLm,
}

/// The resolved hyper-parameters and switches of a BertStyle model.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    /// `model_type` as the file gives it.
    pub architecture: String,
    pub variant: BertVariant,
    pub head: BertHead,
    /// Prefix of the encoder's tensor names (`bert.`, `roberta.`, or empty for a bare model).
    pub prefix: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub head_dim: usize,
    /// Rows of the position embedding table.
    pub max_position: usize,
    /// Rows of the token type table (0: the model has none).
    pub type_vocab_size: usize,
    /// Position id of the first token (RoBERTa: `pad + 1`, else 0).
    pub position_offset: usize,
    pub pad_token_id: u32,
    pub norm_eps: f32,
    pub activation: BertActivation,
    /// Class names by index (`id2label`); empty without a classification head.
    pub labels: Vec<String>,
    /// ModernBERT's switches (its block is pre-LN with rope and GeGLU, run by
    /// [`crate::ModernBertModel`]); `None` for the post-LN members.
    pub modern: Option<ModernSettings>,
    /// DeBERTa-v2/v3's switches (disentangled relative attention, run by
    /// [`crate::DebertaModel`]); `None` for the other members.
    pub deberta: Option<DebertaSettings>,
    /// Jina-v2's switches (ALiBi instead of a position table, GLU feed-forward, run by
    /// [`crate::JinaBertModel`]); `None` for the other members.
    pub jina: Option<JinaSettings>,
}

impl BertConfig {
    /// True when `file` holds an encoder (by `model_type` / `general.architecture`): one of
    /// this family, or one known but not run yet (whose load then fails naming it).
    pub fn is_bert_file(file: &ModelFile) -> bool {
        let arch = match file {
            ModelFile::HuggingFace(h) => h.config_json().get("model_type").and_then(Value::as_str),
            ModelFile::Gguf(g) => g
                .get("general.architecture")
                .and_then(cyb_format::MetaValue::as_str),
        };
        arch.is_some_and(|t| BERT_ARCHITECTURES.contains(&t) || ENCODERS_NOT_YET.contains(&t))
    }

    /// From `config.json` and the names of the tensors the checkpoint holds.
    pub fn from_hf_json(config: &Value, tensor_names: &[String]) -> Result<BertConfig> {
        let get = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| config.get(*n).filter(|v| !v.is_null()))
        };
        let uint = |names: &[&str]| -> Result<Option<usize>> {
            match get(names) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .and_then(|v| usize::try_from(v).ok())
                    .map(Some)
                    .ok_or_else(|| {
                        invalid(names[0], format!("expected an unsigned integer, got {v}"))
                    }),
            }
        };
        let req = |names: &[&str]| -> Result<usize> {
            match uint(names)? {
                Some(0) => Err(invalid(names[0], "must be at least 1")),
                Some(v) => Ok(v),
                None => Err(invalid(names[0], "required but absent from config.json")),
            }
        };
        let architecture = get(&["model_type"])
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("model_type", "required but absent from config.json"))?
            .to_string();
        let variant = match architecture.as_str() {
            "bert" => BertVariant::Bert,
            "roberta" | "xlm-roberta" | "camembert" => BertVariant::Roberta,
            "distilbert" => BertVariant::DistilBert,
            // Tensor names and the block differ entirely; only the shared fields are used.
            "modernbert" | "deberta-v2" | "deberta" => BertVariant::Bert,
            other if ENCODERS_NOT_YET.contains(&other) => {
                return Err(invalid(
                    "model_type",
                    format!(
                        "\"{other}\" is an encoder architecture this build does not run yet; \
                         the BertStyle family runs {}",
                        BERT_ARCHITECTURES.join(", ")
                    ),
                ))
            }
            other => {
                return Err(invalid(
                    "model_type",
                    format!(
                        "unknown architecture \"{other}\": the BertStyle family runs {}",
                        BERT_ARCHITECTURES.join(", ")
                    ),
                ))
            }
        };
        let distil = variant == BertVariant::DistilBert;
        let alibi = get(&["position_embedding_type"]).and_then(Value::as_str) == Some("alibi");
        if let Some(kind) = get(&["position_embedding_type"]).and_then(Value::as_str) {
            if kind != "absolute" && !(alibi && variant == BertVariant::Bert) {
                return Err(invalid(
                    "position_embedding_type",
                    format!(
                        "\"{kind}\": supported are absolute position embeddings and ALiBi \
                         (Jina-v2, model_type bert)"
                    ),
                ));
            }
        }
        let hidden_size = req(&["hidden_size", "dim"])?;
        let num_heads = req(&["num_attention_heads", "n_heads"])?;
        if !hidden_size.is_multiple_of(num_heads) {
            return Err(invalid(
                "num_attention_heads",
                format!("{num_heads} does not divide hidden_size {hidden_size}"),
            ));
        }
        let act_name = get(&["hidden_act", "activation"])
            .and_then(Value::as_str)
            .unwrap_or("gelu");
        let activation = match act_name {
            "gelu" => BertActivation::Gelu(GeluApprox::Erf),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => {
                BertActivation::Gelu(GeluApprox::Tanh)
            }
            "relu" => BertActivation::Relu,
            other => {
                return Err(invalid(
                    "hidden_act",
                    format!("\"{other}\": supported are gelu, gelu_new, gelu_pytorch_tanh, relu"),
                ))
            }
        };
        let pad = uint(&["pad_token_id"])?.unwrap_or(match variant {
            BertVariant::Roberta => 1,
            _ => 0,
        });
        let pad_token_id = u32::try_from(pad).map_err(|_| invalid("pad_token_id", "too large"))?;
        let position_offset = match variant {
            BertVariant::Roberta => pad + 1,
            _ => 0,
        };
        // transformers' default, and DistilBERT's hard-coded value (its config has no key).
        let norm_eps = get(&["layer_norm_eps", "norm_eps"])
            .and_then(Value::as_f64)
            .map_or(1e-12, |e| e as f32);
        let class = get(&["architectures"])
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .unwrap_or("");
        let head = if alibi && class.ends_with("ForMaskedLM") {
            // jina-embeddings-v2 checkpoints are saved under JinaBertForMaskedLM without the
            // masked-LM head: they are bare encoders.
            BertHead::None
        } else if class.ends_with("ForSequenceClassification") {
            BertHead::SequenceClassification
        } else if class.ends_with("ForTokenClassification") {
            BertHead::TokenClassification
        } else if class.ends_with("ForMaskedLM") {
            BertHead::MaskedLm
        } else {
            BertHead::None
        };
        let labels = if matches!(head, BertHead::None | BertHead::MaskedLm) {
            Vec::new()
        } else {
            labels_of(config)?
        };
        let prefix = [
            "bert.",
            "roberta.",
            "distilbert.",
            "camembert.",
            "deberta.",
            "",
        ]
        .into_iter()
        .find(|p| {
            let want = format!("{p}embeddings.word_embeddings.weight");
            tensor_names.contains(&want)
        })
        .unwrap_or("")
        .to_string();
        Ok(BertConfig {
            variant,
            head,
            prefix,
            vocab_size: req(&["vocab_size"])?,
            hidden_size,
            intermediate_size: req(&["intermediate_size", "hidden_dim"])?,
            num_layers: req(&["num_hidden_layers", "n_layers"])?,
            num_heads,
            head_dim: hidden_size / num_heads,
            max_position: req(&["max_position_embeddings"])?,
            type_vocab_size: if distil || architecture == "modernbert" {
                0
            } else if matches!(architecture.as_str(), "deberta-v2" | "deberta") {
                uint(&["type_vocab_size"])?.unwrap_or(0)
            } else {
                uint(&["type_vocab_size"])?.unwrap_or(2)
            },
            position_offset,
            pad_token_id,
            norm_eps,
            activation,
            labels,
            modern: (architecture == "modernbert")
                .then(|| {
                    ModernSettings::from_hf_json(config, uint(&["num_hidden_layers"])?.unwrap_or(0))
                })
                .transpose()?,
            deberta: matches!(architecture.as_str(), "deberta-v2" | "deberta")
                .then(|| DebertaSettings::from_hf_json(config, hidden_size))
                .transpose()?,
            jina: alibi
                .then(|| JinaSettings::from_hf_json(config))
                .transpose()?,
            architecture,
        })
    }

    /// The longest sequence (special tokens included) the position table can hold.
    pub fn max_tokens(&self) -> usize {
        self.max_position.saturating_sub(self.position_offset)
    }
}

/// `id2label` as a dense list; a missing index is named `LABEL_i` as transformers does.
fn labels_of(config: &Value) -> Result<Vec<String>> {
    let Some(map) = config.get("id2label").and_then(Value::as_object) else {
        let n = config
            .get("num_labels")
            .and_then(Value::as_u64)
            .unwrap_or(2) as usize;
        return Ok((0..n).map(|i| format!("LABEL_{i}")).collect());
    };
    let mut pairs = Vec::with_capacity(map.len());
    for (k, v) in map {
        let i: usize = k
            .parse()
            .map_err(|_| invalid("id2label", format!("key {k:?} is not an index")))?;
        let name = v
            .as_str()
            .ok_or_else(|| invalid("id2label", format!("label {i} is not a string")))?;
        pairs.push((i, name.to_string()));
    }
    let n = pairs.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
    if n > 1 << 20 {
        return Err(invalid(
            "id2label",
            format!("index {} is implausibly large", n - 1),
        ));
    }
    let mut labels: Vec<String> = (0..n).map(|i| format!("LABEL_{i}")).collect();
    for (i, name) in pairs {
        if let Some(slot) = labels.get_mut(i) {
            *slot = name;
        }
    }
    Ok(labels)
}

//! BERT and Jina-v2 encoders from GGUF, as llama.cpp's convert_hf_to_gguf.py writes them: the
//! `bert.*` / `jina-bert-v2.*` hyper-parameters and llama.cpp's tensor names (`token_embd`, `token_types`,
//! `position_embd`, `token_embd_norm`, `blk.N.attn_q/k/v`, `blk.N.attn_output`,
//! `blk.N.attn_output_norm`, `blk.N.ffn_up/down`, `blk.N.layer_output_norm`). The config is
//! resolved into the same [`BertConfig`] as a Hugging Face directory, and tensors are looked up
//! by translating the Hugging Face name the loader asks for, so the forward pass is shared.
//!
//! A `bert` file with llama.cpp's classifier tensors (`cls`, `cls.output`; rerankers and
//! classifiers converted from `*ForSequenceClassification`) gets a sequence-classification
//! head run as llama.cpp's RANK pooling runs it: `cls.output(tanh(cls(h_first)))`, each step
//! skipped when its tensor is absent. That is transformers' head for RoBERTa/XLM-R
//! (`classifier.dense`, `classifier.out_proj`); for BERT llama.cpp's converter drops the
//! pooler, so such a file scores `cls.output(h_first)`, as llama.cpp does.

use super::config::{BertConfig, BertHead, BertVariant};
use super::pooling::Pooling;
use super::settings::{BertActivation, JinaSettings};
use cyb_format::{GgufFile, ModelFile};
use cyb_ops::GeluApprox;
use cyb_tensor::{Error, Result};

fn invalid(g: &GgufFile, field: &str, reason: impl Into<String>) -> Error {
    Error::InvalidConfig {
        field: format!("{}: {field}", g.path().display()),
        reason: reason.into(),
    }
}

/// The rows of tensor `name`, if the file has it.
fn rows(file: &ModelFile, name: &str) -> Result<Option<usize>> {
    if !file.tensors().iter().any(|t| t.name == name) {
        return Ok(None);
    }
    Ok(file.tensor(name)?.dims().first().copied())
}

impl BertConfig {
    /// From an opened Hugging Face directory; the tensor names decide the encoder prefix.
    pub fn from_file(file: &ModelFile) -> Result<BertConfig> {
        match file {
            ModelFile::HuggingFace(h) => {
                let names: Vec<String> = h.tensor_infos().map(|(t, _)| t.name.clone()).collect();
                BertConfig::from_hf_json(h.config_json(), &names)
            }
            ModelFile::Gguf(g) => config(file, g),
        }
    }
}

/// A GGUF file's BERT config (`general.architecture = "bert"`).
fn config(file: &ModelFile, g: &GgufFile) -> Result<BertConfig> {
    let arch = g
        .get("general.architecture")
        .and_then(cyb_format::MetaValue::as_str)
        .unwrap_or_default()
        .to_string();
    let jina = arch == "jina-bert-v2";
    if arch != "bert" && !jina {
        return Err(invalid(
            g,
            "general.architecture",
            format!(
                "\"{arch}\": GGUF encoders are supported for llama.cpp's \"bert\" (BERT, \
                 MiniLM, e5, bge) and \"jina-bert-v2\" architectures; load this one from its \
                 Hugging Face directory"
            ),
        ));
    }
    let uint = |key: &str| -> Result<usize> {
        let full = format!("{arch}.{key}");
        match g.get(&full).and_then(cyb_format::MetaValue::as_u64) {
            Some(0) => Err(invalid(g, &full, "must be at least 1")),
            Some(v) => usize::try_from(v).map_err(|_| invalid(g, &full, "too large")),
            None => Err(invalid(g, &full, "required but absent")),
        }
    };
    let hidden_size = uint("embedding_length")?;
    let num_heads = uint("attention.head_count")?;
    if !hidden_size.is_multiple_of(num_heads) {
        return Err(invalid(
            g,
            "bert.attention.head_count",
            format!("{num_heads} does not divide embedding_length {hidden_size}"),
        ));
    }
    let vocab_size = rows(file, "token_embd.weight")?.ok_or_else(|| Error::MissingTensor {
        name: "token_embd.weight".into(),
        required_by: format!("bert in {}", g.path().display()),
    })?;
    // Jina-v2 has no position table (ALiBi): its length limit is the context length.
    let max_position = match rows(file, "position_embd.weight")? {
        Some(n) => n,
        None => uint("context_length")?,
    };
    let pad = g
        .get("tokenizer.ggml.padding_token_id")
        .and_then(cyb_format::MetaValue::as_u64)
        .and_then(|p| u32::try_from(p).ok())
        .filter(|&p| (p as usize) < vocab_size)
        .unwrap_or(0);
    // Rerankers and classifiers (BERT's and Jina-v2's alike) carry llama.cpp's `cls` /
    // `cls.output`.
    let classes = match rows(file, "cls.output.weight")? {
        Some(n) => Some(n),
        None => rows(file, "cls.weight")?,
    };
    let (head, labels) = match classes {
        Some(n) => (BertHead::SequenceClassification, labels(g, &arch, n)?),
        None => (BertHead::None, Vec::new()),
    };
    Ok(BertConfig {
        architecture: arch.clone(),
        variant: BertVariant::Bert,
        head,
        prefix: String::new(),
        vocab_size,
        hidden_size,
        intermediate_size: uint("feed_forward_length")?,
        num_layers: uint("block_count")?,
        num_heads,
        head_dim: hidden_size / num_heads,
        max_position,
        type_vocab_size: rows(file, "token_types.weight")?.unwrap_or(0),
        position_offset: 0,
        pad_token_id: pad,
        norm_eps: g
            .get(&format!("{arch}.attention.layer_norm_epsilon"))
            .and_then(cyb_format::MetaValue::as_f64)
            .map_or(1e-12, |e| e as f32),
        activation: BertActivation::Gelu(GeluApprox::Erf),
        labels,
        modern: None,
        deberta: None,
        // llama.cpp runs every jina-bert-v2 file's fused feed-forward as GEGLU.
        jina: jina.then_some(JinaSettings { gelu: true }),
    })
}

/// `{arch}.classifier.output_labels`, or transformers' `LABEL_i` names when absent.
fn labels(g: &GgufFile, arch: &str, n: usize) -> Result<Vec<String>> {
    let key = format!("{arch}.classifier.output_labels");
    let Some(value) = g.get(&key) else {
        return Ok((0..n).map(|i| format!("LABEL_{i}")).collect());
    };
    let names = value
        .as_array()
        .and_then(|a| {
            a.iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| invalid(g, &key, "must be an array of strings"))?;
    if names.len() != n {
        return Err(invalid(
            g,
            &key,
            format!("{} labels for a classifier with {n} outputs", names.len()),
        ));
    }
    Ok(names)
}

/// llama.cpp's name for a Hugging Face BERT tensor name (prefix already stripped), or `None`
/// for a tensor llama.cpp does not keep.
pub(super) fn gguf_name(hf: &str) -> Option<String> {
    let (stem, suffix) = hf.rsplit_once('.')?;
    let fixed = match stem {
        "embeddings.word_embeddings" => Some("token_embd"),
        "embeddings.token_type_embeddings" => Some("token_types"),
        "embeddings.position_embeddings" => Some("position_embd"),
        "embeddings.LayerNorm" => Some("token_embd_norm"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(format!("{f}.{suffix}"));
    }
    let rest = stem.strip_prefix("encoder.layer.")?;
    let (layer, part) = rest.split_once('.')?;
    let part = match part {
        "attention.self.query" => "attn_q",
        "attention.self.key" => "attn_k",
        "attention.self.value" => "attn_v",
        "attention.output.dense" => "attn_output",
        "attention.output.LayerNorm" => "attn_output_norm",
        "intermediate.dense" => "ffn_up",
        "output.dense" => "ffn_down",
        "output.LayerNorm" => "layer_output_norm",
        // Jina-v2's gated feed-forward: the fused [gate; up] matrix, the down projection and
        // the post-LN after it.
        "mlp.gated_layers" => "ffn_up",
        "mlp.wo" => "ffn_down",
        "mlp.layernorm" => "layer_output_norm",
        _ => return None,
    };
    Some(format!("blk.{layer}.{part}.{suffix}"))
}

/// The pooling a GGUF encoder asks for (`bert.pooling_type`: 1 mean, 2 cls), if any.
pub fn gguf_pooling(g: &GgufFile) -> Option<Pooling> {
    let arch = g
        .get("general.architecture")
        .and_then(cyb_format::MetaValue::as_str)?;
    match g
        .get(&format!("{arch}.pooling_type"))
        .and_then(cyb_format::MetaValue::as_u64)?
    {
        1 => Some(Pooling::Mean),
        2 => Some(Pooling::Cls),
        _ => None,
    }
}

//! Loading an encoder model: the BertStyle network, its tokenizer, and the sentence-transformers
//! settings a checkpoint ships beside its weights (`modules.json`, `1_Pooling/config.json`,
//! `sentence_bert_config.json`), so `embed` pools, normalizes and limits length as
//! sentence-transformers does for the same directory.

use crate::embed::{Encoder, EncoderNet};
use crate::model::{Model, Net};
use crate::{ChatTemplate, Tokenizer};
use cyb_backend::Dispatcher;
use cyb_format::{ModelConfig, ModelFile};
use cyb_models::{BertConfig, BertModel, DebertaModel, JinaBertModel, ModernBertModel, Pooling};
use cyb_tensor::{Error, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// sentence-transformers' pooling, normalization and length limit for one model directory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SentenceSettings {
    pub pooling: Pooling,
    pub normalize: bool,
    pub max_seq_length: Option<usize>,
}

pub(crate) fn load_encoder(
    path: &Path,
    file: &ModelFile,
    dispatcher: Arc<Dispatcher>,
    t0: Instant,
) -> Result<Model> {
    let config = BertConfig::from_file(file)?;
    let net = if config.modern.is_some() {
        EncoderNet::Modern(Box::new(ModernBertModel::load(file, dispatcher.clone())?))
    } else if config.deberta.is_some() {
        EncoderNet::Deberta(Box::new(DebertaModel::load(file, dispatcher.clone())?))
    } else if config.jina.is_some() {
        EncoderNet::Jina(Box::new(JinaBertModel::load(file, dispatcher.clone())?))
    } else {
        EncoderNet::Bert(Box::new(BertModel::load(file, dispatcher.clone())?))
    };
    let tokenizer = Tokenizer::from_model_file(file)?;
    let settings = match file {
        ModelFile::HuggingFace(h) => sentence_settings(h.dir())?,
        ModelFile::Gguf(g) => SentenceSettings {
            pooling: cyb_models::gguf_pooling(g).unwrap_or(Pooling::Mean),
            normalize: false,
            max_seq_length: None,
        },
    };
    let config = model_config(net.config(), file);
    let template: Option<ChatTemplate> = None;
    let problem_type = match file {
        ModelFile::HuggingFace(h) => h
            .config_json()
            .get("problem_type")
            .and_then(Value::as_str)
            .map(String::from),
        ModelFile::Gguf(_) => None,
    };
    let mut encoder = Encoder::new(net, &tokenizer, settings)?;
    encoder.score_function = crate::embed::ScoreFunction::for_head(
        problem_type.as_deref(),
        encoder.net.config().labels.len(),
    );
    encoder.mask = crate::fill_mask::mask_tokens(file, &tokenizer);
    Ok(Model::from_parts(
        path,
        config,
        Net::Encoder(Box::new(encoder)),
        tokenizer,
        template,
        t0,
        dispatcher,
    ))
}

fn read_json(path: &Path) -> Result<Option<Value>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::Format {
            file: path.to_path_buf(),
            offset: 0,
            reason: format!("not valid JSON: {e}"),
        })
}

/// What sentence-transformers would do with `dir`; without its files: mean pooling, no
/// normalization, the position table's length limit.
pub(crate) fn sentence_settings(dir: &Path) -> Result<SentenceSettings> {
    let modules = read_json(&dir.join("modules.json"))?;
    let module_paths: Vec<(String, String)> = modules
        .as_ref()
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|m| {
                    let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    (s("type"), s("path"))
                })
                .collect()
        })
        .unwrap_or_default();
    let normalize = module_paths.iter().any(|(t, _)| t.ends_with(".Normalize"));
    let pooling_dir = module_paths
        .iter()
        .find(|(t, _)| t.ends_with(".Pooling"))
        .map_or("1_Pooling".to_string(), |(_, p)| p.clone());
    let pooling_cfg = read_json(&dir.join(&pooling_dir).join("config.json"))?;
    let flag = |k: &str| {
        pooling_cfg
            .as_ref()
            .and_then(|c| c.get(k))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    let mode = pooling_cfg
        .as_ref()
        .and_then(|c| c.get("pooling_mode"))
        .and_then(Value::as_str);
    let pooling = match mode {
        Some("cls") => Pooling::Cls,
        Some("max") => Pooling::Max,
        Some("mean") => Pooling::Mean,
        Some(other) => {
            return Err(Error::InvalidConfig {
                field: format!("{pooling_dir}/config.json pooling_mode"),
                reason: format!("{other:?} is not supported; use cls, mean or max"),
            })
        }
        None if flag("pooling_mode_cls_token") => Pooling::Cls,
        None if flag("pooling_mode_max_tokens") => Pooling::Max,
        None => Pooling::Mean,
    };
    let max_seq_length = read_json(&dir.join("sentence_bert_config.json"))?
        .and_then(|c| c.get("max_seq_length").and_then(Value::as_u64))
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n > 0);
    Ok(SentenceSettings {
        pooling,
        normalize,
        max_seq_length,
    })
}

/// The normalized description `Model::config` returns, from the encoder's own config.
fn model_config(c: &BertConfig, file: &ModelFile) -> ModelConfig {
    let (source, architectures) = match file {
        ModelFile::HuggingFace(h) => (
            "huggingface",
            h.config_json()
                .get("architectures")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
        ),
        ModelFile::Gguf(_) => ("gguf", Vec::new()),
    };
    ModelConfig {
        source: source.into(),
        architecture: c.architecture.clone(),
        architectures,
        vocab_size: c.vocab_size,
        hidden_size: c.hidden_size,
        intermediate_size: Some(c.intermediate_size),
        num_layers: c.num_layers,
        num_heads: c.num_heads,
        num_kv_heads: c.num_heads,
        head_dim: c.head_dim,
        rope_dim: None,
        max_position: Some(c.max_position),
        context_length: Some(c.max_tokens()),
        rope_theta: 0.0,
        rope_scaling: None,
        norm_eps: Some(f64::from(c.norm_eps)),
        tie_word_embeddings: false,
        sliding_window: None,
        num_experts: None,
        num_experts_per_token: None,
        bos_token_id: None,
        eos_token_ids: Vec::new(),
        pad_token_id: Some(c.pad_token_id),
        extra: BTreeMap::new(),
    }
}

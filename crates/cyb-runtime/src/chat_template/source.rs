//! Where a model keeps its chat template and the special-token strings the template prints.
//!
//! - GGUF: `tokenizer.chat_template` (plus `tokenizer.chat_template.tool_use`, llama.cpp's
//!   name for a named template); BOS/EOS text from `tokenizer.ggml.tokens` at
//!   `tokenizer.ggml.{bos,eos}_token_id`.
//! - Hugging Face directory: `chat_template.jinja` (what transformers saves today), else
//!   `tokenizer_config.json`'s `chat_template`: a string, or a list of `{name, template}` where
//!   "default" is used and "tool_use" when tools are given; else `chat_template.json`.
//!   BOS/EOS text from tokenizer_config.json's `bos_token`/`eos_token` (a string or an
//!   AddedToken object with `content`).

use super::ChatTemplate;
use cyb_format::{GgufFile, HfModel, ModelFile};
use cyb_tensor::{Error, Result};
use serde_json::Value;
use std::path::Path;

pub(super) fn from_model_file(model: &ModelFile) -> Result<Option<ChatTemplate>> {
    match model {
        ModelFile::Gguf(g) => from_gguf(g),
        ModelFile::HuggingFace(h) => from_hf(h),
    }
}

fn from_gguf(g: &GgufFile) -> Result<Option<ChatTemplate>> {
    let text = |key: &str| -> Result<Option<&str>> {
        match g.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| Error::Format {
                file: g.path().to_path_buf(),
                offset: 0,
                reason: format!("metadata {key} is a {}, expected a string", v.type_name()),
            }),
        }
    };
    let Some(default) = text("tokenizer.chat_template")? else {
        return Ok(None);
    };
    let tool_use = text("tokenizer.chat_template.tool_use")?;
    let token = |id_key: &str| -> Option<&str> {
        let id = usize::try_from(g.get(id_key)?.as_u64()?).ok()?;
        g.get("tokenizer.ggml.tokens")?.as_array()?.str_at(id)
    };
    let bos = token("tokenizer.ggml.bos_token_id");
    let eos = token("tokenizer.ggml.eos_token_id");
    ChatTemplate::with_named(default, tool_use, bos, eos)
        .map(Some)
        .map_err(|e| name_file(e, g.path()))
}

fn from_hf(h: &HfModel) -> Result<Option<ChatTemplate>> {
    let empty = Value::Null;
    let config = h.tokenizer_config.as_ref().unwrap_or(&empty);
    let bos = special_token(config.get("bos_token"));
    let eos = special_token(config.get("eos_token"));

    let jinja_file = h.dir().join("chat_template.jinja");
    if jinja_file.is_file() {
        let text = read_text(&jinja_file)?;
        return ChatTemplate::new(&text, bos, eos)
            .map(Some)
            .map_err(|e| name_file(e, &jinja_file));
    }
    let config_path = h.dir().join("tokenizer_config.json");
    match config.get("chat_template") {
        Some(Value::String(t)) => {
            return ChatTemplate::new(t, bos, eos)
                .map(Some)
                .map_err(|e| name_file(e, &config_path))
        }
        Some(Value::Array(list)) => {
            let named = |name: &str| {
                list.iter().find_map(|entry| {
                    (entry.get("name")?.as_str()? == name)
                        .then(|| entry.get("template")?.as_str())
                        .flatten()
                })
            };
            let Some(default) = named("default") else {
                return Err(Error::InvalidConfig {
                    field: format!("{}: chat_template", config_path.display()),
                    reason: "a list of named templates without one named \"default\"".into(),
                });
            };
            return ChatTemplate::with_named(default, named("tool_use"), bos, eos)
                .map(Some)
                .map_err(|e| name_file(e, &config_path));
        }
        Some(Value::Null) | None => {}
        Some(other) => {
            return Err(Error::InvalidConfig {
                field: format!("{}: chat_template", config_path.display()),
                reason: format!("expected a string or a list of named templates, got {other}"),
            })
        }
    }
    let json_file = h.dir().join("chat_template.json");
    if json_file.is_file() {
        let v: Value =
            serde_json::from_str(&read_text(&json_file)?).map_err(|e| Error::Format {
                file: json_file.clone(),
                offset: 0,
                reason: format!("invalid JSON: {e}"),
            })?;
        if let Some(t) = v.get("chat_template").and_then(Value::as_str) {
            return ChatTemplate::new(t, bos, eos)
                .map(Some)
                .map_err(|e| name_file(e, &json_file));
        }
    }
    Ok(None)
}

/// `"<s>"` or `{"content": "<s>", ...}` (a serialized AddedToken).
fn special_token(v: Option<&Value>) -> Option<&str> {
    match v? {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("content")?.as_str(),
        _ => None,
    }
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Puts the file a broken template came from into the error.
fn name_file(e: Error, path: &Path) -> Error {
    match e {
        Error::InvalidConfig { field, reason } => Error::InvalidConfig {
            field: format!("{}: {field}", path.display()),
            reason,
        },
        other => other,
    }
}

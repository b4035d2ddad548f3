//! The soma model directory (spec: runtime-vision, "soma model standard"): `config.toml` (the
//! model's hyper-parameters, the keys of a Hugging Face config.json written as TOML, with
//! `architecture = "X"` for `architectures = ["X"]`), `tokenizer.json`, `chat.toml` (`template`
//! and special tokens), `sampling.toml` (default sampling) and the weights (safetensors).
//!
//! It opens as the Hugging Face model it describes ([`HfModel`]), so every consumer of those
//! (curated models, tokenizer, chat template, `.model` import) reads it unchanged:
//! - config.toml becomes config.json;
//! - chat.toml becomes tokenizer_config.json: `template` is `chat_template`, the other keys
//!   (`bos_token`, `eos_token`, `pad_token`, ...) keep their names;
//! - sampling.toml becomes generation_config.json: `max_tokens` is `max_new_tokens`, `stop` is
//!   `stop_strings`, the other keys (`temperature`, `top_k`, `top_p`, `min_p`,
//!   `repetition_penalty`, ...) keep their names;
//! - the weights are the files config.toml names in `weights` (a file name or a list), else
//!   every `weights*.safetensors` in the directory, in name order.
//!
//! `vocab.toml` (tokenizer metadata) is not read: tokenizer.json has all of it. Multi-component
//! models (`[components]`) are refused with a clear error.

use crate::cursor::format_error;
use crate::hf::HfModel;
use crate::safetensors::SafetensorsFile;
use cyb_tensor::{Error, Result};
use serde_json::{Map, Value};
use std::path::{Component, Path};

const CONFIG: &str = "config.toml";

/// True when `dir` is a directory with `config.toml` (and no `config.json`, which would make it
/// a Hugging Face directory).
pub fn is_soma_dir(dir: &Path) -> bool {
    dir.is_dir() && dir.join(CONFIG).is_file() && !dir.join("config.json").exists()
}

fn read_toml(path: &Path) -> Result<toml::Table> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    text.parse::<toml::Table>()
        .map_err(|e| format_error(path, 0, format!("invalid TOML: {e}")))
}

fn to_json(t: toml::Table, path: &Path) -> Result<Map<String, Value>> {
    match serde_json::to_value(t) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(format_error(path, 0, "is not a table")),
        Err(e) => Err(format_error(
            path,
            0,
            format!("cannot be read as JSON: {e}"),
        )),
    }
}

/// Opens the soma directory `dir` as a Hugging Face model.
pub fn open(dir: impl AsRef<Path>) -> Result<HfModel> {
    let dir = dir.as_ref();
    let config_path = dir.join(CONFIG);
    let mut config = to_json(read_toml(&config_path)?, &config_path)?;
    if config.contains_key("components") {
        return Err(format_error(
            &config_path,
            0,
            "multi-component soma models ([components]) are not supported yet; \
             only single-weights models are",
        ));
    }
    if let Some(arch) = config.remove("architecture") {
        if !arch.is_string() {
            return Err(format_error(
                &config_path,
                0,
                "\"architecture\" is not a string",
            ));
        }
        config
            .entry("architectures")
            .or_insert_with(|| Value::Array(vec![arch]));
    }
    let names = weight_files(dir, &config_path, config.remove("weights"))?;
    let mut shards = Vec::with_capacity(names.len());
    for name in &names {
        shards.push(SafetensorsFile::open(dir.join(name))?);
    }

    let optional = |name: &str| {
        let p = dir.join(name);
        p.is_file().then_some(p)
    };
    let tokenizer_config = match optional("chat.toml") {
        Some(p) => {
            let mut m = to_json(read_toml(&p)?, &p)?;
            if let Some(t) = m.remove("template") {
                m.insert("chat_template".into(), t);
            }
            Some(Value::Object(m))
        }
        None => None,
    };
    let generation_config = match optional("sampling.toml") {
        Some(p) => {
            let mut m = to_json(read_toml(&p)?, &p)?;
            for (soma, hf) in [("max_tokens", "max_new_tokens"), ("stop", "stop_strings")] {
                if let Some(v) = m.remove(soma) {
                    m.insert(hf.into(), v);
                }
            }
            Some(Value::Object(m))
        }
        None => None,
    };
    HfModel::from_parts(
        dir.to_path_buf(),
        Value::Object(config),
        shards,
        optional("tokenizer.json"),
        tokenizer_config,
        generation_config,
    )
}

/// The weight files, relative to the directory: what `weights` names, or `weights*.safetensors`.
fn weight_files(dir: &Path, config_path: &Path, named: Option<Value>) -> Result<Vec<String>> {
    let names: Vec<String> = match named {
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(a)) => a
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                _ => Err(format_error(
                    config_path,
                    0,
                    "\"weights\" lists something that is not a file name",
                )),
            })
            .collect::<Result<_>>()?,
        Some(_) => {
            return Err(format_error(
                config_path,
                0,
                "\"weights\" is not a file name or a list of them",
            ))
        }
        None => {
            let rd = std::fs::read_dir(dir).map_err(|source| Error::Io {
                path: dir.to_path_buf(),
                source,
            })?;
            let mut v: Vec<String> = rd
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .filter(|n| n.starts_with("weights"))
                .collect();
            v.sort();
            v
        }
    };
    if names.is_empty() {
        return Err(format_error(
            config_path,
            0,
            "no weights: expected weights.safetensors (or \"weights\" naming the files)",
        ));
    }
    for n in &names {
        let plain = Path::new(n)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
        if !plain || n.is_empty() {
            return Err(format_error(
                config_path,
                0,
                format!("weights file {n:?} is not a plain path inside the directory"),
            ));
        }
        if !n.ends_with(".safetensors") {
            return Err(format_error(
                &dir.join(n),
                0,
                "only safetensors weights are supported in a soma directory",
            ));
        }
    }
    Ok(names)
}

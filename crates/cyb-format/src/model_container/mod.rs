//! The `.model` container (docs/model-format.md): a text header of sections, then 64-byte
//! aligned tensor data, content-addressed by the blake3 hash of the header (which lists every
//! tensor's blake3).
//!
//! A container opens as the kind of model it was imported from (`config.source`): a GGUF model
//! as [`ModelFile::Gguf`], a Hugging Face directory as [`ModelFile::HuggingFace`], so every
//! consumer of those (curated models, tokenizer, chat template) works unchanged. Their tensors
//! are zero-copy slices of the container's mapping.

mod graph;
mod header;
mod meta_toml;
mod plan;
mod writer;

pub use graph::{graph_from_bytes, load_graph, open_graph, GraphModel};
pub use header::IndexEntry;
pub use plan::{KeepRule, Target};
pub use writer::{
    write_graph_model, write_graph_to, write_model, write_model_with, write_to, Progress,
    TensorReport, WriteOptions, WriteReport,
};

pub(crate) use header::ALIGN;

use crate::cursor::format_error;
use crate::gguf::{GgufFile, GgufTensorInfo};
use crate::hf::HfModel;
use crate::mapping::{map_file, SharedBytes};
use crate::metadata::MetaValue;
use crate::model_file::ModelFile;
use crate::safetensors::{SafetensorsFile, SafetensorsTensorInfo};
use cyb_tensor::Result;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a `.model` file's header says about it, and the bytes to verify tensors against.
pub struct ContainerInfo {
    pub path: PathBuf,
    pub version: u32,
    /// `"gguf"`, `"huggingface"` or `"graph"`: the kind of model it opens as.
    pub source: String,
    /// blake3 of the header: the file's content address.
    pub root: [u8; 32],
    /// Absolute offset of the data section.
    pub data_start: usize,
    pub tensors: Vec<IndexEntry>,
    /// The `~~~graph` section, when present.
    pub graph: Option<String>,
    /// Every section's (name, offset, length) in the file.
    sections: Vec<(&'static str, usize, usize)>,
    /// The `~~~check` section: each section's blake3 (absent in files written before it).
    check: Option<Vec<(String, [u8; 32])>>,
    bytes: SharedBytes,
}

impl std::fmt::Debug for ContainerInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerInfo")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("source", &self.source)
            .field("root", &self.root_hex())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl ContainerInfo {
    /// The root as 64 lowercase hex digits.
    pub fn root_hex(&self) -> String {
        header::hex(&self.root)
    }

    /// Hashes every header section (against the `check` section) and every tensor (against the
    /// index); the first mismatch is an `Error::Format` naming the section or tensor. A file
    /// without a `check` section (written before it existed) fails: its config and vocab
    /// cannot be checked.
    pub fn verify(&self) -> Result<()> {
        let bytes: &[u8] = (*self.bytes).as_ref();
        let Some(check) = &self.check else {
            return Err(format_error(
                &self.path,
                0,
                "no \"check\" section (written by an older cyb-llm): its config, vocab and \
                 other sections cannot be verified; import the model again",
            ));
        };
        for &(name, at, len) in &self.sections {
            let want = check.iter().find(|(n, _)| n == name).map(|(_, h)| h);
            let got = bytes.get(at..at + len).map(blake3::hash);
            match (want, got) {
                (Some(w), Some(g)) if g.as_bytes() == w => {}
                (None, _) => {
                    return Err(format_error(
                        &self.path,
                        at,
                        format!("section {name:?} is not listed in the \"check\" section"),
                    ))
                }
                _ => {
                    return Err(format_error(
                        &self.path,
                        at,
                        format!(
                            "section {name:?} does not match its blake3 in the \"check\" \
                             section (the file is corrupted)"
                        ),
                    ))
                }
            }
        }
        if let Some((name, _)) = check
            .iter()
            .find(|(n, _)| !self.sections.iter().any(|(s, _, _)| s == n))
        {
            return Err(format_error(
                &self.path,
                0,
                format!("the \"check\" section lists {name:?}, which the file does not have"),
            ));
        }
        for e in &self.tensors {
            let data = e
                .file_offset
                .checked_add(e.byte_len)
                .and_then(|end| bytes.get(e.file_offset..end));
            let ok = data.is_some_and(|d| *blake3::hash(d).as_bytes() == e.blake3);
            if !ok {
                return Err(format_error(
                    &self.path,
                    e.file_offset,
                    format!(
                        "tensor {:?}: data does not match its blake3 {} (the file is corrupted)",
                        e.name,
                        header::hex(&e.blake3)
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A root as 64 lowercase hex digits.
pub fn hex_root(root: &[u8; 32]) -> String {
    header::hex(root)
}

/// True when `bytes` start like a `.model` file.
pub fn has_model_magic(bytes: &[u8]) -> bool {
    bytes.starts_with(header::MAGIC)
}

/// Maps and opens the `.model` file at `path`.
pub fn open(path: impl AsRef<Path>) -> Result<ModelFile> {
    let path = path.as_ref();
    parse(map_file(path)?, path.to_path_buf(), true)
}

/// Opens a `.model` from any shared bytes; `name` is what errors call the file. Unlike
/// [`open`] it writes nothing: a Hugging Face model's vocab is not put in the cache, so its
/// `tokenizer_json` is `None` (for tests and fuzzing of the parser).
pub fn from_bytes(bytes: SharedBytes, name: impl Into<PathBuf>) -> Result<ModelFile> {
    parse(bytes, name.into(), false)
}

fn parse(bytes: SharedBytes, path: PathBuf, write_vocab: bool) -> Result<ModelFile> {
    let (info, config) = parse_header(&bytes, &path)?;
    let owner = bytes.clone();
    let buf: &[u8] = (*owner).as_ref();
    let sections = header::split(buf, &path)?;
    let cfg_at = sections.get("config").map_or(0, |(a, _)| a);
    match info.source.as_str() {
        "gguf" => open_gguf(&sections, &config, info, bytes, path),
        "huggingface" => open_hf(&sections, &config, info, bytes, path, write_vocab),
        "graph" => Err(format_error(
            &path,
            cfg_at,
            "this .model holds a graph (config source \"graph\"): run it with `cyb-llm infer`, \
             or open it with model_container::open_graph",
        )),
        other => Err(format_error(
            &path,
            cfg_at,
            format!(
                "section \"config\": source {other:?} is not \"gguf\", \"huggingface\" or \
                 \"graph\""
            ),
        )),
    }
}

/// Checks the header and the tensor index; returns them with the parsed config.
fn parse_header(bytes: &SharedBytes, path: &Path) -> Result<(Arc<ContainerInfo>, toml::Table)> {
    let path = path.to_path_buf();
    let buf: &[u8] = (**bytes).as_ref();
    let sections = header::split(buf, &path)?;
    let (cfg_at, cfg_body) = sections.get("config").unwrap_or_default();
    let config = parse_toml(cfg_body, cfg_at, "config", &path)?;
    let source = config
        .get("source")
        .and_then(toml::Value::as_str)
        .unwrap_or_default()
        .to_string();
    let (idx_at, idx_body) = sections.get("tensors").unwrap_or_default();
    let tensors = header::parse_index(idx_body, idx_at, sections.data_start, buf, &path)?;
    let graph = match sections.get("graph") {
        Some((at, b)) => Some(text(b, at, "graph", &path)?.to_string()),
        None => None,
    };
    let check = match sections.get("check") {
        Some((at, b)) => Some(header::parse_check(b, at, &path)?),
        None => None,
    };
    let listed = header::SECTIONS
        .iter()
        .filter(|n| **n != "check")
        .filter_map(|&n| sections.get(n).map(|(at, b)| (n, at, b.len())))
        .collect();
    let info = Arc::new(ContainerInfo {
        path: path.clone(),
        version: header::VERSION,
        source: source.clone(),
        root: *blake3::hash(buf.get(..sections.header_len).unwrap_or_default()).as_bytes(),
        data_start: sections.data_start,
        tensors,
        graph,
        sections: listed,
        check,
        bytes: bytes.clone(),
    });
    Ok((info, config))
}

fn text<'a>(body: &'a [u8], at: usize, section: &str, path: &Path) -> Result<&'a str> {
    std::str::from_utf8(body)
        .map_err(|e| format_error(path, at, format!("section {section:?} is not UTF-8: {e}")))
}

fn parse_toml(body: &[u8], at: usize, section: &str, path: &Path) -> Result<toml::Table> {
    text(body, at, section, path)?
        .parse::<toml::Table>()
        .map_err(|e| format_error(path, at, format!("section {section:?}: invalid TOML: {e}")))
}

fn open_gguf(
    sections: &header::Sections<'_>,
    config: &toml::Table,
    info: Arc<ContainerInfo>,
    bytes: SharedBytes,
    path: PathBuf,
) -> Result<ModelFile> {
    let version = match config.get("gguf_version").and_then(toml::Value::as_integer) {
        Some(v @ (2 | 3)) => v as u32,
        other => {
            let at = sections.get("config").map_or(0, |(a, _)| a);
            return Err(format_error(
                &path,
                at,
                format!("section \"config\": gguf_version {other:?} is not 2 or 3"),
            ));
        }
    };
    let mut metadata: Vec<(String, MetaValue)> = Vec::new();
    for name in ["config", "vocab", "sampling"] {
        let Some((at, body)) = sections.get(name) else {
            continue;
        };
        let doc = if name == "config" {
            config.clone()
        } else {
            parse_toml(body, at, name, &path)?
        };
        meta_toml::from_toml(&doc, &mut metadata)
            .map_err(|r| format_error(&path, at, format!("section {name:?}: {r}")))?;
    }
    if let Some((at, body)) = sections.get("chat") {
        let t = text(body, at, "chat", &path)?;
        metadata.push((
            "tokenizer.chat_template".into(),
            MetaValue::String(t.into()),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some((k, _)) = metadata.iter().find(|(k, _)| !seen.insert(k.as_str())) {
        return Err(format_error(
            &path,
            0,
            format!("metadata key {k:?} appears twice"),
        ));
    }
    let mut tensors = Vec::with_capacity(info.tensors.len());
    for e in &info.tensors {
        let ggml_type = header::type_info(&e.type_name)
            .and_then(|t| t.ggml)
            .ok_or_else(|| {
                format_error(
                    &path,
                    e.file_offset,
                    format!("tensor {:?}: {} is not a GGUF type", e.name, e.type_name),
                )
            })?;
        tensors.push(GgufTensorInfo {
            name: e.name.clone(),
            ggml_type,
            dtype: ggml_type.dtype(),
            shape: e.shape.clone(),
            data_offset: (e.file_offset - info.data_start) as u64,
            file_offset: e.file_offset,
            byte_len: e.byte_len,
        });
    }
    Ok(ModelFile::Gguf(GgufFile::from_container(
        path, bytes, version, metadata, tensors, info,
    )))
}

/// The tokenizer and generation files of a Hugging Face model read from a container.
pub(crate) struct HfFiles {
    pub(crate) tokenizer_json: Option<PathBuf>,
    pub(crate) tokenizer_config: Option<Value>,
    pub(crate) generation_config: Option<Value>,
    pub(crate) image_processor: Option<Value>,
}

fn json(s: &str, at: usize, what: &str, path: &Path) -> Result<Value> {
    serde_json::from_str(s)
        .map_err(|e| format_error(path, at, format!("{what} is not valid JSON: {e}")))
}

fn open_hf(
    sections: &header::Sections<'_>,
    config: &toml::Table,
    info: Arc<ContainerInfo>,
    bytes: SharedBytes,
    path: PathBuf,
    write_vocab: bool,
) -> Result<ModelFile> {
    let cfg_at = sections.get("config").map_or(0, |(a, _)| a);
    let field = |k: &str| config.get(k).and_then(toml::Value::as_str);
    let config_json = field("config_json").ok_or_else(|| {
        format_error(
            &path,
            cfg_at,
            "section \"config\": no string \"config_json\"",
        )
    })?;
    let config_json = json(config_json, cfg_at, "config_json", &path)?;
    if !config_json.is_object() {
        return Err(format_error(
            &path,
            cfg_at,
            "config_json is not a JSON object",
        ));
    }
    let mut tokenizer_config = match field("tokenizer_config_json") {
        Some(t) => Some(json(t, cfg_at, "tokenizer_config_json", &path)?),
        None => None,
    };
    if let Some((at, body)) = sections.get("chat") {
        let t = text(body, at, "chat", &path)?;
        let tc = tokenizer_config.get_or_insert_with(|| Value::Object(Default::default()));
        if let Some(o) = tc.as_object_mut() {
            o.insert("chat_template".into(), Value::String(t.into()));
        }
    }
    let image_processor = match field("image_processor_json") {
        Some(t) => Some(json(t, cfg_at, "image_processor_json", &path)?),
        None => None,
    };
    let generation_config = match sections.get("sampling") {
        Some((at, b)) => Some(json(
            text(b, at, "sampling", &path)?,
            at,
            "sampling",
            &path,
        )?),
        None => None,
    };
    let tokenizer_json = match sections.get("vocab") {
        Some((at, b)) if write_vocab => Some(materialize_vocab(b, at, &info, &path)?),
        Some((at, b)) => text(b, at, "vocab", &path).map(|_| None)?,
        None => None,
    };
    let mut tensors = Vec::with_capacity(info.tensors.len());
    for e in &info.tensors {
        let dtype = header::type_info(&e.type_name)
            .and_then(|t| t.dtype)
            .ok_or_else(|| {
                format_error(
                    &path,
                    e.file_offset,
                    format!(
                        "tensor {:?}: {} cannot be computed with",
                        e.name, e.type_name
                    ),
                )
            })?;
        tensors.push(SafetensorsTensorInfo {
            name: e.name.clone(),
            dtype,
            shape: e.shape.clone(),
            file_offset: e.file_offset,
            byte_len: e.byte_len,
        });
    }
    let shard = SafetensorsFile::from_parts(path.clone(), bytes, tensors);
    let files = HfFiles {
        tokenizer_json,
        tokenizer_config,
        generation_config,
        image_processor,
    };
    Ok(ModelFile::HuggingFace(HfModel::from_container(
        path,
        config_json,
        shard,
        files,
        info,
    )))
}

/// The Hugging Face tokenizer loader reads `tokenizer.json` from a path, so the vocab section is
/// written once to the cache under the container's root (content-addressed: the same root always
/// means the same text).
fn materialize_vocab(body: &[u8], at: usize, info: &ContainerInfo, path: &Path) -> Result<PathBuf> {
    text(body, at, "vocab", path)?;
    crate::hf::cache_tokenizer_json(&info.root_hex(), body, path)
}

#[cfg(test)]
mod tests;

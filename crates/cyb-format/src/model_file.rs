//! One entry point for every format: [`open`] looks at the path and returns a [`ModelFile`]
//! with the same questions answered for each (metadata, tensor list, tensors, config).

use crate::config::ModelConfig;
use crate::gguf::{self, GgufFile};
use crate::hf::{self, HfModel};
use crate::metadata::MetaValue;
use cyb_tensor::{DType, Error, Result, Shape, Tensor};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};

/// A model file or directory, opened.
// One per loaded model, so the size gap between the variants costs nothing worth a box (which
// every `match` across the workspace would then have to see through).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum ModelFile {
    Gguf(GgufFile),
    HuggingFace(HfModel),
}

/// Where one tensor lives and what it is.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorEntry {
    pub name: String,
    /// The type as the file names it (`"Q4_K"`, `"IQ4_XS"`, `"F32"`).
    pub type_name: String,
    /// `None` for a type this build cannot compute with: listed, but `tensor()` refuses it.
    pub dtype: Option<DType>,
    pub shape: Shape,
    pub byte_len: usize,
    /// Absolute byte offset in `file`.
    pub offset: u64,
    pub file: PathBuf,
    /// True when bytes `offset..offset + byte_len` of `file` are the tensor. False for one
    /// computed when read (a CTranslate2 int8 weight dequantized to F32): `offset` is then where
    /// its source values start; read it with [`ModelFile::tensor`].
    pub in_place: bool,
}

/// Opens a `.model` or GGUF file (recognized by their magic), a Hugging Face model directory (a
/// directory with `config.json`; a `config.json` or `*.safetensors` path inside one opens the
/// directory), a CTranslate2 Whisper directory (`model.bin` without safetensors, opened as the
/// Hugging Face model it was converted from, see [`crate::ctranslate2`]; its `model.bin` path
/// opens the directory too), a whisper.cpp ggml file (likewise, see [`crate::whisper_ggml`]) or a
/// soma directory (with `config.toml`, see [`crate::soma`]).
pub fn open(path: impl AsRef<Path>) -> Result<ModelFile> {
    let path = path.as_ref();
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_dir() {
        if hf::is_hf_dir(path) {
            return HfModel::open(path).map(ModelFile::HuggingFace);
        }
        if crate::soma::is_soma_dir(path) {
            return crate::soma::open(path).map(ModelFile::HuggingFace);
        }
        return Err(unrecognized(
            path,
            "a directory without config.json, config.toml or model.bin (expected a Hugging Face, \
             CTranslate2 or soma model directory)",
        ));
    }
    let mut magic = [0u8; 10];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut magic))
        .map_err(io)?;
    if crate::model_container::has_model_magic(magic.get(..n).unwrap_or_default()) {
        return crate::model_container::open(path);
    }
    if gguf::has_gguf_magic(magic.get(..n).unwrap_or_default()) {
        return GgufFile::open(path).map(ModelFile::Gguf);
    }
    if crate::whisper_ggml::has_ggml_magic(magic.get(..n).unwrap_or_default()) {
        return crate::whisper_ggml::open(path).map(ModelFile::HuggingFace);
    }
    let is_hf_member = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        n == "config.json"
            || n == crate::ctranslate2::MODEL_BIN
            || n.ends_with(".safetensors")
            || n.ends_with(".safetensors.index.json")
    });
    if let Some(dir) = path.parent().filter(|d| is_hf_member && hf::is_hf_dir(d)) {
        return HfModel::open(dir).map(ModelFile::HuggingFace);
    }
    Err(unrecognized(
        path,
        &format!(
            "a file starting with {:02x?}, not a .model file, a GGUF file (magic \"GGUF\"), a \
             whisper.cpp ggml file (magic \"lmgg\"), nor part of a Hugging Face model \
             directory (config.json + safetensors) or a CTranslate2 one (model.bin)",
            magic.get(..4.min(n)).unwrap_or_default()
        ),
    ))
}

fn unrecognized(path: &Path, what: &str) -> Error {
    Error::Format {
        file: path.to_path_buf(),
        offset: 0,
        reason: format!("unrecognized model format: {what}"),
    }
}

impl ModelFile {
    /// The `.model` container it was read from, if any (the model then presents itself as the
    /// GGUF model or Hugging Face directory it was imported from).
    pub fn container(&self) -> Option<&crate::model_container::ContainerInfo> {
        match self {
            ModelFile::Gguf(g) => g.container(),
            ModelFile::HuggingFace(h) => h.container(),
        }
    }

    /// Checks every tensor of a `.model` file against its blake3 (an error names the first
    /// corrupted tensor); other formats carry no hashes and pass.
    pub fn verify(&self) -> Result<()> {
        self.container().map_or(Ok(()), |c| c.verify())
    }

    /// `"model"` for a `.model` container, else `"gguf"`, `"huggingface"`, `"ctranslate2"` or
    /// `"ggml"` (a CTranslate2 directory or whisper.cpp file, presented as a Hugging Face one).
    pub fn format_name(&self) -> &'static str {
        if self.container().is_some() {
            return "model";
        }
        match self {
            ModelFile::Gguf(_) => "gguf",
            ModelFile::HuggingFace(h) if h.ctranslate2().is_some() => "ctranslate2",
            ModelFile::HuggingFace(h) if h.whisper_ggml().is_some() => "ggml",
            ModelFile::HuggingFace(_) => "huggingface",
        }
    }

    /// `"v3"` for GGUF; `"safetensors, N shard(s)"` for a Hugging Face directory;
    /// `"model.bin v6, WhisperSpec revision 3"` for a CTranslate2 one.
    pub fn format_version(&self) -> String {
        if let Some(c) = self.container() {
            return format!("v{}, from {}", c.version, c.source);
        }
        match self {
            ModelFile::Gguf(g) => format!("v{}", g.version()),
            ModelFile::HuggingFace(h) => match h.ctranslate2() {
                Some(c) => format!(
                    "model.bin v{}, {} revision {}",
                    c.binary_version(),
                    c.spec(),
                    c.spec_revision()
                ),
                None => match h.whisper_ggml() {
                    Some(g) => format!("whisper.cpp ggml, {}", g.ftype_name()),
                    None => format!("safetensors, {} shard(s)", h.shards().len()),
                },
            },
        }
    }

    /// The file or directory it was opened from.
    pub fn path(&self) -> &Path {
        match self {
            ModelFile::Gguf(g) => g.path(),
            ModelFile::HuggingFace(h) => h.dir(),
        }
    }

    /// Metadata in file order as JSON values: GGUF key/values; for a Hugging Face directory the
    /// config.json fields, then `safetensors.<key>` header strings; for a CTranslate2 directory
    /// the config.json it stands for, then `ctranslate2.<key>`: the binary version, spec and
    /// revision, and every setting (rank-0 variable) under its name.
    pub fn metadata(&self) -> Vec<(String, Value)> {
        match self {
            ModelFile::Gguf(g) => g
                .metadata()
                .iter()
                .map(|(k, v)| (k.clone(), v.to_json()))
                .collect(),
            ModelFile::HuggingFace(h) => {
                let mut m: Vec<(String, Value)> = h
                    .config_json()
                    .as_object()
                    .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                    .unwrap_or_default();
                m.extend(
                    h.safetensors_metadata()
                        .into_iter()
                        .map(|(k, v)| (format!("safetensors.{k}"), Value::String(v))),
                );
                if let Some(g) = h.whisper_ggml() {
                    m.extend(g.metadata());
                }
                if let Some(c) = h.ctranslate2() {
                    m.push((
                        "ctranslate2.binary_version".into(),
                        c.binary_version().into(),
                    ));
                    m.push(("ctranslate2.spec".into(), c.spec().into()));
                    m.push(("ctranslate2.spec_revision".into(), c.spec_revision().into()));
                    m.extend(
                        c.variables()
                            .iter()
                            .filter(|v| v.is_scalar())
                            .filter_map(|v| {
                                Some((format!("ctranslate2.{}", v.name), c.scalar(&v.name)?))
                            }),
                    );
                }
                m
            }
        }
    }

    /// One metadata value as JSON (as [`metadata`](ModelFile::metadata) lists it), converting
    /// nothing else: a GGUF file's vocabulary arrays stay as they are.
    pub fn metadata_value(&self, key: &str) -> Option<Value> {
        match self {
            ModelFile::Gguf(g) => g.get(key).map(MetaValue::to_json),
            ModelFile::HuggingFace(_) => self
                .metadata()
                .into_iter()
                .find_map(|(k, v)| (k == key).then_some(v)),
        }
    }

    /// Metadata in file order with each value's one-line form for people (see
    /// [`summarize_json`](crate::summarize_json)); a GGUF file's long arrays are summarized
    /// without converting them.
    pub fn metadata_summaries(&self) -> Vec<(String, String)> {
        match self {
            ModelFile::Gguf(g) => g
                .metadata()
                .iter()
                .map(|(k, v)| (k.clone(), v.summary()))
                .collect(),
            ModelFile::HuggingFace(_) => self
                .metadata()
                .into_iter()
                .map(|(k, v)| (k, crate::summarize_json(&v)))
                .collect(),
        }
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> Vec<TensorEntry> {
        match self {
            ModelFile::Gguf(g) => g
                .tensor_infos()
                .iter()
                .map(|t| TensorEntry {
                    name: t.name.clone(),
                    type_name: t.ggml_type.name.to_string(),
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    byte_len: t.byte_len,
                    offset: t.file_offset as u64,
                    file: g.path().to_path_buf(),
                    in_place: true,
                })
                .collect(),
            ModelFile::HuggingFace(h) => h
                .tensor_infos()
                .map(|(t, file)| TensorEntry {
                    name: t.name.clone(),
                    type_name: t.dtype.name().to_string(),
                    dtype: Some(t.dtype),
                    shape: t.shape.clone(),
                    byte_len: t.byte_len,
                    offset: t.file_offset as u64,
                    file: file.to_path_buf(),
                    in_place: h.tensor_in_place(&t.name),
                })
                .collect(),
        }
    }

    /// The tensor `name`, zero-copy from the mapping (`Error::MissingTensor` if absent).
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        match self {
            ModelFile::Gguf(g) => g.tensor(name),
            ModelFile::HuggingFace(h) => h.tensor(name),
        }
    }

    /// The normalized hyper-parameters.
    pub fn config(&self) -> Result<ModelConfig> {
        let config = match self {
            ModelFile::Gguf(g) => ModelConfig::from_gguf(g)?,
            ModelFile::HuggingFace(h) => ModelConfig::from_hf(
                h.config_json(),
                h.generation_config.as_ref(),
                h.has_tensor("lm_head.weight"),
            )?,
        };
        match self {
            ModelFile::Gguf(g) => {
                config.check_layers(g.tensor_infos().iter().map(|t| t.name.as_str()))?
            }
            ModelFile::HuggingFace(h) => {
                config.check_layers(h.tensor_infos().map(|(t, _)| t.name.as_str()))?
            }
        }
        Ok(config)
    }
}

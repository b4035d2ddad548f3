//! A Hugging Face model directory: `config.json`, weights in `model.safetensors` or in shards
//! listed by `model.safetensors.index.json` (`weight_map`: tensor name → shard file), and the
//! tokenizer / generation files beside them.
//!
//! Every shard is mapped once; tensors borrow the shard mapping in place.
//!
//! A CTranslate2 Whisper directory (`model.bin`, see [`crate::ctranslate2`]) opens as the
//! Hugging Face Whisper model it was converted from: the same type, its tensors read from
//! `model.bin` under transformers' names.

use crate::cursor::format_error;
use crate::safetensors::{SafetensorsFile, SafetensorsTensorInfo};
use cyb_tensor::{Error, Result, Tensor};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};

const CONFIG: &str = "config.json";
const SINGLE: &str = "model.safetensors";
const INDEX: &str = "model.safetensors.index.json";

/// The loaded directory.
#[derive(Debug)]
pub struct HfModel {
    dir: PathBuf,
    config: Value,
    shards: Vec<SafetensorsFile>,
    /// Tensor name → (shard, index in that shard's infos), in shard then data order.
    order: Vec<(String, usize, usize)>,
    by_name: HashMap<String, usize>,
    pub tokenizer_json: Option<PathBuf>,
    pub tokenizer_config_json: Option<PathBuf>,
    pub generation_config_json: Option<PathBuf>,
    /// Parsed `tokenizer_config.json` (chat template, special tokens), when present.
    pub tokenizer_config: Option<Value>,
    /// Parsed `generation_config.json` (default sampling, eos ids), when present.
    pub generation_config: Option<Value>,
    /// Set when the directory was read out of a `.model` container.
    container: Option<std::sync::Arc<crate::model_container::ContainerInfo>>,
    /// The image processor a `.model` container carries (see [`HfModel::image_processor`]).
    stored_image_processor: Option<Value>,
    /// Set for a CTranslate2 directory or a whisper.cpp file: the weights come from its
    /// `model.bin` or ggml file, not `shards`.
    converted: Option<Box<Converted>>,
}

/// Weights read from a file that is not safetensors, under transformers' names.
#[derive(Debug)]
pub(crate) enum Converted {
    Ct2(crate::ctranslate2::WhisperWeights),
    Ggml(crate::whisper_ggml::GgmlWhisperWeights),
}

impl Converted {
    fn infos(&self) -> &[SafetensorsTensorInfo] {
        match self {
            Converted::Ct2(w) => w.infos(),
            Converted::Ggml(w) => w.infos(),
        }
    }

    fn path(&self) -> &Path {
        match self {
            Converted::Ct2(w) => w.file().path(),
            Converted::Ggml(w) => w.file().path(),
        }
    }

    fn has_tensor(&self, name: &str) -> bool {
        match self {
            Converted::Ct2(w) => w.has_tensor(name),
            Converted::Ggml(w) => w.has_tensor(name),
        }
    }

    fn in_place(&self, name: &str) -> bool {
        match self {
            Converted::Ct2(w) => w.in_place(name),
            Converted::Ggml(w) => w.has_tensor(name),
        }
    }

    fn tensor(&self, name: &str, dir: &Path) -> Result<Tensor> {
        match self {
            Converted::Ct2(w) => w.tensor(name, dir),
            Converted::Ggml(w) => w.tensor(name),
        }
    }
}

/// Writes `body` as `tokenizer.json` under the cache of generated tokenizers
/// (`$XDG_CACHE_HOME/cyb-llm/model-vocab/<key>/`, `key` naming the content), unless it is
/// there already, and returns its path: the tokenizer loader reads `tokenizer.json` from a
/// path. `source` is the model file the text came from (for errors).
pub(crate) fn cache_tokenizer_json(key: &str, body: &[u8], source: &Path) -> Result<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    let dir = cache.join("cyb-llm").join("model-vocab").join(key);
    let file = dir.join("tokenizer.json");
    if std::fs::read(&file).is_ok_and(|b| b == body) {
        return Ok(file);
    }
    let io = |e: std::io::Error| Error::Io {
        path: file.clone(),
        source: std::io::Error::new(
            e.kind(),
            format!("writing the tokenizer of {}: {e}", source.display()),
        ),
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    // Written beside and renamed, so a concurrent reader never sees half a file.
    let tmp = dir.join(format!("tokenizer.json.{}.tmp", std::process::id()));
    std::fs::write(&tmp, body).map_err(io)?;
    std::fs::rename(&tmp, &file).map_err(io)?;
    Ok(file)
}

/// Reads and parses a JSON file, naming the file on failure.
pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| {
        format_error(
            path,
            0,
            format!(
                "invalid JSON at line {} column {}: {e}",
                e.line(),
                e.column()
            ),
        )
    })
}

/// True when `dir` is a directory holding `config.json`, or a CTranslate2 directory (which
/// [`HfModel::open`] reads as the Hugging Face model it was converted from).
pub fn is_hf_dir(dir: &Path) -> bool {
    dir.is_dir() && (dir.join(CONFIG).is_file() || crate::ctranslate2::is_ct2_dir(dir))
}

fn optional(dir: &Path, name: &str) -> Option<PathBuf> {
    let p = dir.join(name);
    p.is_file().then_some(p)
}

impl HfModel {
    /// Opens the model directory `dir` (a CTranslate2 one through [`crate::ctranslate2::open`]).
    pub fn open(dir: impl AsRef<Path>) -> Result<HfModel> {
        let dir = dir.as_ref().to_path_buf();
        if crate::ctranslate2::is_ct2_dir(&dir) {
            return crate::ctranslate2::open(&dir);
        }
        let config_path = dir.join(CONFIG);
        let config = read_json(&config_path)?;
        if !config.is_object() {
            return Err(format_error(
                &config_path,
                0,
                "config.json is not a JSON object",
            ));
        }
        let (shard_names, weight_map) = shard_files(&dir)?;
        let mut shards = Vec::with_capacity(shard_names.len());
        for name in &shard_names {
            shards.push(SafetensorsFile::open(dir.join(name))?);
        }
        let (order, by_name) = index_shards(&shards)?;
        check_weight_map(&dir.join(INDEX), &weight_map, &shards, &by_name, &order)?;
        let tokenizer_config_json = optional(&dir, "tokenizer_config.json");
        let generation_config_json = optional(&dir, "generation_config.json");
        let tokenizer_config = tokenizer_config_json
            .as_deref()
            .map(read_json)
            .transpose()?;
        let generation_config = generation_config_json
            .as_deref()
            .map(read_json)
            .transpose()?;
        Ok(HfModel {
            tokenizer_json: optional(&dir, "tokenizer.json"),
            tokenizer_config_json,
            generation_config_json,
            tokenizer_config,
            generation_config,
            dir,
            config,
            shards,
            order,
            by_name,
            container: None,
            converted: None,
            stored_image_processor: None,
        })
    }

    /// A model described by files other than a Hugging Face directory's (a soma directory):
    /// `config` stands for config.json, `shards` are its weights in order.
    pub(crate) fn from_parts(
        dir: PathBuf,
        config: Value,
        shards: Vec<SafetensorsFile>,
        tokenizer_json: Option<PathBuf>,
        tokenizer_config: Option<Value>,
        generation_config: Option<Value>,
    ) -> Result<HfModel> {
        let (order, by_name) = index_shards(&shards)?;
        Ok(HfModel {
            dir,
            config,
            shards,
            order,
            by_name,
            tokenizer_json,
            tokenizer_config_json: None,
            generation_config_json: None,
            tokenizer_config,
            generation_config,
            container: None,
            converted: None,
            stored_image_processor: None,
        })
    }

    /// One part of a composite checkpoint (a vision-language model's text decoder or vision
    /// tower) as a model of its own: `config` stands for its config.json, and its tensors are
    /// those `rename` keeps, under the names it gives. The tokenizer and generation files are
    /// the directory's.
    pub fn part(&self, config: Value, rename: &dyn Fn(&str) -> Option<String>) -> Result<HfModel> {
        if self.converted.is_some() {
            return Err(Error::invalid(
                "load",
                format!(
                    "{}: a converted Whisper file has no parts to load apart",
                    self.dir.display()
                ),
            ));
        }
        let shards: Vec<SafetensorsFile> = self.shards.iter().map(|s| s.renamed(rename)).collect();
        let (order, by_name) = index_shards(&shards)?;
        Ok(HfModel {
            dir: self.dir.clone(),
            config,
            shards,
            order,
            by_name,
            tokenizer_json: self.tokenizer_json.clone(),
            tokenizer_config_json: self.tokenizer_config_json.clone(),
            generation_config_json: self.generation_config_json.clone(),
            tokenizer_config: self.tokenizer_config.clone(),
            generation_config: self.generation_config.clone(),
            container: self.container.clone(),
            converted: None,
            stored_image_processor: self.stored_image_processor.clone(),
        })
    }

    /// A CTranslate2 Whisper directory or a whisper.cpp file: `config` stands for
    /// config.json, `weights` are the file's under transformers' names.
    pub(crate) fn from_converted(
        dir: PathBuf,
        config: Value,
        weights: Converted,
        tokenizer_json: Option<PathBuf>,
        tokenizer_config: Option<Value>,
        generation_config: Option<Value>,
    ) -> HfModel {
        HfModel {
            dir,
            config,
            shards: Vec::new(),
            order: Vec::new(),
            by_name: HashMap::new(),
            tokenizer_json,
            tokenizer_config_json: None,
            generation_config_json: None,
            tokenizer_config,
            generation_config,
            container: None,
            converted: Some(Box::new(weights)),
            stored_image_processor: None,
        }
    }

    /// A Hugging Face model whose files come from a `.model` container: one shard over the
    /// container's bytes; `path` stands in for the directory.
    pub(crate) fn from_container(
        path: PathBuf,
        config: Value,
        shard: SafetensorsFile,
        files: crate::model_container::HfFiles,
        container: std::sync::Arc<crate::model_container::ContainerInfo>,
    ) -> HfModel {
        let order: Vec<(String, usize, usize)> = shard
            .tensor_infos()
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), 0, i))
            .collect();
        let by_name = order
            .iter()
            .enumerate()
            .map(|(k, (n, _, _))| (n.clone(), k))
            .collect();
        HfModel {
            dir: path,
            config,
            shards: vec![shard],
            order,
            by_name,
            tokenizer_json: files.tokenizer_json,
            tokenizer_config_json: None,
            generation_config_json: None,
            tokenizer_config: files.tokenizer_config,
            generation_config: files.generation_config,
            container: Some(container),
            converted: None,
            stored_image_processor: files.image_processor,
        }
    }

    /// The `.model` container this model was read from, if any.
    pub fn container(&self) -> Option<&crate::model_container::ContainerInfo> {
        self.container.as_deref()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The image processor's settings: the `image_processor` of a saved processor
    /// (`processor_config.json`), else `preprocessor_config.json` when it describes an image
    /// processor (it names an `image_processor_type` or has an `image_mean`; an audio feature
    /// extractor does not), with the name of the file it came from; a `.model` container
    /// carries the one its directory had.
    pub fn image_processor(&self) -> Option<(Value, &'static str)> {
        if self.container.is_some() {
            return self
                .stored_image_processor
                .clone()
                .map(|v| (v, "the container's image processor"));
        }
        let read = |name: &str| {
            std::fs::read_to_string(self.dir.join(name))
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        };
        if let Some(v) =
            read("processor_config.json").and_then(|v| v.get("image_processor").cloned())
        {
            return Some((v, "processor_config.json"));
        }
        read("preprocessor_config.json")
            .filter(|v| v.get("image_processor_type").is_some() || v.get("image_mean").is_some())
            .map(|v| (v, "preprocessor_config.json"))
    }

    /// The parsed `config.json` (a JSON object).
    pub fn config_json(&self) -> &Value {
        &self.config
    }

    /// The safetensors files, each mapped once (none for a CTranslate2 directory).
    pub fn shards(&self) -> &[SafetensorsFile] {
        &self.shards
    }

    /// The parsed `model.bin` of a CTranslate2 directory.
    pub fn ctranslate2(&self) -> Option<&crate::ctranslate2::Ct2File> {
        match self.converted.as_deref() {
            Some(Converted::Ct2(w)) => Some(w.file()),
            _ => None,
        }
    }

    /// The parsed whisper.cpp ggml file this model was opened from.
    pub fn whisper_ggml(&self) -> Option<&crate::whisper_ggml::GgmlWhisperFile> {
        match self.converted.as_deref() {
            Some(Converted::Ggml(w)) => Some(w.file()),
            _ => None,
        }
    }

    /// Every tensor with the file it lives in: shard by shard in data order, or a CTranslate2
    /// directory's tensors (`file_offset` is where the tensor's values start in `model.bin`).
    pub fn tensor_infos(&self) -> impl Iterator<Item = (&SafetensorsTensorInfo, &Path)> + '_ {
        let shards = self.order.iter().filter_map(|(_, s, i)| {
            let shard = self.shards.get(*s)?;
            Some((shard.tensor_infos().get(*i)?, shard.path()))
        });
        let converted = self
            .converted
            .iter()
            .flat_map(|w| w.infos().iter().map(move |t| (t, w.path())));
        shards.chain(converted)
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
            || self.converted.as_ref().is_some_and(|w| w.has_tensor(name))
    }

    /// True when the tensor's listed bytes (`file_offset`, `byte_len`) are the tensor itself;
    /// false for one computed when read (a CTranslate2 int8 weight dequantized to F32).
    pub fn tensor_in_place(&self, name: &str) -> bool {
        match &self.converted {
            Some(w) => w.in_place(name),
            None => self.by_name.contains_key(name),
        }
    }

    /// The tensor `name`, zero-copy from its shard (or read from a CTranslate2 `model.bin`).
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        if let Some(w) = &self.converted {
            return w.tensor(name, &self.dir);
        }
        let shard = self
            .by_name
            .get(name)
            .and_then(|&k| self.order.get(k))
            .and_then(|(_, s, _)| self.shards.get(*s));
        match shard {
            Some(shard) => shard.tensor(name),
            None => Err(Error::MissingTensor {
                name: name.to_string(),
                required_by: self.dir.display().to_string(),
            }),
        }
    }

    /// The `__metadata__` strings of every shard (they normally agree; the first one wins).
    pub fn safetensors_metadata(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        for s in self.shards.iter().rev() {
            m.extend(s.metadata().iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        m
    }
}

/// Tensor name → (shard, index in that shard's infos) in shard then data order, and name →
/// position in that order; a name in two shards is an error.
#[allow(clippy::type_complexity)]
fn index_shards(
    shards: &[SafetensorsFile],
) -> Result<(Vec<(String, usize, usize)>, HashMap<String, usize>)> {
    let mut order = Vec::new();
    let mut by_name = HashMap::new();
    for (s, shard) in shards.iter().enumerate() {
        for (i, t) in shard.tensor_infos().iter().enumerate() {
            if by_name.insert(t.name.clone(), order.len()).is_some() {
                return Err(format_error(
                    shard.path(),
                    8,
                    format!("tensor {:?} appears in more than one shard", t.name),
                ));
            }
            order.push((t.name.clone(), s, i));
        }
    }
    Ok((order, by_name))
}

/// `(tensor name, shard file name)` pairs from the index.
type WeightMap = Vec<(String, String)>;

/// The shard file names (sorted, each once) and the index's `weight_map` (tensor, file), or
/// the single `model.safetensors` and no map.
fn shard_files(dir: &Path) -> Result<(Vec<String>, WeightMap)> {
    let index = dir.join(INDEX);
    if index.is_file() {
        let v = read_json(&index)?;
        let Some(map) = v.get("weight_map").and_then(Value::as_object) else {
            return Err(format_error(&index, 0, "no \"weight_map\" object"));
        };
        let mut weight_map = Vec::with_capacity(map.len());
        for (tensor, file) in map {
            let Some(file) = file.as_str() else {
                return Err(format_error(
                    &index,
                    0,
                    format!("weight_map[{tensor:?}] is not a string"),
                ));
            };
            if !is_plain_file_name(file) {
                return Err(format_error(
                    &index,
                    0,
                    format!(
                        "weight_map[{tensor:?}] = {file:?} is not a file name inside the model directory"
                    ),
                ));
            }
            weight_map.push((tensor.clone(), file.to_string()));
        }
        let mut names: Vec<String> = weight_map.iter().map(|(_, f)| f.clone()).collect();
        names.sort();
        names.dedup();
        return Ok((names, weight_map));
    }
    if dir.join(SINGLE).is_file() {
        return Ok((vec![SINGLE.to_string()], Vec::new()));
    }
    let hint = if dir.join("pytorch_model.bin").is_file() {
        " (pytorch_model.bin pickles are not read; convert the weights to safetensors)"
    } else {
        ""
    };
    Err(Error::Io {
        path: dir.join(SINGLE),
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no {SINGLE} or {INDEX} in the model directory{hint}"),
        ),
    })
}

/// A shard name must stay inside the directory: one normal path component.
fn is_plain_file_name(name: &str) -> bool {
    let mut c = Path::new(name).components();
    matches!((c.next(), c.next()), (Some(Component::Normal(_)), None))
}

/// Every tensor the index promises must be in the shard it names.
fn check_weight_map(
    index: &Path,
    weight_map: &[(String, String)],
    shards: &[SafetensorsFile],
    by_name: &HashMap<String, usize>,
    order: &[(String, usize, usize)],
) -> Result<()> {
    for (tensor, file) in weight_map {
        let found = by_name
            .get(tensor)
            .and_then(|&k| order.get(k))
            .and_then(|(_, s, _)| shards.get(*s))
            .is_some_and(|s| s.path().file_name() == Some(std::ffi::OsStr::new(file)));
        if !found {
            return Err(format_error(
                index,
                0,
                format!(
                    "weight_map lists tensor {tensor:?} in {file:?}, but that shard does not hold it"
                ),
            ));
        }
    }
    Ok(())
}

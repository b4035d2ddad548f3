//! Writes a `.model` container from an opened GGUF model or Hugging Face directory (including
//! those read from soma and CTranslate2 directories), or from a graph (the `~~~graph` section
//! plus its large constants as tensors).

use super::header::{self, IndexEntry, ALIGN, END, MAGIC, VERSION};
use super::meta_toml;
use super::plan::{self, KeepRule};
use crate::cursor::format_error;
use crate::mapping::{map_file, SharedBytes};
use crate::metadata::MetaValue;
use crate::model_file::ModelFile;
use cyb_tensor::{DType, Error, Result, Shape, Tensor};
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// How to import.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// Requantize float matrices (2 or more dims) to this type; a matrix whose rows are not
    /// whole blocks of a K-quant takes llama.cpp's fallback type (Q4_K → Q5_0, Q6_K → Q8_0, ...)
    /// or, if its rows do not fit that either, is copied. Vectors (norms, biases) and
    /// non-float tensors are copied as they are.
    pub quant: Option<DType>,
    /// Per-tensor overrides, tried in order before `quant`; the first matching rule decides.
    /// Every rule must match at least one tensor.
    pub keep: Vec<KeepRule>,
}

/// What happened to one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorReport {
    pub name: String,
    /// The type in the source.
    pub from: String,
    /// The type stored.
    pub to: String,
    /// The `--keep` rule (its pattern) that decided, if one did.
    pub rule: Option<String>,
}

/// The result of an import: the container's root and each tensor's fate, in data order.
#[derive(Clone, Debug)]
pub struct WriteReport {
    pub root: [u8; 32],
    pub tensors: Vec<TensorReport>,
}

/// Progress of an import, reported once before the first tensor and after each one.
#[derive(Clone, Copy, Debug)]
pub struct Progress<'a> {
    /// Tensors done, of `count`.
    pub done: usize,
    pub count: usize,
    /// Source bytes done, of `total_bytes`.
    pub done_bytes: u64,
    pub total_bytes: u64,
    /// The tensor just done (empty before the first).
    pub name: &'a str,
}

/// Writes `src` as a `.model` file at `out` (through a temporary file renamed into place) and
/// returns its root.
pub fn write_model(src: &ModelFile, out: &Path, opts: &WriteOptions) -> Result<[u8; 32]> {
    write_model_with(src, out, opts, &mut |_| {}).map(|r| r.root)
}

/// [`write_model`], reporting progress per tensor and returning what was stored.
pub fn write_model_with(
    src: &ModelFile,
    out: &Path,
    opts: &WriteOptions,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<WriteReport> {
    let maps = map_sources(src)?;
    let (sections, planned, tensors) = plan_model(src, &maps, opts)?;
    let root = write_file(out, |w| stream(&sections, &planned, w, progress))?;
    Ok(WriteReport { root, tensors })
}

/// Writes `graph` (imported from the file `origin`, e.g. an `.onnx`) as a `.model` file at
/// `out`: its text form in the graph section and every constant too large to be written inline
/// as a tensor named after the value, stored as it is (graph constants are not requantized).
pub fn write_graph_model(
    graph: &cyb_graph::Graph,
    origin: &Path,
    out: &Path,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<WriteReport> {
    let (sections, planned, tensors) = plan_graph(graph, origin)?;
    let root = write_file(out, |w| stream(&sections, &planned, w, progress))?;
    Ok(WriteReport { root, tensors })
}

/// Writes `src` as a `.model` into `w` (held in memory first: the header, written first, holds
/// every tensor's hash) and returns what was stored.
pub fn write_to(
    src: &ModelFile,
    w: &mut impl Write,
    opts: &WriteOptions,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<WriteReport> {
    let maps = map_sources(src)?;
    let (sections, planned, tensors) = plan_model(src, &maps, opts)?;
    let mut buf = std::io::Cursor::new(Vec::new());
    let root = stream(&sections, &planned, &mut buf, progress)?;
    w.write_all(buf.get_ref()).map_err(write_err)?;
    Ok(WriteReport { root, tensors })
}

/// The graph form of [`write_to`].
pub fn write_graph_to(
    graph: &cyb_graph::Graph,
    origin: &Path,
    w: &mut impl Write,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<WriteReport> {
    let (sections, planned, tensors) = plan_graph(graph, origin)?;
    let mut buf = std::io::Cursor::new(Vec::new());
    let root = stream(&sections, &planned, &mut buf, progress)?;
    w.write_all(buf.get_ref()).map_err(write_err)?;
    Ok(WriteReport { root, tensors })
}

fn write_err(source: std::io::Error) -> Error {
    Error::Io {
        path: PathBuf::from("<.model output>"),
        source,
    }
}

fn write_file(
    out: &Path,
    body: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<[u8; 32]>,
) -> Result<[u8; 32]> {
    let tmp = out.with_extension("model.partial");
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Error::Io { path: p, source }
    };
    let file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    let root = body(&mut w).and_then(|r| {
        w.flush().map_err(io(&tmp))?;
        Ok(r)
    });
    drop(w);
    match root {
        Ok(r) => {
            std::fs::rename(&tmp, out).map_err(io(out))?;
            Ok(r)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// One tensor to write: its index fields, and how to get its bytes (read from the mapping or
/// converted when the writer gets to it, so at most one converted tensor is held at a time).
struct Planned<'a> {
    name: String,
    type_name: String,
    shape: Shape,
    /// The stored byte length.
    len: usize,
    /// The source's byte length (what progress counts).
    source_len: usize,
    bytes: Box<dyn Fn() -> Result<Cow<'a, [u8]>> + 'a>,
}

type Plan<'a> = (Bodies, Vec<Planned<'a>>, Vec<TensorReport>);

fn map_sources(src: &ModelFile) -> Result<HashMap<PathBuf, SharedBytes>> {
    let mut maps: HashMap<PathBuf, SharedBytes> = HashMap::new();
    for t in src.tensors() {
        if let std::collections::hash_map::Entry::Vacant(v) = maps.entry(t.file) {
            let m = map_file(v.key())?;
            v.insert(m);
        }
    }
    Ok(maps)
}

/// Decides every tensor's stored type (refusing bad `--keep` rules before anything is written).
fn plan_model<'a>(
    src: &'a ModelFile,
    maps: &'a HashMap<PathBuf, SharedBytes>,
    opts: &WriteOptions,
) -> Result<Plan<'a>> {
    if let Some(q) = opts
        .quant
        .filter(|q| !q.is_quantized() || !plan::storable(*q))
    {
        return Err(Error::InvalidArgument {
            op: "import --quant".into(),
            reason: format!("{q} is not a quantized weight type (Q8_0, Q4_K, Q6_K, ...)"),
        });
    }
    let sections = sections(src)?;
    let tensors = src.tensors();
    let mut used = vec![false; opts.keep.len()];
    let mut planned = Vec::with_capacity(tensors.len());
    let mut report = Vec::with_capacity(tensors.len());
    for t in tensors {
        if !header::valid_name(&t.name) {
            return Err(format_error(
                &t.file,
                t.offset as usize,
                format!(
                    "tensor {:?}: names with spaces or control characters cannot be stored",
                    t.name
                ),
            ));
        }
        let choice = plan::choose(
            &t.name,
            t.dtype,
            &t.type_name,
            &t.shape,
            opts.quant,
            &opts.keep,
        )?;
        if let Some(k) = choice.rule.and_then(|k| used.get_mut(k)) {
            *k = true;
        }
        let to = choice.convert_to;
        let (type_name, len) = match to {
            None => (t.type_name.clone(), t.byte_len),
            Some(q) => {
                let len = q
                    .bytes_for(t.shape.numel())
                    .ok_or_else(|| Error::InvalidArgument {
                        op: "import".into(),
                        reason: format!("tensor {:?}: {q} {} does not fit", t.name, t.shape),
                    })?;
                (q.name().to_string(), len)
            }
        };
        report.push(TensorReport {
            name: t.name.clone(),
            from: t.type_name.clone(),
            to: type_name.clone(),
            rule: choice
                .rule
                .and_then(|k| opts.keep.get(k))
                .map(|r| r.pattern.clone()),
        });
        planned.push(Planned {
            name: t.name.clone(),
            type_name,
            shape: t.shape.clone(),
            len,
            source_len: t.byte_len,
            bytes: Box::new(move || tensor_bytes(src, &t, maps, to)),
        });
    }
    plan::check_all_used(&opts.keep, &used)?;
    Ok((sections, planned, report))
}

fn plan_graph<'a>(graph: &'a cyb_graph::Graph, origin: &Path) -> Result<Plan<'a>> {
    let text = cyb_graph::write_graph(graph)?;
    let mut cfg = toml::Table::new();
    cfg.insert("source".into(), "graph".into());
    if let Some(ext) = origin.extension().and_then(|e| e.to_str()) {
        cfg.insert("imported_from".into(), ext.to_ascii_lowercase().into());
    }
    let mut planned = Vec::new();
    let mut report = Vec::new();
    for (&id, t) in &graph.constants {
        // The constants the text form refers to as `@` (see cyb_graph::write_graph).
        if t.numel() <= cyb_graph::INLINE_CONSTANT_LIMIT && t.host_bytes().is_some() {
            continue;
        }
        let name = graph.name_of(id);
        let what = |reason: &str| format_error(origin, 0, format!("constant {name:?}: {reason}"));
        if !header::valid_name(name) {
            return Err(what(
                "names with spaces or control characters cannot be stored as tensors",
            ));
        }
        let data = t
            .host_bytes()
            .ok_or_else(|| what("its data is not on the host"))?;
        if t.dims().contains(&0) {
            return Err(what("an empty tensor cannot be stored"));
        }
        let ty = t.dtype().name().to_string();
        report.push(TensorReport {
            name: name.to_string(),
            from: ty.clone(),
            to: ty.clone(),
            rule: None,
        });
        planned.push(Planned {
            name: name.to_string(),
            type_name: ty,
            shape: t.shape().clone(),
            len: data.len(),
            source_len: data.len(),
            bytes: Box::new(move || Ok(Cow::Borrowed(data))),
        });
    }
    let sections = Bodies {
        config: toml_text(&cfg, origin)?,
        vocab: None,
        chat: None,
        sampling: None,
        graph: Some(text.into_bytes()),
    };
    Ok((sections, planned, report))
}

/// The header: magic, sections, the tensor index with `hashes`, `~~~end` (unpadded). Its length
/// does not depend on the hashes (64 hex digits each), so a placeholder can be written first.
fn header_bytes(sections: &Bodies, planned: &[Planned<'_>], hashes: &[[u8; 32]]) -> Vec<u8> {
    let mut index = String::new();
    let mut offset = 0usize;
    for (p, h) in planned.iter().zip(hashes) {
        let e = IndexEntry {
            name: p.name.clone(),
            type_name: p.type_name.clone(),
            shape: p.shape.clone(),
            file_offset: 0,
            byte_len: p.len,
            blake3: *h,
        };
        index.push_str(&header::index_line(&e, offset));
        offset = (offset + p.len).div_ceil(ALIGN) * ALIGN;
    }
    let mut head = format!(
        "{} {VERSION}\n",
        std::str::from_utf8(MAGIC).unwrap_or_default().trim_end()
    )
    .into_bytes();
    let present: Vec<(&'static str, &[u8])> = [
        ("config", Some(sections.config.as_bytes())),
        ("tensors", Some(index.as_bytes())),
        ("vocab", sections.vocab.as_deref()),
        ("chat", sections.chat.as_deref()),
        ("sampling", sections.sampling.as_deref()),
        ("graph", sections.graph.as_deref()),
    ]
    .into_iter()
    .filter_map(|(n, b)| Some((n, b?)))
    .collect();
    let check = header::check_body(present.iter().copied());
    for (name, body) in present
        .into_iter()
        .chain(std::iter::once(("check", check.as_bytes())))
    {
        head.extend_from_slice(format!("~~~{name} {}\n", body.len()).as_bytes());
        head.extend_from_slice(body);
        head.push(b'\n');
    }
    head.extend_from_slice(END);
    head
}

/// Writes a placeholder header, then each tensor (padded to 64) as it is read or converted,
/// then the real header over the placeholder; returns the root.
fn stream<W: Write + Seek>(
    sections: &Bodies,
    planned: &[Planned<'_>],
    w: &mut W,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<[u8; 32]> {
    let mut hashes = vec![[0u8; 32]; planned.len()];
    let head_len = header_bytes(sections, planned, &hashes).len();
    let data_start = head_len.div_ceil(ALIGN) * ALIGN;
    w.write_all(&vec![0u8; data_start]).map_err(write_err)?;
    let total_bytes = planned.iter().map(|p| p.source_len as u64).sum();
    let (count, mut done_bytes) = (planned.len(), 0u64);
    progress(Progress {
        done: 0,
        count,
        done_bytes,
        total_bytes,
        name: "",
    });
    for (i, p) in planned.iter().enumerate() {
        let data = (p.bytes)()?;
        if data.len() != p.len {
            return Err(Error::InvalidArgument {
                op: "import".into(),
                reason: format!(
                    "tensor {:?}: {} bytes where {} {} needs {}",
                    p.name,
                    data.len(),
                    p.type_name,
                    p.shape,
                    p.len
                ),
            });
        }
        if let Some(h) = hashes.get_mut(i) {
            *h = *blake3::hash(&data).as_bytes();
        }
        w.write_all(&data).map_err(write_err)?;
        if i + 1 < count {
            let pad = data.len().div_ceil(ALIGN) * ALIGN - data.len();
            w.write_all(&[0u8; ALIGN][..pad]).map_err(write_err)?;
        }
        done_bytes += p.source_len as u64;
        progress(Progress {
            done: i + 1,
            count,
            done_bytes,
            total_bytes,
            name: &p.name,
        });
    }
    let head = header_bytes(sections, planned, &hashes);
    if head.len() != head_len {
        return Err(Error::invalid("import", "the header changed length"));
    }
    w.seek(SeekFrom::Start(0)).map_err(write_err)?;
    w.write_all(&head).map_err(write_err)?;
    w.seek(SeekFrom::End(0)).map_err(write_err)?;
    Ok(*blake3::hash(&head).as_bytes())
}

/// A tensor's bytes as stored: converted to `to` when the plan says so, else as they are (read
/// from the mapping, or for a tensor computed when read, from [`ModelFile::tensor`]).
fn tensor_bytes<'m>(
    src: &ModelFile,
    t: &crate::model_file::TensorEntry,
    maps: &'m HashMap<PathBuf, SharedBytes>,
    to: Option<DType>,
) -> Result<Cow<'m, [u8]>> {
    if let Some(q) = to {
        let values = src.tensor(&t.name)?.to_f32_vec()?;
        let fail = |e: Error| Error::InvalidArgument {
            op: "import".into(),
            reason: format!(
                "tensor {:?}: cannot store {} {} as {q}: {e}",
                t.name, t.type_name, t.shape
            ),
        };
        let out = if q.is_quantized() {
            let n = q
                .bytes_for(values.len())
                .ok_or_else(|| fail(Error::invalid("import", "rows are not whole blocks")))?;
            let mut out = vec![0u8; n];
            cyb_tensor::quant::quantize(q, &values, &mut out).map_err(fail)?;
            out
        } else {
            let c = Tensor::from_f32_as(t.shape.dims(), &values, q).map_err(fail)?;
            c.host_bytes().unwrap_or_default().to_vec()
        };
        return Ok(Cow::Owned(out));
    }
    if !t.in_place {
        let tensor = src.tensor(&t.name)?;
        let data = tensor.host_bytes().ok_or_else(|| {
            Error::invalid(
                "import",
                format!("tensor {:?} is not in host memory", t.name),
            )
        })?;
        return Ok(Cow::Owned(data.to_vec()));
    }
    let bytes: &[u8] = maps.get(&t.file).map_or(&[], |m| (**m).as_ref());
    let start = usize::try_from(t.offset).unwrap_or(usize::MAX);
    let data = start
        .checked_add(t.byte_len)
        .and_then(|end| bytes.get(start..end))
        .ok_or_else(|| {
            format_error(
                &t.file,
                start,
                format!("tensor {:?} lies outside the file", t.name),
            )
        })?;
    Ok(Cow::Borrowed(data))
}

struct Bodies {
    config: String,
    vocab: Option<Vec<u8>>,
    chat: Option<Vec<u8>>,
    sampling: Option<Vec<u8>>,
    graph: Option<Vec<u8>>,
}

fn toml_text(doc: &toml::Table, path: &Path) -> Result<String> {
    toml::to_string(doc).map_err(|e| format_error(path, 0, format!("cannot write TOML: {e}")))
}

fn sections(src: &ModelFile) -> Result<Bodies> {
    let path = src.path();
    match src {
        ModelFile::Gguf(g) => {
            let (mut config, mut vocab, mut sampling) = (Vec::new(), Vec::new(), Vec::new());
            let mut chat = None;
            for (k, v) in g.metadata() {
                match (k.as_str(), v) {
                    ("tokenizer.chat_template", MetaValue::String(s)) => {
                        chat = Some(s.clone().into_bytes())
                    }
                    (k, _) if k.starts_with("tokenizer.") => vocab.push((k.to_string(), v.clone())),
                    (k, _) if k.starts_with("general.sampling.") => {
                        sampling.push((k.to_string(), v.clone()))
                    }
                    _ => config.push((k.clone(), v.clone())),
                }
            }
            let doc = |m: &[(String, MetaValue)]| {
                meta_toml::to_toml(m).map_err(|r| format_error(path, 0, r))
            };
            let mut cfg = toml::Table::new();
            cfg.insert("source".into(), "gguf".into());
            cfg.insert("gguf_version".into(), i64::from(g.version()).into());
            cfg.extend(doc(&config)?);
            let opt = |m: &[(String, MetaValue)]| -> Result<Option<Vec<u8>>> {
                if m.is_empty() {
                    return Ok(None);
                }
                Ok(Some(toml_text(&doc(m)?, path)?.into_bytes()))
            };
            Ok(Bodies {
                config: toml_text(&cfg, path)?,
                vocab: opt(&vocab)?,
                chat,
                sampling: opt(&sampling)?,
                graph: None,
            })
        }
        ModelFile::HuggingFace(h) => {
            let js = |v: &serde_json::Value| {
                serde_json::to_string_pretty(v)
                    .map_err(|e| format_error(path, 0, format!("cannot write JSON: {e}")))
            };
            let mut cfg = toml::Table::new();
            cfg.insert("source".into(), "huggingface".into());
            if h.container().is_none() && crate::soma::is_soma_dir(h.dir()) {
                // Provenance only: a soma directory is stored as the HF model it describes.
                cfg.insert("imported_from".into(), "soma".into());
            }
            if h.container().is_none() && h.ctranslate2().is_some() {
                // Likewise a CTranslate2 directory: its tensors under transformers' names.
                cfg.insert("imported_from".into(), "ctranslate2".into());
            }
            if h.container().is_none() && h.whisper_ggml().is_some() {
                cfg.insert("imported_from".into(), "ggml".into());
            }
            cfg.insert("config_json".into(), js(h.config_json())?.into());
            if let Some(tc) = &h.tokenizer_config {
                cfg.insert("tokenizer_config_json".into(), js(tc)?.into());
            }
            // Image and vision-language models keep their image processor.
            if let Some((ip, _)) = h.image_processor() {
                cfg.insert("image_processor_json".into(), js(&ip)?.into());
            }
            let read = |p: &Path| {
                std::fs::read(p).map_err(|source| Error::Io {
                    path: p.to_path_buf(),
                    source,
                })
            };
            let jinja = h.dir().join("chat_template.jinja");
            Ok(Bodies {
                config: toml_text(&cfg, path)?,
                vocab: h.tokenizer_json.as_deref().map(read).transpose()?,
                chat: jinja.is_file().then(|| read(&jinja)).transpose()?,
                sampling: h
                    .generation_config
                    .as_ref()
                    .map(|g| js(g).map(String::into_bytes))
                    .transpose()?,
                graph: None,
            })
        }
    }
}

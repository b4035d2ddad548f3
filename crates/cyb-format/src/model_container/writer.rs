//! Writes a `.model` container from an opened GGUF model or Hugging Face directory, or from a
//! graph (the `~~~graph` section plus its large constants as tensors).

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
use std::io::Write;
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
    write_file(out, |w| write_to(src, w, opts, progress))
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
    write_file(out, |w| write_graph_to(graph, origin, w, progress))
}

fn write_file(
    out: &Path,
    body: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<WriteReport>,
) -> Result<WriteReport> {
    let tmp = out.with_extension("model.partial");
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Error::Io { path: p, source }
    };
    let file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    let report = body(&mut w).and_then(|r| {
        w.flush().map_err(io(&tmp))?;
        Ok(r)
    });
    drop(w);
    match report {
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

/// A tensor ready to be written.
struct Stored<'a> {
    name: String,
    type_name: String,
    shape: Shape,
    data: Cow<'a, [u8]>,
}

/// Writes `src` as a `.model` into `w` and returns what was stored.
pub fn write_to(
    src: &ModelFile,
    w: &mut impl Write,
    opts: &WriteOptions,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<WriteReport> {
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
    let mut maps: HashMap<PathBuf, SharedBytes> = HashMap::new();
    for t in &tensors {
        if !maps.contains_key(&t.file) {
            maps.insert(t.file.clone(), map_file(&t.file)?);
        }
    }
    let total_bytes = tensors.iter().map(|t| t.byte_len as u64).sum();
    let mut done_bytes = 0u64;
    let count = tensors.len();
    progress(Progress {
        done: 0,
        count,
        done_bytes,
        total_bytes,
        name: "",
    });
    let mut used = vec![false; opts.keep.len()];
    let mut stored = Vec::with_capacity(count);
    let mut report = Vec::with_capacity(count);
    for (i, t) in tensors.iter().enumerate() {
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
        let (type_name, data) = tensor_bytes(src, t, &maps, choice.convert_to)?;
        report.push(TensorReport {
            name: t.name.clone(),
            from: t.type_name.clone(),
            to: type_name.clone(),
            rule: choice
                .rule
                .and_then(|k| opts.keep.get(k))
                .map(|r| r.pattern.clone()),
        });
        stored.push(Stored {
            name: t.name.clone(),
            type_name,
            shape: t.shape.clone(),
            data,
        });
        done_bytes += t.byte_len as u64;
        progress(Progress {
            done: i + 1,
            count,
            done_bytes,
            total_bytes,
            name: &t.name,
        });
    }
    plan::check_all_used(&opts.keep, &used)?;
    let root = assemble(sections, &stored, w)?;
    Ok(WriteReport {
        root,
        tensors: report,
    })
}

/// The graph form of [`write_to`].
pub fn write_graph_to(
    graph: &cyb_graph::Graph,
    origin: &Path,
    w: &mut impl Write,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<WriteReport> {
    let text = cyb_graph::write_graph(graph)?;
    let mut cfg = toml::Table::new();
    cfg.insert("source".into(), "graph".into());
    if let Some(ext) = origin.extension().and_then(|e| e.to_str()) {
        cfg.insert("imported_from".into(), ext.to_ascii_lowercase().into());
    }
    // The constants the text form refers to as `@` (see cyb_graph::write_graph).
    let external: Vec<(&str, &Tensor)> = graph
        .constants
        .iter()
        .filter(|(_, t)| t.numel() > cyb_graph::INLINE_CONSTANT_LIMIT || t.host_bytes().is_none())
        .map(|(&id, t)| (graph.name_of(id), t))
        .collect();
    let total_bytes = external.iter().map(|(_, t)| t.byte_len() as u64).sum();
    let (count, mut done_bytes) = (external.len(), 0u64);
    progress(Progress {
        done: 0,
        count,
        done_bytes,
        total_bytes,
        name: "",
    });
    let mut stored = Vec::with_capacity(count);
    let mut report = Vec::with_capacity(count);
    for (i, (name, t)) in external.iter().enumerate() {
        let what = |reason: String| format_error(origin, 0, format!("constant {name:?}: {reason}"));
        if !header::valid_name(name) {
            return Err(what(
                "names with spaces or control characters cannot be stored as tensors".into(),
            ));
        }
        let data = t
            .host_bytes()
            .ok_or_else(|| what("its data is not on the host".into()))?;
        if t.dims().contains(&0) {
            return Err(what("an empty tensor cannot be stored".into()));
        }
        stored.push(Stored {
            name: name.to_string(),
            type_name: t.dtype().name().to_string(),
            shape: t.shape().clone(),
            data: Cow::Borrowed(data),
        });
        report.push(TensorReport {
            name: name.to_string(),
            from: t.dtype().name().to_string(),
            to: t.dtype().name().to_string(),
            rule: None,
        });
        done_bytes += data.len() as u64;
        progress(Progress {
            done: i + 1,
            count,
            done_bytes,
            total_bytes,
            name,
        });
    }
    let sections = Bodies {
        config: toml_text(&cfg, origin)?,
        vocab: None,
        chat: None,
        sampling: None,
        graph: Some(text.into_bytes()),
    };
    let root = assemble(sections, &stored, w)?;
    Ok(WriteReport {
        root,
        tensors: report,
    })
}

/// Writes the header (sections and the tensor index), then the tensors, each padded to 64.
fn assemble(sections: Bodies, stored: &[Stored<'_>], w: &mut impl Write) -> Result<[u8; 32]> {
    let mut index = String::new();
    let mut offset = 0usize;
    for s in stored {
        let e = IndexEntry {
            name: s.name.clone(),
            type_name: s.type_name.clone(),
            shape: s.shape.clone(),
            file_offset: 0,
            byte_len: s.data.len(),
            blake3: *blake3::hash(&s.data).as_bytes(),
        };
        index.push_str(&header::index_line(&e, offset));
        offset = (offset + s.data.len()).div_ceil(ALIGN) * ALIGN;
    }
    let mut head = format!(
        "{} {VERSION}\n",
        std::str::from_utf8(MAGIC).unwrap_or_default().trim_end()
    )
    .into_bytes();
    for (name, body) in [
        ("config", Some(sections.config.into_bytes())),
        ("tensors", Some(index.into_bytes())),
        ("vocab", sections.vocab),
        ("chat", sections.chat),
        ("sampling", sections.sampling),
        ("graph", sections.graph),
    ] {
        if let Some(body) = body {
            head.extend_from_slice(format!("~~~{name} {}\n", body.len()).as_bytes());
            head.extend_from_slice(&body);
            head.push(b'\n');
        }
    }
    head.extend_from_slice(END);
    let root = *blake3::hash(&head).as_bytes();
    let pad = head.len().div_ceil(ALIGN) * ALIGN - head.len();
    head.resize(head.len() + pad, 0);
    let werr = |source| Error::Io {
        path: PathBuf::from("<.model output>"),
        source,
    };
    w.write_all(&head).map_err(werr)?;
    let n = stored.len();
    for (i, s) in stored.iter().enumerate() {
        w.write_all(&s.data).map_err(werr)?;
        if i + 1 < n {
            let pad = s.data.len().div_ceil(ALIGN) * ALIGN - s.data.len();
            w.write_all(&[0u8; ALIGN][..pad]).map_err(werr)?;
        }
    }
    Ok(root)
}

/// A tensor's bytes as stored: converted to `to` when the plan says so, else as they are.
fn tensor_bytes<'m>(
    src: &ModelFile,
    t: &crate::model_file::TensorEntry,
    maps: &'m HashMap<PathBuf, SharedBytes>,
    to: Option<DType>,
) -> Result<(String, Cow<'m, [u8]>)> {
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
        return Ok((q.name().to_string(), Cow::Owned(out)));
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
    Ok((t.type_name.clone(), Cow::Borrowed(data)))
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
            cfg.insert("config_json".into(), js(h.config_json())?.into());
            if let Some(tc) = &h.tokenizer_config {
                cfg.insert("tokenizer_config_json".into(), js(tc)?.into());
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

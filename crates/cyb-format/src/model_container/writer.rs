//! Writes a `.model` container from an opened GGUF model or Hugging Face directory.

use super::header::{self, IndexEntry, ALIGN, END, MAGIC, VERSION};
use super::meta_toml;
use crate::cursor::format_error;
use crate::mapping::{map_file, SharedBytes};
use crate::metadata::MetaValue;
use crate::model_file::ModelFile;
use cyb_tensor::{DType, Error, Result};
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// How to import.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// Requantize float matrices (2 or more dims, rows a whole number of blocks) to this type;
    /// vectors (norms, biases) and other tensors are copied as they are.
    pub quant: Option<DType>,
}

/// Writes `src` as a `.model` file at `out` (through a temporary file renamed into place) and
/// returns its root.
pub fn write_model(src: &ModelFile, out: &Path, opts: &WriteOptions) -> Result<[u8; 32]> {
    let tmp = out.with_extension("model.partial");
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Error::Io { path: p, source }
    };
    let file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    let root = write_to(src, &mut w, opts).and_then(|r| {
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

/// Writes `src` as a `.model` into `w` and returns its root.
pub fn write_to(src: &ModelFile, w: &mut impl Write, opts: &WriteOptions) -> Result<[u8; 32]> {
    let sections = sections(src)?;
    let tensors = src.tensors();
    let mut maps: HashMap<PathBuf, SharedBytes> = HashMap::new();
    for t in &tensors {
        if !maps.contains_key(&t.file) {
            maps.insert(t.file.clone(), map_file(&t.file)?);
        }
    }
    let mut datas: Vec<Cow<'_, [u8]>> = Vec::new();
    let mut entries = Vec::new();
    let mut offsets = Vec::new();
    let mut offset = 0usize;
    for t in &tensors {
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
        let (type_name, data) = tensor_bytes(src, t, &maps, opts)?;
        entries.push(IndexEntry {
            name: t.name.clone(),
            type_name,
            shape: t.shape.clone(),
            file_offset: 0,
            byte_len: data.len(),
            blake3: *blake3::hash(&data).as_bytes(),
        });
        offsets.push(offset);
        offset = (offset + data.len()).div_ceil(ALIGN) * ALIGN;
        datas.push(data);
    }
    let mut index = String::new();
    for (e, off) in entries.iter().zip(&offsets) {
        index.push_str(&header::index_line(e, *off));
    }
    let mut head = format!(
        "{} {VERSION}\n",
        std::str::from_utf8(MAGIC).unwrap_or_default().trim_end()
    )
    .into_bytes();
    for (name, body) in [
        ("config", Some(sections.config.into_bytes())),
        ("tensors", Some(index.into_bytes())),
    ]
    .into_iter()
    .chain([
        ("vocab", sections.vocab),
        ("chat", sections.chat),
        ("sampling", sections.sampling),
    ]) {
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
    let n = datas.len();
    for (i, d) in datas.iter().enumerate() {
        w.write_all(d).map_err(werr)?;
        if i + 1 < n {
            let pad = d.len().div_ceil(ALIGN) * ALIGN - d.len();
            w.write_all(&[0u8; ALIGN][..pad]).map_err(werr)?;
        }
    }
    Ok(root)
}

/// A tensor's bytes as stored, requantized when the options ask for it.
fn tensor_bytes<'m>(
    src: &ModelFile,
    t: &crate::model_file::TensorEntry,
    maps: &'m HashMap<PathBuf, SharedBytes>,
    opts: &WriteOptions,
) -> Result<(String, Cow<'m, [u8]>)> {
    if let (Some(q), Some(d)) = (opts.quant, t.dtype) {
        let dims = t.shape.dims();
        let fits = dims.len() >= 2 && t.shape.last().is_multiple_of(q.block_elems());
        if fits && d.is_float() && d != q {
            let values = src.tensor(&t.name)?.to_f32_vec()?;
            let n = q
                .bytes_for(values.len())
                .ok_or_else(|| Error::InvalidArgument {
                    op: "import --quant".into(),
                    reason: format!("tensor {:?}: {} {} does not fit", t.name, q, t.shape),
                })?;
            let mut out = vec![0u8; n];
            cyb_tensor::quant::quantize(q, &values, &mut out)?;
            return Ok((q.name().to_string(), Cow::Owned(out)));
        }
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
            })
        }
    }
}

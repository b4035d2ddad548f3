//! `cyb-llm inspect`: what a model file holds (format, architecture, normalized config,
//! metadata, tensors), for people or, with `--json`, for scripts; `--tensor NAME --dump OUT.npy`
//! writes one tensor dequantized to f32.

use crate::npy;
use cyb_format::{summarize_json, ModelFile, TensorEntry};
use cyb_tensor::{Error, Result};
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct InspectArgs {
    /// A GGUF file or a Hugging Face model directory.
    pub path: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Only this tensor.
    #[arg(long, value_name = "NAME")]
    pub tensor: Option<String>,
    /// Write the tensor named by --tensor, dequantized to f32, to this .npy file.
    #[arg(long, value_name = "OUT.npy", requires = "tensor")]
    pub dump: Option<PathBuf>,
}

pub fn run(args: InspectArgs) -> Result<()> {
    let model = cyb_format::open(&args.path)?;
    if let Some(name) = &args.tensor {
        return inspect_tensor(&model, name, &args);
    }
    if args.json {
        emit(&format!("{}\n", to_json(&model)))
    } else {
        emit(&human(&model))
    }
}

/// Writes to stdout; a reader that went away (`| head`) is not an error.
fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::Io {
            path: "<stdout>".into(),
            source: e,
        }),
        _ => Ok(()),
    }
}

fn entry_json(t: &TensorEntry) -> Value {
    json!({
        "name": t.name,
        "dtype": t.dtype.name(),
        "shape": t.shape.dims(),
        "bytes": t.byte_len,
        "offset": t.offset,
        "file": t.file.display().to_string(),
    })
}

fn to_json(model: &ModelFile) -> Value {
    let (config, config_error) = match model.config() {
        Ok(c) => (serde_json::to_value(c).unwrap_or(Value::Null), Value::Null),
        Err(e) => (Value::Null, Value::String(e.to_string())),
    };
    let metadata: Map<String, Value> = model.metadata().into_iter().collect();
    let tensors: Vec<Value> = model.tensors().iter().map(entry_json).collect();
    json!({
        "path": model.path().display().to_string(),
        "format": model.format_name(),
        "format_version": model.format_version(),
        "architecture": config.get("architecture").cloned().unwrap_or(Value::Null),
        "config": config,
        "config_error": config_error,
        "metadata": metadata,
        "tensors": tensors,
    })
}

fn human(model: &ModelFile) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "path:         {}", model.path().display());
    let _ = writeln!(
        o,
        "format:       {} ({})",
        model.format_name(),
        model.format_version()
    );
    match model.config() {
        Ok(c) => {
            let _ = writeln!(o, "architecture: {}", c.architecture);
            let _ = writeln!(o, "config:");
            if let Ok(Value::Object(fields)) = serde_json::to_value(&c) {
                for (k, v) in fields {
                    if k == "extra" || v.is_null() {
                        continue;
                    }
                    let _ = writeln!(o, "  {k:<24} {}", summarize_json(&v));
                }
            }
        }
        Err(e) => {
            let _ = writeln!(o, "config:       unavailable ({e})");
        }
    }
    let metadata = model.metadata();
    let _ = writeln!(o, "metadata ({} entries):", metadata.len());
    for (k, v) in &metadata {
        let _ = writeln!(o, "  {k:<40} {}", summarize_json(v));
    }
    let tensors = model.tensors();
    let total: usize = tensors.iter().map(|t| t.byte_len).sum();
    let _ = writeln!(o, "tensors ({}, {} bytes):", tensors.len(), total);
    let width = tensors.iter().map(|t| t.name.len()).max().unwrap_or(0);
    for t in &tensors {
        let _ = writeln!(
            o,
            "  {:<width$}  {:<6} {:<20} {:>12} bytes  @ {}",
            t.name,
            t.dtype.name(),
            format!("{:?}", t.shape.dims()),
            t.byte_len,
            t.offset
        );
    }
    o
}

fn inspect_tensor(model: &ModelFile, name: &str, args: &InspectArgs) -> Result<()> {
    let entry = model
        .tensors()
        .into_iter()
        .find(|t| t.name == name)
        .ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
            required_by: format!("inspect --tensor ({})", model.path().display()),
        })?;
    if let Some(out) = &args.dump {
        let values = model.tensor(name)?.to_f32_vec()?;
        npy::write_f32(out, entry.shape.dims(), &values)?;
    }
    let text = if args.json {
        let mut v = entry_json(&entry);
        if let (Some(out), Value::Object(o)) = (&args.dump, &mut v) {
            o.insert("dumped_to".into(), out.display().to_string().into());
        }
        format!("{v}\n")
    } else {
        let mut o = format!(
            "{}  {}  {:?}  {} bytes  @ {} in {}\n",
            entry.name,
            entry.dtype.name(),
            entry.shape.dims(),
            entry.byte_len,
            entry.offset,
            entry.file.display()
        );
        if let Some(out) = &args.dump {
            let _ = writeln!(o, "wrote {} as f32 .npy to {}", entry.name, out.display());
        }
        o
    };
    emit(&text)
}

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
    /// A `.model` file, a GGUF file or a Hugging Face model directory.
    pub path: PathBuf,
    /// Check every tensor of a `.model` file against its blake3 first.
    #[arg(long)]
    pub verify: bool,
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
    let model = match cyb_format::open(&args.path) {
        Ok(m) => m,
        Err(e) => match cyb_format::model_container::open_graph(&args.path) {
            Ok(g) => return inspect_graph(&g, &args),
            Err(_) => return Err(e),
        },
    };
    if args.verify {
        model.verify()?;
    }
    if let Some(name) = &args.tensor {
        return inspect_tensor(&model, name, &args);
    }
    if args.json {
        emit(&format!("{}\n", to_json(&model)))
    } else {
        emit(&human(&model))
    }
}

/// A `.model` holding a graph (imported from ONNX): its root, graph size and tensors (the
/// graph's large constants). `cyb-llm graph` prints the graph itself.
fn inspect_graph(m: &cyb_format::model_container::GraphModel, args: &InspectArgs) -> Result<()> {
    let info = &m.info;
    if args.verify {
        info.verify()?;
    }
    if args.tensor.is_some() {
        return Err(Error::invalid(
            "inspect --tensor",
            "not available for a graph .model; `cyb-llm graph` prints its constants",
        ));
    }
    let g = &m.graph;
    let version = format!("v{}, from {}", info.version, info.source);
    let tensors: Vec<Value> = info
        .tensors
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "dtype": t.type_name,
                "supported": true,
                "shape": t.shape.dims(),
                "bytes": t.byte_len,
                "offset": t.file_offset,
                "file": args.path.display().to_string(),
            })
        })
        .collect();
    if args.json {
        let j = json!({
            "path": args.path.display().to_string(),
            "format": "model",
            "format_version": version,
            "root": info.root_hex(),
            "graph": {
                "nodes": g.nodes.len(),
                "inputs": g.inputs.iter().map(|&i| g.name_of(i)).collect::<Vec<_>>(),
                "outputs": g.outputs.iter().map(|&i| g.name_of(i)).collect::<Vec<_>>(),
                "constants": g.constants.len(),
            },
            "tensors": tensors,
        });
        return emit(&format!("{j}\n"));
    }
    let mut o = String::new();
    let _ = writeln!(o, "path:         {}", args.path.display());
    let _ = writeln!(o, "format:       model ({version})");
    let _ = writeln!(o, "root:         {}", info.root_hex());
    let names = |ids: &[usize]| {
        ids.iter()
            .map(|&i| g.name_of(i))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        o,
        "graph:        {} nodes, {} constants; inputs {}; outputs {}",
        g.nodes.len(),
        g.constants.len(),
        names(&g.inputs),
        names(&g.outputs)
    );
    let total: usize = info.tensors.iter().map(|t| t.byte_len).sum();
    let _ = writeln!(o, "tensors ({}, {} bytes):", info.tensors.len(), total);
    for t in &info.tensors {
        let _ = writeln!(
            o,
            "  {}  {} {:?} {} bytes @ {}",
            t.name,
            t.type_name,
            t.shape.dims(),
            t.byte_len,
            t.file_offset
        );
    }
    emit(&o)
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
        "dtype": t.type_name,
        // False for a type this build lists but cannot compute with (IQ4_XS, MXFP4, ...).
        "supported": t.dtype.is_some(),
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
        "root": model.container().map(|c| c.root_hex()),
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
    if let Some(c) = model.container() {
        let _ = writeln!(o, "root:         {}", c.root_hex());
    }
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
    let metadata = model.metadata_summaries();
    let _ = writeln!(o, "metadata ({} entries):", metadata.len());
    for (k, v) in &metadata {
        let _ = writeln!(o, "  {k:<40} {v}");
    }
    let tensors = model.tensors();
    let total: usize = tensors.iter().map(|t| t.byte_len).sum();
    let _ = writeln!(o, "tensors ({}, {} bytes):", tensors.len(), total);
    let width = tensors.iter().map(|t| t.name.len()).max().unwrap_or(0);
    for t in &tensors {
        let _ = writeln!(
            o,
            "  {:<width$}  {:<7} {:<20} {:>12} bytes  @ {}",
            t.name,
            t.type_name,
            format!("{:?}", t.shape.dims()),
            t.byte_len,
            t.offset
        );
    }
    let mut unsupported: Vec<&str> = tensors
        .iter()
        .filter(|t| t.dtype.is_none())
        .map(|t| t.type_name.as_str())
        .collect();
    if !unsupported.is_empty() {
        let n = unsupported.len();
        unsupported.sort_unstable();
        unsupported.dedup();
        let _ = writeln!(
            o,
            "note: {n} tensor(s) have types this build cannot compute with: {}",
            unsupported.join(", ")
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
            entry.type_name,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Made by tools/fixtures/make_format_fixtures.py with gguf-py: an F32 tensor beside
    /// IQ4_XS, IQ2_XXS, MXFP4, NVFP4, Q1_0, F64 and I16 ones.
    fn unsupported_types() -> ModelFile {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/format/unsupported_types.gguf");
        cyb_format::open(p).unwrap()
    }

    #[test]
    fn lists_types_this_build_cannot_compute_with() {
        let model = unsupported_types();
        let text = human(&model);
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("blk.0.ffn_down.weight "))
            .unwrap();
        assert!(
            line.contains(" IQ4_XS ") && line.contains("[2, 256]"),
            "{line}"
        );
        assert!(text.contains("tensors (8, "), "{text}");
        assert!(
            text.contains("note: 5 tensor(s) have types this build cannot compute with: IQ2_XXS, IQ4_XS, MXFP4, NVFP4, Q1_0"),
            "{text}"
        );

        let v = to_json(&model);
        let tensors = v["tensors"].as_array().unwrap();
        assert_eq!(tensors.len(), 8);
        let t = tensors
            .iter()
            .find(|t| t["name"] == "blk.0.ffn_down.weight")
            .unwrap();
        assert_eq!(t["dtype"], "IQ4_XS");
        assert_eq!(t["supported"], false);
        assert_eq!(t["bytes"], 272);
        assert_eq!(tensors[0]["dtype"], "F32");
        assert_eq!(tensors[0]["supported"], true);
    }

    #[test]
    fn dumping_such_a_tensor_is_a_clear_error() {
        let model = unsupported_types();
        let out = std::env::temp_dir().join(format!("cyb-inspect-{}.npy", std::process::id()));
        let args = InspectArgs {
            path: model.path().to_path_buf(),
            json: false,
            verify: false,
            tensor: Some("blk.0.ffn_down.weight".into()),
            dump: Some(out.clone()),
        };
        let err = inspect_tensor(&model, "blk.0.ffn_down.weight", &args).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tensor blk.0.ffn_down.weight has type IQ4_XS, which this build cannot compute with"
        );
        assert!(!out.exists());
    }
}

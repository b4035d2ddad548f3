//! `cyb-llm infer MODEL.onnx|MODEL.model --input name=file.npy ... --output DIR`: runs a graph
//! (an ONNX file, or a `.model` imported from one) on `.npy` inputs through the chosen backend
//! chain and writes one `.npy` per graph output, named after the output (characters other than
//! `[A-Za-z0-9_.-]` become `_`).

use clap::Args;
use cyb_runtime::{Runtime, RuntimeOptions};
use cyb_tensor::{DType, Error, Result, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct InferArgs {
    /// An ONNX model file, or a `.model` file holding a graph (`cyb-llm import X.onnx`).
    pub model: PathBuf,
    /// A graph input: `NAME=FILE.npy` (repeat for each input).
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// Directory for the outputs (created if missing).
    #[arg(long)]
    pub output: PathBuf,
    /// Backend: auto (a discrete or integrated GPU when there is one, else cpu), cpu, wgpu or
    /// reference (`cyb-llm backends` lists them and says what auto picks).
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Run the graph as imported, without the fusion pass (matmul+bias+activation and
    /// residual add+norm become one op where the backend has a kernel for it).
    #[arg(long)]
    pub no_fuse: bool,
}

pub fn run(args: InferArgs) -> Result<()> {
    let inputs = read_inputs(&args.inputs)?;
    let rt = Runtime::new(RuntimeOptions {
        backend: Some(args.backend.clone()),
        ..Default::default()
    })?;
    let model = rt.load_graph(&args.model, !args.no_fuse)?;
    let outs = model.run(&inputs)?;
    std::fs::create_dir_all(&args.output).map_err(|source| Error::Io {
        path: args.output.clone(),
        source,
    })?;
    for (name, t) in outs {
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = args.output.join(format!("{safe}.npy"));
        write_npy(&path, &t)?;
        println!("{name}: {} {:?} -> {}", t.dtype(), t.dims(), path.display());
    }
    Ok(())
}

/// The graph inputs `--input NAME=FILE.npy` flags name, read.
pub fn read_inputs(specs: &[String]) -> Result<HashMap<String, Tensor>> {
    let mut inputs = HashMap::new();
    for spec in specs {
        let (name, file) = spec
            .split_once('=')
            .ok_or_else(|| Error::invalid("--input", format!("{spec:?} is not NAME=FILE")))?;
        inputs.insert(name.to_string(), read_npy(Path::new(file))?);
    }
    Ok(inputs)
}

/// numpy's type string of each dtype `.npy` files hold as is (others, such as BF16, are
/// written as f32).
use cyb_format::npy::DESCRS;

fn descr(d: DType) -> Option<&'static str> {
    DESCRS.iter().find(|(t, _)| *t == d).map(|(_, s)| *s)
}

/// Writes a host tensor as `.npy` v1.0 in its own dtype.
pub fn write_npy(path: &Path, t: &Tensor) -> Result<()> {
    let t = match descr(t.dtype()) {
        Some(_) => t.clone(),
        None => Tensor::from_f32(t.dims(), &t.to_f32_vec()?)?,
    };
    let mut bytes = crate::npy::header(t.dims(), descr(t.dtype()).unwrap_or("<f4"))?;
    bytes.extend_from_slice(
        t.host_bytes()
            .ok_or_else(|| Error::invalid("npy", "tensor is not on the host"))?,
    );
    crate::npy::write_file(path, &bytes)
}

/// Reads a C-order little-endian `.npy` (v1–v3) of any dtype in [`DESCRS`].
pub fn read_npy(path: &Path) -> Result<Tensor> {
    let data = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    cyb_format::npy::parse(&data, path)
}

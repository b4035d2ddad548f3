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
    /// Preferred backend (`cyb-llm backends` lists them); the CPU reference is the fallback.
    #[arg(long)]
    pub backend: Option<String>,
    /// Run the graph as imported, without the fusion pass (matmul+bias+activation and
    /// residual add+norm become one op where the backend has a kernel for it).
    #[arg(long)]
    pub no_fuse: bool,
}

pub fn run(args: InferArgs) -> Result<()> {
    let mut inputs = HashMap::new();
    for spec in &args.inputs {
        let (name, file) = spec
            .split_once('=')
            .ok_or_else(|| Error::invalid("infer", format!("--input {spec:?} is not NAME=FILE")))?;
        inputs.insert(name.to_string(), read_npy(Path::new(file))?);
    }
    let rt = Runtime::new(RuntimeOptions {
        backend: args.backend.clone(),
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

/// numpy's type string of each dtype `.npy` files hold as is (others, such as BF16, are
/// written as f32).
const DESCRS: [(DType, &str); 12] = [
    (DType::F32, "<f4"),
    (DType::F16, "<f2"),
    (DType::F64, "<f8"),
    (DType::I64, "<i8"),
    (DType::I32, "<i4"),
    (DType::I16, "<i2"),
    (DType::I8, "|i1"),
    (DType::U64, "<u8"),
    (DType::U32, "<u4"),
    (DType::U16, "<u2"),
    (DType::U8, "|u1"),
    (DType::Bool, "|b1"),
];

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
    let bad = |offset: usize, reason: &str| Error::Format {
        file: path.to_path_buf(),
        offset: offset as u64,
        reason: reason.to_string(),
    };
    if data.get(..6) != Some(b"\x93NUMPY") {
        return Err(bad(0, "not a .npy file"));
    }
    let major = *data.get(6).ok_or_else(|| bad(6, "truncated"))?;
    let (hlen, start) = match major {
        1 => {
            let b = data.get(8..10).ok_or_else(|| bad(8, "truncated"))?;
            (u16::from_le_bytes([b[0], b[1]]) as usize, 10usize)
        }
        2 | 3 => {
            let b = data.get(8..12).ok_or_else(|| bad(8, "truncated"))?;
            (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, 12)
        }
        _ => return Err(bad(6, "unknown .npy version")),
    };
    let end = start
        .checked_add(hlen)
        .ok_or_else(|| bad(start, "header length overflows"))?;
    let header = data
        .get(start..end)
        .ok_or_else(|| bad(start, "truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad(start, "header is not text"))?;
    let field = |key: &str| -> Option<&str> {
        let i = header.find(&format!("'{key}'"))? + key.len() + 2;
        let rest = header[i..].trim_start().strip_prefix(':')?.trim_start();
        Some(rest)
    };
    let descr = field("descr")
        .and_then(|r| r.strip_prefix('\''))
        .and_then(|r| r.split('\'').next())
        .ok_or_else(|| bad(start, "no descr"))?;
    if field("fortran_order").is_some_and(|r| r.starts_with("True")) {
        return Err(bad(start, "Fortran-order arrays are not supported"));
    }
    let shape_txt = field("shape")
        .and_then(|r| r.strip_prefix('('))
        .and_then(|r| r.split(')').next())
        .ok_or_else(|| bad(start, "no shape"))?;
    let dims: Vec<usize> = shape_txt
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| bad(start, "bad shape")))
        .collect::<Result<_>>()?;
    let dtype = DESCRS
        .iter()
        .find(|(_, s)| *s == descr)
        .map(|(t, _)| *t)
        .ok_or_else(|| bad(start, &format!("dtype {descr} is not supported")))?;
    Tensor::from_bytes(&dims, dtype, &data[end..]).map_err(|e| bad(end, &e.to_string()))
}

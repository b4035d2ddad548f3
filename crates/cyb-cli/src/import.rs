//! `cyb-llm import SRC -o OUT.model [--quant TYPE]`: writes a GGUF file or a Hugging Face
//! directory as one `.model` container (docs/model-format.md), checks what it wrote, and prints
//! the container's blake3 root.

use cyb_format::model_container::{write_model, WriteOptions};
use cyb_tensor::{DType, Error, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ImportArgs {
    /// A GGUF file, a Hugging Face model directory, or a `.model` file.
    pub src: PathBuf,
    /// The `.model` file to write.
    #[arg(short, long, value_name = "OUT.model")]
    pub output: PathBuf,
    /// Requantize float matrices (2+ dims) to this type (Q8_0, Q4_K, ...); vectors such as
    /// norms and biases, and tensors already of another type, are copied as they are.
    #[arg(long, value_name = "TYPE")]
    pub quant: Option<String>,
}

pub fn run(args: ImportArgs) -> Result<()> {
    let quant = match &args.quant {
        None => None,
        Some(name) => match DType::parse(name).filter(|d| d.is_quantized()) {
            Some(d) => Some(d),
            None => {
                return Err(Error::InvalidArgument {
                    op: "import --quant".into(),
                    reason: format!("{name:?} is not a quantized type (Q8_0, Q4_K, Q6_K, ...)"),
                })
            }
        },
    };
    let same = |a: &PathBuf, b: &PathBuf| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same(&args.src, &args.output) {
        return Err(Error::InvalidArgument {
            op: "import".into(),
            reason: format!("the output {} is the source", args.output.display()),
        });
    }
    let src = cyb_format::open(&args.src)?;
    let root = write_model(&src, &args.output, &WriteOptions { quant })?;
    // Read back what was written: the header parses, every tensor hashes to its index entry.
    let written = cyb_format::open(&args.output)?;
    written.verify()?;
    let info = written.container().ok_or_else(|| Error::Format {
        file: args.output.clone(),
        offset: 0,
        reason: "the written file does not open as a .model container".into(),
    })?;
    if info.root != root {
        return Err(Error::Format {
            file: args.output.clone(),
            offset: 0,
            reason: "the written header hashes to a different root than the one written".into(),
        });
    }
    println!("{}  {}", info.root_hex(), args.output.display());
    Ok(())
}

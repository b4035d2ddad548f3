//! `cyb-llm import SRC -o OUT.model [--quant [TYPE]] [--keep NAME_PATTERN=TYPE]...`: writes a
//! GGUF file, a Hugging Face directory, a soma directory or an ONNX graph as one `.model`
//! container (docs/model-format.md), checks what it wrote, and prints the container's blake3
//! root. Which type each tensor got is summarized on stderr.

use cyb_format::model_container::{
    write_graph_model, write_model_with, KeepRule, Progress, TensorReport, WriteOptions,
    WriteReport,
};
use cyb_tensor::{DType, Error, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct ImportArgs {
    /// A GGUF file, a Hugging Face model directory, a soma directory (config.toml + weights),
    /// an ONNX file or a `.model` file.
    pub src: PathBuf,
    /// The `.model` file to write.
    #[arg(short, long, value_name = "OUT.model")]
    pub output: PathBuf,
    /// Requantize float matrices (2+ dims) to TYPE (Q4_K when TYPE is left out). Matrices whose
    /// rows are not whole blocks of a K-quant take llama.cpp's fallback (Q4_K -> Q5_0,
    /// Q6_K -> Q8_0, ...); vectors such as norms and biases, and tensors of other types, are
    /// copied as they are. Without --quant every tensor is copied byte for byte.
    #[arg(long, value_name = "TYPE", num_args = 0..=1, default_missing_value = "Q4_K")]
    pub quant: Option<String>,
    /// Store tensors whose name matches the glob NAME_PATTERN (`*`, `?`) as TYPE (F32, F16,
    /// BF16, Q8_0, Q6_K, ...) or as in the source (`keep`), whatever --quant says. Repeatable;
    /// the first matching rule wins; every rule must match a tensor.
    #[arg(long, value_name = "NAME_PATTERN=TYPE")]
    pub keep: Vec<String>,
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
    let keep = args
        .keep
        .iter()
        .map(|s| KeepRule::parse(s))
        .collect::<Result<Vec<_>>>()?;
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
    let opts = WriteOptions { quant, keep };
    let bar = Bar::new();
    let graph = is_onnx(&args.src);
    let report = if graph {
        import_graph(&args.src, &args.output, &opts, &bar)?
    } else {
        let src = cyb_format::open(&args.src)?;
        write_model_with(&src, &args.output, &opts, &mut |p| bar.update(p))?
    };
    bar.finish();
    check_written(&args.output, &report, graph)?;
    summarize(&report.tensors);
    println!(
        "{}  {}",
        cyb_format::model_container::hex_root(&report.root),
        args.output.display()
    );
    Ok(())
}

fn is_onnx(src: &Path) -> bool {
    src.is_file()
        && src
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

/// An ONNX file becomes a graph model: the graph as `cyb_runtime::read_graph` prepares it
/// (folded, with curated ops where equivalent), so the `.model` runs exactly what `infer` runs
/// on the `.onnx`.
fn import_graph(src: &Path, out: &Path, opts: &WriteOptions, bar: &Bar) -> Result<WriteReport> {
    if opts.quant.is_some() || !opts.keep.is_empty() {
        return Err(Error::InvalidArgument {
            op: "import".into(),
            reason: format!(
                "{}: --quant and --keep apply to weight tensors; the constants of an ONNX \
                 graph are stored as they are",
                src.display()
            ),
        });
    }
    let graph = cyb_runtime::read_graph(src)?;
    write_graph_model(&graph, src, out, &mut |p| bar.update(p))
}

/// Reads back what was written: the header parses, every tensor hashes to its index entry, and
/// the header hashes to the root the writer computed.
fn check_written(out: &Path, report: &WriteReport, graph: bool) -> Result<()> {
    let root = if graph {
        let g = cyb_format::model_container::open_graph(out)?;
        g.info.verify()?;
        g.info.root
    } else {
        let written = cyb_format::open(out)?;
        let info = written.container().ok_or_else(|| Error::Format {
            file: out.to_path_buf(),
            offset: 0,
            reason: "the written file does not open as a .model container".into(),
        })?;
        info.verify()?;
        info.root
    };
    if root != report.root {
        return Err(root_mismatch(out));
    }
    Ok(())
}

fn root_mismatch(out: &Path) -> Error {
    Error::Format {
        file: out.to_path_buf(),
        offset: 0,
        reason: "the written header hashes to a different root than the one written".into(),
    }
}

/// One line per (source type -> stored type) with its count, then one per tensor a `--keep`
/// rule decided, on stderr (stdout holds only the root line).
fn summarize(tensors: &[TensorReport]) {
    let mut groups: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for t in tensors {
        if t.rule.is_none() {
            *groups.entry((&t.from, &t.to)).or_default() += 1;
        }
    }
    for ((from, to), n) in &groups {
        if from == to {
            eprintln!("{n:>5} tensor(s) {from}, copied as they are");
        } else {
            eprintln!("{n:>5} tensor(s) {from} -> {to}");
        }
    }
    for t in tensors {
        if let Some(rule) = &t.rule {
            eprintln!("      {} {} -> {} (--keep {rule})", t.name, t.from, t.to);
        }
    }
}

/// A progress bar over source bytes on stderr, drawn only when stderr is a terminal.
struct Bar(ProgressBar);

impl Bar {
    fn new() -> Bar {
        if !std::io::stderr().is_terminal() {
            return Bar(ProgressBar::hidden());
        }
        let bar = ProgressBar::new(0);
        let style = ProgressStyle::with_template("{bar:30} {bytes}/{total_bytes} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Bar(bar)
    }

    fn update(&self, p: Progress<'_>) {
        // indicatif counts one quantity; tensors done are shown through the message.
        self.0.set_length(p.total_bytes);
        self.0.set_position(p.done_bytes);
        self.0
            .set_message(format!("{}/{} tensors {}", p.done, p.count, p.name));
    }

    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

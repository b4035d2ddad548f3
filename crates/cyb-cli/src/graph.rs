//! `cyb-llm graph MODEL`: prints a model's graph in its text form (docs/graph-format.md): an
//! ONNX model's imported graph (or a `.model` imported from one), or for a GGUF file / Hugging
//! Face directory of the LlamaStyle family the graph template that `--path graph` runs.

use clap::Args;
use cyb_tensor::Result;
use std::path::PathBuf;

#[derive(Args)]
pub struct GraphArgs {
    /// An ONNX model file (or a `.model` imported from one), or a LlamaStyle GGUF file / Hugging
    /// Face directory.
    pub model: PathBuf,
    /// ONNX: print the graph as imported, before constant folding and dead-node elimination.
    #[arg(long)]
    pub raw: bool,
    /// LlamaStyle: the template with the logits of every token (default: the last token's).
    #[arg(long)]
    pub all_logits: bool,
}

pub fn run(args: GraphArgs) -> Result<()> {
    let is_onnx = args
        .model
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"));
    let g = if is_onnx && args.raw {
        cyb_format::onnx::read_onnx(&args.model)?
    } else if is_onnx {
        cyb_runtime::read_graph(&args.model)?
    } else if let Ok(m) = cyb_format::model_container::open_graph(&args.model) {
        // A .model imported from ONNX; other files are architecture templates' business.
        m.graph
    } else {
        cyb_runtime::Model::template_graph(&args.model, !args.all_logits)?
    };
    print!("{}", cyb_graph::write_graph(&g)?);
    Ok(())
}

//! `cyb-llm graph MODEL.onnx`: prints the model's graph in its text form (docs/graph-format.md).

use clap::Args;
use cyb_tensor::Result;
use std::path::PathBuf;

#[derive(Args)]
pub struct GraphArgs {
    /// An ONNX model file.
    pub model: PathBuf,
    /// Print the graph as imported, before constant folding and dead-node elimination.
    #[arg(long)]
    pub raw: bool,
}

pub fn run(args: GraphArgs) -> Result<()> {
    let g = if args.raw {
        cyb_format::onnx::read_onnx(&args.model)?
    } else {
        cyb_format::onnx::load_onnx(&args.model)?
    };
    print!("{}", cyb_graph::write_graph(&g)?);
    Ok(())
}

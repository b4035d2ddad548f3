//! `cyb-llm perplexity MODEL FILE [--ctx N]`: perplexity over a text file, computed like
//! llama.cpp's `llama-perplexity` (see `cyb_runtime::PerplexityReport`).

use crate::session_args::EngineArgs;
use cyb_tensor::{Error, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct PerplexityArgs {
    /// A GGUF file or Hugging Face directory.
    pub model: String,
    /// The text file.
    pub file: PathBuf,
    /// Backend and path; `--ctx` is the chunk size (default 512, like llama-perplexity).
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: PerplexityArgs) -> Result<()> {
    let model = args.engine.load(Some(&args.model))?;
    let text = std::fs::read_to_string(&args.file).map_err(|source| Error::Io {
        path: args.file.clone(),
        source,
    })?;
    let tokens = model
        .tokenizer()
        .encode(&text, model.tokenizer().add_bos())?;
    let ctx = args.engine.ctx.unwrap_or(512);
    eprintln!(
        "{} tokens, {} chunks of {ctx}",
        tokens.len(),
        tokens.len() / ctx
    );
    let report = model.perplexity(&tokens, ctx, &mut |done, total, ppl| {
        eprintln!("[{done}/{total}] {ppl:.4}");
    })?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "perplexity": report.perplexity,
                "ctx": report.ctx,
                "chunks": report.chunks,
                "scored_tokens": report.scored_tokens,
                "running": report.running,
            })
        );
    } else {
        println!(
            "PPL = {:.4} ({} chunks of {ctx}, {} tokens scored)",
            report.perplexity, report.chunks, report.scored_tokens
        );
    }
    Ok(())
}

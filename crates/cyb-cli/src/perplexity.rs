//! `cyb-llm perplexity MODEL FILE [--ctx N]`: perplexity over a text file, computed like
//! llama.cpp's `llama-perplexity` (see `cyb_runtime::PerplexityReport`); with
//! `--kl-divergence-base BASE` it stores every scored position's log-probabilities, and with
//! `--kl-divergence` as well it compares this run with them (`cyb_runtime::KldComparison`).

use crate::session_args::EngineArgs;
use cyb_tensor::{Error, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct PerplexityArgs {
    /// A GGUF file or Hugging Face directory.
    pub model: String,
    /// The text file (with `--kl-divergence` it may be left out: the base file holds the
    /// tokens; given, it must tokenize to them).
    #[arg(required_unless_present = "kl_divergence")]
    pub file: Option<PathBuf>,
    /// Backend and path; `--ctx` is the chunk size (default 512, like llama-perplexity; with
    /// `--kl-divergence`, the base file's).
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Store every scored position's log-probabilities in this file (a base run; the layout of
    /// llama-perplexity's `--kl-divergence-base`), or, with `--kl-divergence`, read them from
    /// it (a file written by either tool).
    #[arg(long, value_name = "FILE")]
    pub kl_divergence_base: Option<PathBuf>,
    /// Compare this run with the base file: KL divergence, same top token, perplexities.
    #[arg(long, requires = "kl_divergence_base")]
    pub kl_divergence: bool,
}

pub fn run(args: PerplexityArgs) -> Result<()> {
    let model = args.engine.load(Some(&args.model))?;
    let vocab = model.config().vocab_size;
    // clap makes the text required unless --kl-divergence reads the tokens from the base.
    let text_tokens = match &args.file {
        Some(file) => {
            let text = std::fs::read_to_string(file).map_err(|source| Error::Io {
                path: file.clone(),
                source,
            })?;
            Some(
                model
                    .tokenizer()
                    .encode(&text, model.tokenizer().add_bos())?,
            )
        }
        None => None,
    };
    let mut base = None;
    let mut compare = None;
    let (tokens, ctx) = match (&args.kl_divergence_base, args.kl_divergence) {
        (Some(path), true) => {
            let c = cyb_runtime::KldComparison::open(path)?;
            c.check_vocab(vocab)?;
            let ctx = c.ctx();
            if let Some(asked) = args.engine.ctx.filter(|&a| a != ctx) {
                return Err(Error::invalid(
                    "perplexity",
                    format!(
                        "--ctx {asked}, but {} was written with {ctx}",
                        path.display()
                    ),
                ));
            }
            let tokens = c.tokens().to_vec();
            if let Some(text) = &text_tokens {
                let differ = (0..tokens.len()).find(|&i| text.get(i) != Some(&tokens[i]));
                if let Some(i) = differ {
                    return Err(Error::invalid(
                        "perplexity",
                        format!(
                            "token {i} of the text is {:?}, {} holds {}: not the text (or tokenizer) of the base run",
                            text.get(i),
                            path.display(),
                            tokens[i]
                        ),
                    ));
                }
            }
            compare = Some(c);
            (tokens, ctx)
        }
        (path, _) => {
            let ctx = args.engine.ctx.unwrap_or(512);
            let tokens = text_tokens.unwrap_or_default();
            // The whole chunks the run scores (none: the run itself says why).
            let whole = tokens.len() / ctx.max(1) * ctx;
            if let Some(path) = path.as_ref().filter(|_| ctx >= 4 && whole > 0) {
                let chunks = &tokens[..whole];
                base = Some(cyb_runtime::KldBaseWriter::create(
                    path, vocab, ctx, chunks,
                )?);
            }
            (tokens, ctx)
        }
    };
    eprintln!(
        "{} tokens, {} chunks of {ctx}",
        tokens.len(),
        tokens.len() / ctx.max(1)
    );
    let report = model.perplexity_rows(
        &tokens,
        ctx,
        &mut |done, total, ppl| {
            eprintln!("[{done}/{total}] {ppl:.4}");
        },
        &mut |logits, next| {
            if let Some(w) = base.as_mut() {
                w.push(logits)?;
            }
            if let Some(c) = compare.as_mut() {
                c.push(logits, next)?;
            }
            Ok(())
        },
    )?;
    if let Some(w) = base {
        let rows = w.finish()?;
        eprintln!(
            "stored the log-probabilities of {rows} positions in {}",
            args.kl_divergence_base
                .as_ref()
                .map_or(String::new(), |p| p.display().to_string())
        );
    }
    let kld = compare.map(|c| c.finish()).transpose()?;
    if args.json {
        let mut v = serde_json::json!({
            "perplexity": report.perplexity,
            "ctx": report.ctx,
            "chunks": report.chunks,
            "scored_tokens": report.scored_tokens,
            "running": report.running,
        });
        if let Some(k) = &kld {
            v["kl_divergence"] = serde_json::json!({
                "positions": k.positions,
                "mean": k.mean_kld,
                "mean_stderr": k.mean_kld_stderr,
                "median": k.median_kld,
                "p99": k.p99_kld,
                "max": k.max_kld,
                "same_top": k.same_top,
                "rms_dp": k.rms_dp,
                "base_perplexity": k.base_perplexity,
                "perplexity": k.perplexity,
            });
        }
        println!("{v}");
    } else {
        println!(
            "PPL = {:.4} ({} chunks of {ctx}, {} tokens scored)",
            report.perplexity, report.chunks, report.scored_tokens
        );
        if let Some(k) = &kld {
            println!(
                "base PPL = {:.4}, ln(PPL / base PPL) = {:+.6}",
                k.base_perplexity,
                (k.perplexity / k.base_perplexity).ln()
            );
            println!(
                "KL divergence: mean {:.6} ± {:.6}, median {:.6}, 99% {:.6}, max {:.6} ({} positions)",
                k.mean_kld, k.mean_kld_stderr, k.median_kld, k.p99_kld, k.max_kld, k.positions
            );
            println!(
                "same top token: {:.3}%, RMS Δp of the next token: {:.4}%",
                100.0 * k.same_top,
                100.0 * k.rms_dp
            );
        }
    }
    Ok(())
}

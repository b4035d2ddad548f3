//! `cyb-llm`: the command-line face of the runtime.
// mimalloc keeps freed pages for reuse: the glibc allocator returns large activation buffers to
// the OS and consolidates its bins on the way, which measured 10–16% of a small model's decode
// step and ~5% of an encoder pass (docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod backends;
mod bench;
mod bench_graph;
mod chat;
mod classify;
mod classify_image;
mod detect;
mod embed;
mod fetch;
mod fill_mask;
mod graph;
mod import;
mod infer;
mod inspect;
mod models;
mod npy;
mod perplexity;
mod run;
mod serve;
mod session_args;
mod stream;
mod transcribe;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "cyb-llm",
    version,
    about = "Load a model in any common format and run it on any hardware"
)]
struct Cli {
    /// Log dispatch decisions and fallbacks (and more with RUST_LOG).
    #[arg(long, short, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Answer one prompt, streamed (default model: SmolLM2-135M-Instruct Q4_1).
    Run(run::RunArgs),
    /// Interactive multi-turn chat that keeps the KV cache across turns.
    Chat(chat::ChatArgs),
    /// Perplexity of a model over a text file (comparable with llama-perplexity).
    Perplexity(perplexity::PerplexityArgs),
    /// Print a model file's format, architecture, config, metadata and tensors.
    Inspect(inspect::InspectArgs),
    /// Write a GGUF file or Hugging Face directory as one verified `.model` file.
    Import(import::ImportArgs),
    /// List the backends this build knows and whether they can run here.
    Backends(backends::BackendsArgs),
    /// Prompt (pp) and generation (tg) tokens/s, measured like llama-bench.
    Bench(bench::BenchArgs),
    /// Embed texts with an encoder model; prints a JSON array, one vector per text.
    Embed(embed::EmbedArgs),
    /// Label scores of texts from a sequence-classification model (JSON).
    Classify(classify::ClassifyArgs),
    /// The most likely tokens at each mask token ([MASK], <mask>) of texts (masked-LM model).
    FillMask(fill_mask::FillMaskArgs),
    /// Print an ONNX model's graph in the text form of docs/graph-format.md.
    Graph(graph::GraphArgs),
    /// Run an ONNX model on .npy inputs; writes one .npy per graph output.
    Infer(infer::InferArgs),
    /// OpenAI-compatible HTTP server (chat and text completions, streaming, several models).
    Serve(serve::ServeArgs),
    /// Download a model repository from a Hugging Face-compatible hub into the hub cache.
    Fetch(fetch::FetchArgs),
    /// List, describe or remove the models in the hub cache.
    Models(models::ModelsArgs),
    /// Speech to text with a Whisper model (txt, srt, vtt, json, verbose_json).
    Transcribe(transcribe::TranscribeArgs),
    /// Labels of images: a classification head, or zero-shot with CLIP/SigLIP (JSON).
    ClassifyImage(classify_image::ClassifyImageArgs),
    /// Objects in images from a YOLO detector (boxes, labels, scores; JSON; drawn boxes).
    Detect(detect::DetectArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_)) {
        restore_sigpipe();
    }
    let level = if cli.verbose { "debug" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Perplexity(args) => perplexity::run(args),
        // A cached hub repo id (`org/name[@rev]`) stands for its snapshot wherever a model goes.
        Command::Inspect(mut args) => {
            fetch::resolve_in_place(&mut args.path).and_then(|()| inspect::run(args))
        }
        Command::Import(mut args) => {
            fetch::resolve_in_place(&mut args.src).and_then(|()| import::run(args))
        }
        Command::Backends(args) => backends::run(args),
        Command::Bench(mut args) => args
            .models
            .iter_mut()
            .try_for_each(fetch::resolve_in_place)
            .and_then(|()| bench::run(args)),
        Command::Serve(args) => serve::run(args),
        Command::Transcribe(args) => transcribe::run(args),
        Command::Detect(args) => detect::run(args),
        Command::ClassifyImage(mut args) => {
            fetch::resolve_in_place(&mut args.model).and_then(|()| classify_image::run(args))
        }
        Command::Graph(args) => graph::run(args),
        Command::Infer(args) => infer::run(args),
        Command::Embed(args) => embed::run(args),
        Command::Classify(args) => classify::run(args),
        Command::FillMask(args) => fill_mask::run(args),
        Command::Fetch(args) => fetch::run(args),
        Command::Models(args) => models::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Rust starts programs with SIGPIPE ignored, so printing into a closed pipe
/// (`cyb-llm embed ... | head -c 10`) is an error that `println!` turns into a panic. A command
/// that prints ends quietly there instead, as Unix tools do, by taking the signal's default
/// action back. The server keeps it ignored: a client that hangs up is an error on that
/// connection alone.
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called once at the start of main, before any other thread exists; SIG_DFL is a
    // valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

//! `cyb-llm serve [MODEL...]`: the OpenAI-compatible HTTP server (see the cyb-server crate).

use crate::session_args::EngineArgs;
use cyb_runtime::{ensure_default_model, Runtime};
use cyb_server::{ServedModel, ServerConfig};
use cyb_tensor::{Error, Result};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// GGUF files or Hugging Face directories (text generators, encoders, Whisper speech
    /// recognizers); clients name each by its file stem (or `--alias`). None: the default
    /// model (SmolLM2-135M-Instruct Q4_1).
    pub models: Vec<String>,
    /// The id of each model, in order (repeatable); default: the file stem (`org/name` for a
    /// model from the hub cache).
    #[arg(long)]
    pub alias: Vec<String>,
    /// Address to listen on (keep the loopback address unless the server must be reachable).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on; 0 picks a free one (printed on start).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Generations running at once.
    #[arg(long, default_value_t = 2)]
    pub parallel: usize,
    /// Requests that may wait for a free slot; beyond that the server answers 429.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Largest request body in bytes (413 above), except audio uploads.
    #[arg(long, default_value_t = 2 << 20)]
    pub max_body_bytes: usize,
    /// Largest audio upload in bytes (/v1/audio/transcriptions and translations; 413 above).
    #[arg(long, default_value_t = 100 << 20)]
    pub max_audio_bytes: usize,
    /// Largest max_tokens a request may ask for (400 above); also the chat default.
    #[arg(long, default_value_t = 4096)]
    pub max_tokens_limit: usize,
    /// Tokens in one shared forward step: generations of a model running at once advance
    /// together (continuous batching; prompts are fed in chunks between decode steps). 0 runs
    /// each generation on its own.
    #[arg(long, default_value_t = 512)]
    pub batch_tokens: usize,
    /// Results that do not depend on which requests share a step: the cpu backend computes
    /// each row of a batch as it would alone (float weights decode somewhat slower), so a
    /// request with a seed gets the same text and logprobs under any load.
    #[arg(long)]
    pub batch_invariant: bool,
    /// A chat that outgrows the context drops its oldest turns (keeping the system messages
    /// and the last turn) until it fits with room for the answer, instead of a 400.
    #[arg(long)]
    pub context_shift: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn run(args: ServeArgs) -> Result<()> {
    if args.alias.len() > args.models.len().max(1) {
        return Err(Error::invalid("serve", "more --alias values than models"));
    }
    let mut options = args.engine.runtime_options()?;
    if args.batch_invariant {
        if let Some(b) = options.backend.as_deref().filter(|b| *b != "cpu") {
            return Err(Error::invalid(
                "--batch-invariant",
                format!("the cpu backend has this mode; the {b} backend does not"),
            ));
        }
        if let Some(cpu) = options.cpu.as_mut() {
            cpu.batch_invariant = true;
        }
    }
    let rt = Runtime::new(options)?;
    let paths: Vec<PathBuf> = if args.models.is_empty() {
        vec![ensure_default_model(&mut |msg| eprintln!("{msg}"))?]
    } else {
        args.models
            .iter()
            .map(crate::fetch::model_path)
            .collect::<Result<_>>()?
    };
    let mut served = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let id = match args.alias.get(i) {
            Some(a) => a.clone(),
            None => cyb_hub::cached_repo_of(path).unwrap_or_else(|| model_id(path)),
        };
        let model = rt.load(path)?;
        eprintln!(
            "loaded {} as {id:?} in {:.0} ms",
            path.display(),
            model.load_ms()
        );
        served.push(ServedModel { id, model });
    }
    let config = ServerConfig {
        parallel: args.parallel.max(1),
        batch_tokens: args.batch_tokens,
        context_shift: args.context_shift,
        queue: args.queue,
        ctx: args.engine.ctx,
        allow_ctx_overflow: args.engine.ctx_overflow == "allow",
        max_body_bytes: args.max_body_bytes,
        max_audio_bytes: args.max_audio_bytes,
        max_tokens_limit: args.max_tokens_limit.max(1),
    };
    cyb_server::run_blocking(served, config, &args.host, args.port, |addr| {
        eprintln!("listening on http://{addr}");
    })
    .map_err(|reason| Error::invalid("serve", reason))
}

/// The file stem (`SmolLM2-135M-Instruct.Q4_1`), or the directory name of a Hugging Face
/// directory.
fn model_id(path: &Path) -> String {
    let name = if path.is_dir() {
        path.file_name()
    } else {
        path.file_stem()
    };
    name.map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

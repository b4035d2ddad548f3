//! `cyb-llm serve [MODEL...]`: the OpenAI-compatible HTTP server (see the cyb-server crate).

use crate::session_args::{DraftArgs, EngineArgs};
use cyb_runtime::{ensure_default_model, Runtime};
use cyb_server::{ModelLoader, ServedModel, ServerConfig};
use cyb_tensor::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// GGUF files or Hugging Face directories (text generators, encoders, Whisper speech
    /// recognizers), YOLO detectors (`.onnx` exports, answering /v1/detections) and image
    /// models (ViT/CLIP/SigLIP/DINOv2 directories: /v1/classifications, /v1/embeddings); clients
    /// name each by its file stem (or `--alias`). None: the default model
    /// (SmolLM2-135M-Instruct Q4_1).
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
    /// Largest body of a request carrying images in bytes (/v1/detections; 413 above).
    #[arg(long, default_value_t = 40 << 20)]
    pub max_image_bytes: usize,
    /// Lets chat messages name images as `file://` URLs of files under DIR (refused
    /// otherwise; data URLs always work).
    #[arg(long, value_name = "DIR")]
    pub allow_image_dir: Option<std::path::PathBuf>,
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
    /// Unload a model nobody used for this many seconds (it stays listed; the next request
    /// that names it loads it again).
    #[arg(long, value_name = "SECS")]
    pub idle_unload: Option<f64>,
    /// Model files loaded at once may take at most this much (bytes, or with a K, M, G or T
    /// suffix): loading one more unloads the least recently used idle models first.
    #[arg(long, value_name = "SIZE")]
    pub memory_budget: Option<String>,
    /// Answer POST /v1/models/load and /v1/models/unload: clients may load any model file
    /// this server can read (or fetch from the hub), so only for trusted clients.
    #[arg(long)]
    pub model_admin: bool,
    /// Folder for POST /slots/{id}?action=save|restore session files (off without it).
    #[arg(long, value_name = "DIR")]
    pub slot_save_path: Option<PathBuf>,
    #[command(flatten)]
    pub draft: DraftArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn run(args: ServeArgs) -> Result<()> {
    if args.alias.len() > args.models.len().max(1) {
        return Err(Error::invalid("serve", "more --alias values than models"));
    }
    let mut options = args.engine.runtime_options()?;
    if args.batch_invariant {
        // The mode is the cpu backend's: auto means cpu here.
        if options.backend.as_deref() == Some("auto") {
            options.backend = Some("cpu".into());
        }
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
    let rt = Arc::new(Runtime::new(options)?);
    let paths: Vec<PathBuf> = if args.models.is_empty() {
        vec![ensure_default_model(&mut |msg| eprintln!("{msg}"))?]
    } else {
        args.models
            .iter()
            .map(crate::fetch::model_path)
            .collect::<Result<_>>()?
    };
    // --lora / --lora-scaled apply to the models loaded at start (not to ones loaded later
    // through the admin API).
    let loras = args.engine.loras()?;
    let mut served = Vec::new();
    let mut vision = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let id = match args.alias.get(i) {
            Some(a) => a.clone(),
            None => cyb_hub::cached_repo_of(path).unwrap_or_else(|| model_id(path)),
        };
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
        {
            let detector = Arc::new(rt.load_detector(path)?);
            eprintln!("loaded {} as {id:?} (detector)", path.display());
            let net = cyb_server::VisionNet::Detector(detector);
            vision.push(cyb_server::ServedVision { id, net });
            continue;
        }
        if is_image_model_dir(path) {
            let kernel = cyb_media::image::ResizeKernel::Pillow;
            let model = Arc::new(rt.load_image_model(path, kernel)?);
            eprintln!("loaded {} as {id:?} (image model)", path.display());
            let net = cyb_server::VisionNet::Image(model);
            vision.push(cyb_server::ServedVision { id, net });
            continue;
        }
        let model = rt.load_with_lora(path, &loras)?;
        eprintln!(
            "loaded {} as {id:?} in {:.0} ms",
            path.display(),
            model.load_ms()
        );
        let source = Some(path.display().to_string());
        served.push(ServedModel { id, model, source });
    }
    if let Some(dir) = &args.slot_save_path {
        if !dir.is_dir() {
            return Err(Error::invalid(
                "--slot-save-path",
                format!("{} is not a folder", dir.display()),
            ));
        }
    }
    let idle_unload = match args.idle_unload {
        Some(s) if !(s.is_finite() && s > 0.0 && s < 1e9) => {
            return Err(Error::invalid(
                "--idle-unload",
                format!("{s} is not a number of seconds above 0"),
            ))
        }
        s => s.map(std::time::Duration::from_secs_f64),
    };
    let memory_budget = args
        .memory_budget
        .as_deref()
        .map(|s| {
            parse_size(s).ok_or_else(|| {
                Error::invalid(
                    "--memory-budget",
                    format!("{s:?} is not a size such as 8G or 512M"),
                )
            })
        })
        .transpose()?;
    let verify = args.engine.verify;
    let loader_rt = rt.clone();
    let loader: ModelLoader = Arc::new(move |source: &str| {
        let load = || -> Result<ServedModel> {
            let path = crate::fetch::model_path(source)?;
            if verify {
                cyb_format::open(&path)?.verify()?;
            }
            let model = loader_rt.load(&path)?;
            eprintln!("loaded {} in {:.0} ms", path.display(), model.load_ms());
            Ok(ServedModel {
                id: cyb_hub::cached_repo_of(&path).unwrap_or_else(|| model_id(&path)),
                model,
                source: Some(path.display().to_string()),
            })
        };
        load().map_err(|e| e.to_string())
    });
    let draft = args
        .draft
        .load(&args.engine, &rt)?
        .map(|d| (d, args.draft.draft_max));
    let config = ServerConfig {
        draft,
        parallel: args.parallel.max(1),
        batch_tokens: args.batch_tokens,
        context_shift: args.context_shift,
        queue: args.queue,
        ctx: args.engine.ctx,
        allow_ctx_overflow: args.engine.ctx_overflow == "allow",
        max_body_bytes: args.max_body_bytes,
        max_audio_bytes: args.max_audio_bytes,
        max_tokens_limit: args.max_tokens_limit.max(1),
        idle_unload,
        memory_budget,
        model_admin: args.model_admin,
        slot_save_path: args.slot_save_path.clone(),
        vision,
        max_image_bytes: args.max_image_bytes,
        image_dir: args.allow_image_dir.clone(),
    };
    cyb_server::run_blocking(
        served,
        config,
        Some(loader),
        &args.host,
        args.port,
        |addr| {
            eprintln!("listening on http://{addr}");
        },
    )
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

/// A size in bytes: digits with an optional K, M, G or T suffix (powers of 1024; a trailing
/// `B` or `iB` is allowed).
fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], 10),
        'm' | 'M' => (&t[..t.len() - 1], 20),
        'g' | 'G' => (&t[..t.len() - 1], 30),
        't' | 'T' => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: f64 = digits.trim().parse().ok()?;
    let bytes = n * (1u64 << shift) as f64;
    (n.is_finite() && n > 0.0 && bytes < 1.8e19).then_some(bytes as u64)
}

/// A Hugging Face directory whose `config.json` names a vision model type.
fn is_image_model_dir(path: &std::path::Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path.join("config.json")) else {
        return false;
    };
    serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("model_type")?.as_str().map(String::from))
        .is_some_and(|t| cyb_runtime::vision::is_vision_model_type(&t))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("8G"), Some(8 << 30));
        assert_eq!(parse_size("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_size("300m"), Some(300 << 20));
        assert_eq!(parse_size("2TB"), Some(2 << 40));
        for bad in ["", "G", "-1G", "0", "nanM", "1e30T", "12X"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }
}

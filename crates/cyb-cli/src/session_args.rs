//! Flags shared by the commands that load and run a model (`run`, `chat`, `perplexity`).

use cyb_runtime::sampling::grammar::{Grammar, GrammarCompiler};
use cyb_runtime::{
    ensure_default_model, Drafter, ExecPath, Model, Runtime, RuntimeOptions, SamplingParams,
    TokenConstraint,
};
use cyb_tensor::{Error, Result};
use std::path::{Path, PathBuf};

/// Which backend and execution path, and the session size.
#[derive(clap::Args, Clone, Debug)]
pub struct EngineArgs {
    /// Backend: auto (a discrete or integrated GPU when there is one, else cpu; `cyb-llm
    /// backends` says what it picks here), cpu, wgpu or reference; ops a backend lacks fall
    /// back to the cpu kernels, then the CPU reference.
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Execution path: auto, curated or graph.
    #[arg(long, default_value = "auto")]
    pub path: String,
    /// Threads of the cpu backend (default: every core, or `CYB_THREADS`).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Context size of the session in tokens (default: the model's, capped at 4096).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// A --ctx past the context the model was trained for: refuse, or allow (positions the
    /// model never saw; output degrades).
    #[arg(long, default_value = "refuse", value_parser = ["refuse", "allow"])]
    pub ctx_overflow: String,
    /// Check every tensor of a `.model` file against its blake3 before loading it.
    #[arg(long)]
    pub verify: bool,
    /// A LoRA adapter applied at run time, unmerged (a llama.cpp GGUF adapter or a PEFT
    /// directory); repeat for several.
    #[arg(long = "lora", value_name = "FILE")]
    pub lora: Vec<PathBuf>,
    /// A LoRA adapter with the scale it is applied at: `--lora-scaled FILE SCALE`; repeat
    /// for several.
    #[arg(long = "lora-scaled", num_args = 2, value_names = ["FILE", "SCALE"])]
    pub lora_scaled: Vec<String>,
}

impl EngineArgs {
    /// A generation session of `--ctx` tokens (default: the model's context, capped at 4096),
    /// past the trained context only with `--ctx-overflow allow`.
    pub fn generator(&self, model: &cyb_runtime::Model) -> Result<cyb_runtime::Generator> {
        match (self.ctx, self.ctx_overflow.as_str()) {
            (Some(ctx), "allow") => model.generator_beyond_context(ctx),
            (ctx, _) => model.generator(ctx),
        }
    }

    /// The runtime these flags describe: the backend, the path, and the cpu backend's options
    /// (its environment variables, then `--threads`).
    pub fn runtime_options(&self) -> Result<RuntimeOptions> {
        let mut cpu = cyb_runtime::CpuOptions::from_env()?;
        if let Some(t) = self.threads {
            if t == 0 {
                return Err(Error::invalid("--threads", "must be at least 1"));
            }
            cpu.threads = Some(t);
        }
        Ok(RuntimeOptions {
            backend: Some(self.backend.clone()),
            path: ExecPath::parse(&self.path)?,
            cpu: Some(cpu),
            ..RuntimeOptions::default()
        })
    }

    /// Builds the runtime and loads `model` (or the default model when `None`).
    pub fn load(&self, model: Option<&str>) -> Result<Model> {
        self.load_in(&Runtime::new(self.runtime_options()?)?, model)
    }

    /// Loads `model` (or the default model when `None`) in `rt`.
    pub fn load_in(&self, rt: &Runtime, model: Option<&str>) -> Result<Model> {
        let path = match model {
            Some(m) => crate::fetch::model_path(m)?,
            None => ensure_default_model(&mut |msg| eprintln!("{msg}"))?,
        };
        if self.verify {
            cyb_format::open(&path)?.verify()?;
        }
        rt.load_with_lora(path, &self.loras()?)
    }

    /// The adapters of `--lora` (scale 1) and `--lora-scaled`, in that order.
    pub fn loras(&self) -> Result<Vec<cyb_runtime::Lora>> {
        let mut out: Vec<cyb_runtime::Lora> = self
            .lora
            .iter()
            .map(|p| cyb_runtime::Lora {
                path: p.clone(),
                scale: 1.0,
            })
            .collect();
        for pair in self.lora_scaled.chunks(2) {
            let [file, scale] = pair else {
                return Err(Error::invalid("--lora-scaled", "takes FILE SCALE"));
            };
            let scale: f32 = scale.parse().map_err(|_| {
                Error::invalid(
                    "--lora-scaled",
                    format!("scale {scale:?} of {file} is not a number"),
                )
            })?;
            out.push(cyb_runtime::Lora {
                path: PathBuf::from(file),
                scale,
            });
        }
        Ok(out)
    }
}

/// Speculative decoding: a smaller model of the same vocabulary proposes tokens.
#[derive(clap::Args, Clone, Debug)]
pub struct DraftArgs {
    /// A draft model (GGUF or Hugging Face directory, same vocabulary): it proposes tokens
    /// that the model checks several at a time (speculative decoding; the output follows the
    /// model's own sampling).
    #[arg(long, alias = "model-draft", conflicts_with = "draft_lookup")]
    pub draft: Option<String>,
    /// Propose tokens by prompt lookup instead of a draft model: the tokens that followed the
    /// last few tokens where they occurred before in the prompt or the answer (gains where
    /// the answer repeats its input: edits, quotes, extraction).
    #[arg(long)]
    pub draft_lookup: bool,
    /// Tokens the draft proposes per step.
    #[arg(long, default_value_t = 8)]
    pub draft_max: usize,
}

impl DraftArgs {
    /// Loads the draft into `session` if one is named, in the model's runtime `rt` (one
    /// backend and thread pool for both), or turns prompt lookup on.
    pub fn apply(
        &self,
        engine: &EngineArgs,
        rt: &Runtime,
        session: &mut cyb_runtime::Generator,
    ) -> Result<()> {
        match self.load(engine, rt)? {
            Some(drafter) => drafter.apply(session, self.draft_max),
            None => Ok(()),
        }
    }

    /// What proposes tokens: the draft model (loaded in `rt`), prompt lookup, or nothing.
    pub fn load(&self, engine: &EngineArgs, rt: &Runtime) -> Result<Option<Drafter>> {
        if self.draft_lookup {
            return Ok(Some(Drafter::Lookup));
        }
        match &self.draft {
            Some(draft) => Ok(Some(Drafter::Model(engine.load_in(rt, Some(draft))?))),
            None => Ok(None),
        }
    }
}

/// Sampling flags, named like llama.cpp's.
#[derive(clap::Args, Clone, Debug)]
pub struct SamplingArgs {
    /// Temperature; 0 is greedy.
    #[arg(long, alias = "temperature", default_value_t = 0.8)]
    pub temp: f32,
    /// Keep the k most likely tokens (0: off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Nucleus sampling threshold (1: off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens below min_p × the top probability (0: off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1: off).
    #[arg(long, alias = "repetition-penalty", default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Presence penalty (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    /// Frequency penalty (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// How many recent tokens the penalties look at.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Random seed (same seed, same text); default: random.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Most tokens to generate.
    #[arg(short = 'n', long, alias = "max-tokens", default_value_t = 512)]
    pub n_predict: usize,
    /// Stop before this string (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Keep generating past end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            penalty_last_n: self.repeat_last_n,
            seed: self.seed,
            max_tokens: Some(self.n_predict),
            stop: self.stop.clone(),
            ignore_eos: self.ignore_eos,
        }
    }
}

/// Structured output: the answer must follow one grammar.
#[derive(clap::Args, Clone, Debug, Default)]
#[group(multiple = false)]
pub struct GrammarArgs {
    /// The answer is JSON valid against the JSON schema in FILE.
    #[arg(long, value_name = "FILE")]
    pub json_schema: Option<PathBuf>,
    /// The answer follows the Lark grammar in FILE (llguidance's dialect, `start: ...`).
    #[arg(long, value_name = "FILE")]
    pub grammar: Option<PathBuf>,
    /// The whole answer matches this regular expression.
    #[arg(long, value_name = "PATTERN")]
    pub regex: Option<String>,
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

impl GrammarArgs {
    pub fn grammar(&self) -> Result<Option<Grammar>> {
        if let Some(path) = &self.json_schema {
            let schema = serde_json::from_str(&read(path)?).map_err(|e| {
                Error::invalid(
                    "--json-schema",
                    format!("{} is not JSON: {e}", path.display()),
                )
            })?;
            return Ok(Some(Grammar::JsonSchema(schema)));
        }
        if let Some(path) = &self.grammar {
            return Ok(Some(Grammar::Lark(read(path)?)));
        }
        Ok(self.regex.clone().map(Grammar::Regex))
    }

    /// The constraint for `model`, when a grammar was given.
    pub fn constraint(&self, model: &Model) -> Result<Option<Box<dyn TokenConstraint>>> {
        let Some(grammar) = self.grammar()? else {
            return Ok(None);
        };
        let compiled = GrammarCompiler::new(model.tokenizer())?.compile(&grammar)?;
        Ok(Some(Box::new(compiled)))
    }
}

//! `cyb-llm embed MODEL "text"... [--file FILE]`: one vector per input, in input order, printed
//! as a JSON array of arrays on stdout.

use crate::session_args::EngineArgs;
use cyb_runtime::{EmbedInput, EmbedOptions, Pooling};
use cyb_tensor::{Error, Result};

#[derive(clap::Args)]
pub struct EmbedArgs {
    /// An encoder model: a Hugging Face directory (BERT, MiniLM, e5, bge, RoBERTa, ...).
    pub model: String,
    /// Texts to embed (after those of --file).
    pub texts: Vec<String>,
    /// A file with one text per line (empty lines are skipped).
    #[arg(long)]
    pub file: Option<String>,
    /// cls, mean or max (default: the model's sentence-transformers setting, else mean).
    #[arg(long)]
    pub pooling: Option<String>,
    /// Scale each vector to unit length (default: whether the model's pipeline normalizes).
    #[arg(long)]
    pub normalize: bool,
    /// Cut texts longer than the model takes instead of refusing them.
    #[arg(long)]
    pub truncate: bool,
    /// Embed the inputs this many times and report the median sentences/s on stderr (the
    /// vectors are printed once).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn run(args: EmbedArgs) -> Result<()> {
    let mut texts = Vec::new();
    if let Some(f) = &args.file {
        let body = std::fs::read_to_string(f).map_err(|source| Error::Io {
            path: f.into(),
            source,
        })?;
        texts.extend(
            body.lines()
                .filter(|l| !l.trim().is_empty())
                .map(String::from),
        );
    }
    texts.extend(args.texts.iter().cloned());
    if texts.is_empty() {
        return Err(Error::invalid(
            "embed",
            "no text to embed: give texts after the model or --file FILE",
        ));
    }
    let model = args.engine.load(Some(&args.model))?;
    let opts = EmbedOptions {
        pooling: args.pooling.as_deref().map(Pooling::parse).transpose()?,
        normalize: args.normalize.then_some(true),
        truncate: args.truncate,
    };
    let inputs: Vec<EmbedInput> = texts.into_iter().map(EmbedInput::Text).collect();
    let mut times = Vec::with_capacity(args.repeat.max(1));
    let mut out = None;
    for _ in 0..args.repeat.max(1) {
        let t0 = std::time::Instant::now();
        out = Some(model.embed_with(&inputs, &opts)?);
        times.push(t0.elapsed().as_secs_f64());
    }
    let out = out.ok_or_else(|| Error::invalid("embed", "nothing was embedded"))?;
    if args.repeat > 1 {
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        eprintln!(
            "embedded {} inputs ({} tokens) {} times: median {:.1} ms, {:.1} sentences/s",
            inputs.len(),
            out.tokens,
            times.len(),
            median * 1e3,
            inputs.len() as f64 / median
        );
    }
    let json = serde_json::to_string(&out.vectors)
        .map_err(|e| Error::invalid("embed", format!("cannot write JSON: {e}")))?;
    println!("{json}");
    Ok(())
}

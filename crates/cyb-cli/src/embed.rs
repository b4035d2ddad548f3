//! `cyb-llm embed MODEL "text"... [--file FILE]`: one vector per input, in input order, printed
//! as a JSON array of arrays on stdout. With `--image FILE` the model is a vision model (CLIP,
//! SigLIP, DINOv2, ViT directory): the texts go through its text tower (CLIP, SigLIP), then
//! each image gives one vector.

use crate::session_args::EngineArgs;
use cyb_runtime::{EmbedInput, EmbedOptions, Pooling};
use cyb_tensor::{Error, Result};

#[derive(clap::Args)]
pub struct EmbedArgs {
    /// An encoder model: a Hugging Face directory (BERT, MiniLM, e5, bge, RoBERTa, ...).
    pub model: String,
    /// Texts to embed (after those of --file).
    pub texts: Vec<String>,
    /// An image to embed with a vision model (repeatable; after the texts).
    #[arg(long = "image", value_name = "FILE")]
    pub images: Vec<std::path::PathBuf>,
    /// With --image: resize as Pillow does (transformers' PIL backend) or as torch does (its
    /// torchvision backend).
    #[arg(long, default_value = "pillow", value_parser = ["pillow", "torch"])]
    pub resize: String,
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
    if !args.images.is_empty() {
        return embed_images(&args, &texts);
    }
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

/// Texts through a CLIP/SigLIP text tower, then images, one vector each.
fn embed_images(args: &EmbedArgs, texts: &[String]) -> Result<()> {
    let rt = cyb_runtime::Runtime::new(args.engine.runtime_options()?)?;
    let path = crate::fetch::model_path(&args.model)?;
    let model = rt.load_image_model(&path, crate::classify_image::resize_kernel(&args.resize))?;
    let mut vectors = Vec::new();
    if !texts.is_empty() {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        vectors.extend(model.embed_texts(&refs, args.normalize)?);
    }
    let images = args
        .images
        .iter()
        .map(|p| cyb_runtime::vision::load_image(p))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&cyb_media::image::RgbImage> = images.iter().collect();
    let mut times = Vec::with_capacity(args.repeat.max(1));
    for round in 0..args.repeat.max(1) {
        let t0 = std::time::Instant::now();
        for &img in &refs {
            let v = model.embed_images(&[img], args.normalize)?;
            if round == 0 {
                vectors.extend(v);
            }
        }
        times.push(t0.elapsed().as_secs_f64());
    }
    if args.repeat > 1 {
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        eprintln!(
            "embedded {} images {} times: median {:.1} ms ({:.1} ms per image)",
            refs.len(),
            times.len(),
            median * 1e3,
            median * 1e3 / refs.len() as f64
        );
    }
    let json = serde_json::to_string(&vectors)
        .map_err(|e| Error::invalid("embed", format!("cannot write JSON: {e}")))?;
    println!("{json}");
    Ok(())
}

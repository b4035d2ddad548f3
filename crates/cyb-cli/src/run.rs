//! `cyb-llm run [MODEL] "prompt"`: one answer, streamed to stdout; metrics to stderr.

use crate::session_args::{DraftArgs, EngineArgs, GrammarArgs, SamplingArgs};
use crate::stream::{print_metrics, stream_constrained};
use cyb_runtime::ChatMessage;
use cyb_tensor::{Error, Result};

#[derive(clap::Args)]
pub struct RunArgs {
    /// `[MODEL] PROMPT`: a GGUF file or Hugging Face directory, then the prompt. With only a
    /// prompt the default model (SmolLM2-135M-Instruct Q4_1) is used, fetched on first use.
    #[arg(num_args = 1..=2, required = true, value_names = ["MODEL", "PROMPT"])]
    pub args: Vec<String>,
    /// System message (chat models).
    #[arg(long)]
    pub system: Option<String>,
    /// Feed the prompt as it is, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// An image for a vision-language model (repeat for several). With the chat template
    /// the images come before the prompt's text; with --raw the prompt must hold one image
    /// placeholder (such as `<image>`) for each.
    #[arg(long = "image", value_name = "FILE")]
    pub images: Vec<std::path::PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub structured: GrammarArgs,
    #[command(flatten)]
    pub draft: DraftArgs,
}

pub fn run(args: RunArgs) -> Result<()> {
    let (model_path, prompt) = match args.args.as_slice() {
        [p] => (None, p.clone()),
        [m, p] => (Some(m.as_str()), p.clone()),
        _ => return Err(Error::invalid("run", "expected [MODEL] PROMPT")),
    };
    let rt = cyb_runtime::Runtime::new(args.engine.runtime_options()?)?;
    let model = args.engine.load_in(&rt, model_path)?;
    let constraint = args.structured.constraint(&model)?;
    // Without a template the prompt is raw text either way, and raw text gets the BOS the
    // tokenizer adds.
    let raw = args.raw || model.chat_template().is_none();
    let text = if raw {
        if !args.raw {
            eprintln!("note: the model has no chat template; the prompt is fed as raw text");
        }
        match &args.system {
            Some(s) => format!("{s}\n{prompt}"),
            None => prompt,
        }
    } else {
        let mut messages = Vec::new();
        if let Some(s) = &args.system {
            messages.push(ChatMessage::system(s.clone()));
        }
        messages.push(match args.images.len() {
            0 => ChatMessage::user(prompt),
            n => ChatMessage::with_images("user", n, prompt),
        });
        model.render_chat(&messages, true)?
    };
    let images = load_images(&model, &args.images)?;
    let ids = model.prompt_ids(&text, raw)?;
    let mut session = args.engine.generator(&model)?;
    args.draft.apply(&args.engine, &rt, &mut session)?;
    let params = args.sampling.params();
    let (_, metrics) = stream_constrained(&mut session, &ids, &images, params, constraint)?;
    println!();
    print_metrics(&metrics);
    if let Some(m) = rt.dispatcher().primary().device_memory() {
        tracing::info!(
            current_mib = m.current >> 20,
            peak_mib = m.peak >> 20,
            "GPU memory of the {} backend",
            rt.backend_choice().name
        );
    }
    Ok(())
}

/// Decodes `paths` for `model`, which must take images when there are any.
pub fn load_images(
    model: &cyb_runtime::Model,
    paths: &[std::path::PathBuf],
) -> Result<Vec<cyb_media::image::RgbImage>> {
    if !paths.is_empty() && !model.takes_images() {
        return Err(Error::invalid(
            "image",
            format!(
                "{} is a text-only model; --image needs a vision-language model",
                model.path().display()
            ),
        ));
    }
    paths
        .iter()
        .map(|p| cyb_runtime::vision::load_image(p))
        .collect()
}

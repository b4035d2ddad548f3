//! `cyb-llm classify-image MODEL IMAGE...`: the labels of each image as a JSON array (one object
//! per image, in order): a classification head's top `--top-k` (ViT, DINOv2
//! `*ForImageClassification`), or with `--labels a,b,c` zero-shot scores from CLIP (softmax over
//! the labels) or SigLIP (each label's sigmoid), each label put into `--template`.

use crate::session_args::EngineArgs;
use cyb_media::image::ResizeKernel;
use cyb_runtime::Runtime;
use cyb_tensor::{Error, Result};
use serde_json::json;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ClassifyImageArgs {
    /// A Hugging Face vision model directory (ViT, DINOv2 with a classification head; CLIP or
    /// SigLIP for --labels).
    pub model: PathBuf,
    /// Images (PNG, JPEG, WebP, BMP, GIF).
    #[arg(required = true)]
    pub images: Vec<PathBuf>,
    /// Zero-shot classification over these candidate labels (comma-separated; CLIP, SigLIP).
    #[arg(long, value_delimiter = ',')]
    pub labels: Vec<String>,
    /// The text each label is put into (`{}` is replaced by the label).
    #[arg(long, default_value = cyb_runtime::vision::DEFAULT_TEMPLATE, requires = "labels")]
    pub template: String,
    /// Labels reported per image (a classification head).
    #[arg(long, default_value_t = 5)]
    pub top_k: usize,
    /// Resize as Pillow does (transformers' PIL backend) or as torch does (its torchvision
    /// backend, the default of transformers 5).
    #[arg(long, default_value = "pillow", value_parser = ["pillow", "torch"])]
    pub resize: String,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn resize_kernel(name: &str) -> ResizeKernel {
    match name {
        "torch" => ResizeKernel::Torch,
        _ => ResizeKernel::Pillow,
    }
}

pub fn run(args: ClassifyImageArgs) -> Result<()> {
    let rt = Runtime::new(args.engine.runtime_options()?)?;
    let model = rt.load_image_model(&args.model, resize_kernel(&args.resize))?;
    let mut out = Vec::with_capacity(args.images.len());
    for path in &args.images {
        let img = cyb_runtime::vision::load_image(path)?;
        let scored = if args.labels.is_empty() {
            model.classify(&[&img], args.top_k)?
        } else {
            let labels: Vec<&str> = args.labels.iter().map(String::as_str).collect();
            model.zero_shot(&[&img], &labels, &args.template)?
        };
        let labels: Vec<_> = scored[0]
            .iter()
            .map(|l| json!({"label": l.label, "score": l.score}))
            .collect();
        out.push(json!({"image": path.display().to_string(), "labels": labels}));
    }
    let text = serde_json::to_string_pretty(&out)
        .map_err(|e| Error::invalid("classify-image", format!("cannot write JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

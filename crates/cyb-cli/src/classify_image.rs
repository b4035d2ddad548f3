//! `cyb-llm classify-image MODEL IMAGE...`: the labels of each image as a JSON array (one object
//! per image, in order): a classification head's top `--top-k` (ViT, DINOv2
//! `*ForImageClassification`), or with `--labels a,b,c` zero-shot scores from CLIP (softmax over
//! the labels) or SigLIP (each label's sigmoid), each label put into `--template`. With
//! `--arch`, MODEL is a PyTorch checkpoint of a torchvision classifier (`resnet50`,
//! `mobilenet_v2`, ...), its images prepared by torchvision's ImageNet transform and its
//! classes named by `--label-file` (one per line) or numbered.

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
    /// The torchvision architecture of a PyTorch checkpoint (resnet18, resnet34, resnet50,
    /// resnet101, resnet152, mobilenet_v2, mobilenet_v3_small, mobilenet_v3_large,
    /// efficientnet_b0 … efficientnet_b7).
    #[arg(long, conflicts_with = "labels")]
    pub arch: Option<String>,
    /// With --arch: class names, one per line, in class order.
    #[arg(long, requires = "arch")]
    pub label_file: Option<PathBuf>,
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
    if let Some(arch) = &args.arch {
        return run_torchvision(&args, &rt, arch);
    }
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
    print_json(&out)
}

/// A torchvision classifier from a PyTorch checkpoint.
fn run_torchvision(args: &ClassifyImageArgs, rt: &Runtime, arch: &str) -> Result<()> {
    const SIZE: usize = 224;
    let model = rt.load_torchvision(&args.model, arch, SIZE, SIZE)?;
    let names: Vec<String> = match &args.label_file {
        Some(f) => std::fs::read_to_string(f)
            .map_err(|source| Error::Io {
                path: f.clone(),
                source,
            })?
            .lines()
            .map(|l| l.trim().to_string())
            .collect(),
        None => Vec::new(),
    };
    let proc = cyb_media::image::ImageProcessor::torchvision_imagenet(256, SIZE);
    let input = model.graph().values[model.graph().inputs[0]].name.clone();
    let mut out = Vec::with_capacity(args.images.len());
    for path in &args.images {
        let img = cyb_runtime::vision::load_image(path)?;
        let pv = proc
            .process(&img)
            .map_err(cyb_runtime::vision::image_error)?;
        let x = cyb_tensor::Tensor::from_f32(&[1, 3, pv.height, pv.width], &pv.data)?;
        let outs = model.run(&std::collections::HashMap::from([(input.clone(), x)]))?;
        let logits = outs
            .first()
            .ok_or_else(|| Error::invalid("classify-image", "the model gave no output"))?
            .1
            .to_f32_vec()?;
        let mut ranked: Vec<(usize, f32)> = cyb_runtime::sampling::softmax(&logits)
            .into_iter()
            .map(|p| p as f32)
            .enumerate()
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        let labels: Vec<_> = ranked
            .iter()
            .take(args.top_k.max(1))
            .map(|&(i, p)| {
                let label = names
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("class {i}"));
                json!({"label": label, "class": i, "score": p})
            })
            .collect();
        out.push(json!({"image": path.display().to_string(), "labels": labels}));
    }
    print_json(&out)
}

fn print_json(out: &[serde_json::Value]) -> Result<()> {
    let text = serde_json::to_string_pretty(out)
        .map_err(|e| Error::invalid("classify-image", format!("cannot write JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

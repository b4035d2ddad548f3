//! `cyb-llm detect MODEL IMAGE...`: objects found by a YOLO detector (an Ultralytics ONNX
//! export), one line per object (`label score x1 y1 x2 y2`, pixels of the original image), or
//! a JSON array with `--json`; `-o` writes the image with the boxes drawn.

use cyb_runtime::{DetectOptions, Runtime, RuntimeOptions};
use cyb_tensor::{Error, Result};
use serde_json::json;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct DetectArgs {
    /// A YOLO detector: an Ultralytics ONNX export ([1, 4 + classes, anchors] or end-to-end
    /// [1, N, 6] output), or a `.model` imported from one.
    pub model: PathBuf,
    /// Images (PNG, JPEG, WebP, BMP, GIF).
    #[arg(required = true)]
    pub images: Vec<PathBuf>,
    /// Confidence threshold: objects scoring at or below it are dropped.
    #[arg(long, default_value_t = 0.25)]
    pub conf: f32,
    /// Overlap (IoU) above which the weaker of two boxes of one class is suppressed.
    #[arg(long, default_value_t = 0.7)]
    pub iou: f32,
    /// The most objects reported per image.
    #[arg(long, default_value_t = 300)]
    pub max_det: usize,
    /// Suppress overlapping boxes across classes too.
    #[arg(long)]
    pub agnostic: bool,
    /// Print a JSON array: per image its size and objects (label, class, score, box).
    #[arg(long)]
    pub json: bool,
    /// Write the image with the boxes drawn (PNG); with several images, a directory that gets
    /// one `<name>.png` per image.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Backend: auto, cpu, wgpu or reference.
    #[arg(long, default_value = "auto")]
    pub backend: String,
}

/// A colour per class for the drawn boxes.
const PALETTE: [[u8; 3]; 10] = [
    [255, 56, 56],
    [255, 157, 151],
    [255, 112, 31],
    [255, 178, 29],
    [207, 210, 49],
    [72, 249, 10],
    [26, 147, 52],
    [0, 212, 187],
    [52, 69, 147],
    [132, 56, 255],
];

pub fn run(args: DetectArgs) -> Result<()> {
    let rt = Runtime::new(RuntimeOptions {
        backend: Some(args.backend.clone()),
        ..Default::default()
    })?;
    let detector = rt.load_detector(&args.model)?;
    let opts = DetectOptions {
        conf: args.conf,
        iou: args.iou,
        max_det: args.max_det,
        agnostic: args.agnostic,
    };
    let out_dir = match &args.output {
        Some(o) if args.images.len() > 1 => {
            std::fs::create_dir_all(o).map_err(|source| Error::Io {
                path: o.clone(),
                source,
            })?;
            Some(o.clone())
        }
        _ => None,
    };
    let mut all = Vec::with_capacity(args.images.len());
    for path in &args.images {
        let img = cyb_runtime::vision::load_image(path)?;
        let found = detector.detect(&img, &opts)?;
        if args.json {
            let objects: Vec<_> = found
                .iter()
                .map(|d| {
                    json!({"label": d.label, "class": d.class, "score": d.score, "box": d.bbox})
                })
                .collect();
            all.push(json!({
                "image": path.display().to_string(),
                "width": img.width,
                "height": img.height,
                "objects": objects,
            }));
        } else {
            for d in &found {
                let [x1, y1, x2, y2] = d.bbox;
                println!(
                    "{}\t{}\t{:.3}\t{x1:.1}\t{y1:.1}\t{x2:.1}\t{y2:.1}",
                    path.display(),
                    d.label,
                    d.score
                );
            }
        }
        if let Some(o) = &args.output {
            let target = match &out_dir {
                Some(dir) => dir.join(format!(
                    "{}.png",
                    path.file_stem().and_then(|s| s.to_str()).unwrap_or("image")
                )),
                None => o.clone(),
            };
            let mut drawn = img.clone();
            let thickness = (img.width.max(img.height) / 400).max(2);
            for d in &found {
                drawn.draw_box(d.bbox, PALETTE[d.class % PALETTE.len()], thickness);
            }
            drawn
                .save_png(&target)
                .map_err(cyb_runtime::vision::image_error)?;
        }
    }
    if args.json {
        let text = serde_json::to_string_pretty(&all)
            .map_err(|e| Error::invalid("detect", format!("cannot write JSON: {e}")))?;
        println!("{text}");
    }
    Ok(())
}

//! Image classification and image/text embeddings with the ViTStyle family (ViT, CLIP, SigLIP,
//! DINOv2 from Hugging Face directories): the image preprocessed by the directory's
//! `preprocessor_config.json`, then
//! - `classify`: a classification head's softmax (ViT, DINOv2 `*ForImageClassification`),
//!   as transformers' image-classification pipeline gives it;
//! - `zero_shot`: candidate labels through the text tower, each as `"This is a photo of
//!   {label}."` — CLIP's softmax over `scale · cos`, SigLIP's sigmoid of `scale · cos + bias`
//!   (texts padded to 64 tokens, as transformers' zero-shot-image-classification pipeline
//!   does);
//! - `embed_images` / `embed_texts`: the vectors those scores compare (CLIP's projections,
//!   SigLIP's pooled states; DINOv2's and ViT's class token for images), L2-normalized on
//!   request.

use super::image_error;
use crate::{LabelScore, Runtime, Tokenizer};
use cyb_media::image::{ImageProcessor, ResizeKernel, RgbImage};
use cyb_models::{VisionArch, VisionModel};
use cyb_tensor::{Error, Result};
use std::path::{Path, PathBuf};

/// transformers' zero-shot-image-classification default template.
pub const DEFAULT_TEMPLATE: &str = "This is a photo of {}.";
/// The text length SigLIP's texts are padded to (as transformers' pipeline pads them).
const SIGLIP_TEXT_LEN: usize = 64;

/// A loaded ViTStyle model with its image processor (and tokenizer, for text towers).
pub struct ImageModel {
    path: PathBuf,
    model: VisionModel,
    processor: ImageProcessor,
    tokenizer: Option<Tokenizer>,
    /// Why a model with a text tower has no tokenizer (its texts are then refused with this).
    tokenizer_error: Option<String>,
}

impl std::fmt::Debug for ImageModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageModel")
            .field("path", &self.path)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Loads a ViTStyle model from a Hugging Face directory; images are resized as Pillow does
    /// (transformers' PIL backend), or as torch does with `ResizeKernel::Torch` (its
    /// torchvision backend, the default of transformers 5).
    pub fn load_image_model(&self, path: &Path, kernel: ResizeKernel) -> Result<ImageModel> {
        let file = cyb_format::open(path)?;
        let model = VisionModel::load(&file, self.dispatcher().clone())?;
        let cyb_format::ModelFile::HuggingFace(hf) = &file else {
            return Err(Error::invalid(
                "image",
                format!("{}: not a Hugging Face model", path.display()),
            ));
        };
        let processor = match hf.image_processor() {
            Some((config, name)) => ImageProcessor::from_config_json(&config.to_string(), kernel)
                .map_err(|e| {
                Error::invalid("image", format!("{}: {name}: {e}", hf.dir().display()))
            })?,
            None => {
                return Err(Error::invalid(
                    "image",
                    format!(
                        "{} has no preprocessor_config.json (the image processor of a \
                         Hugging Face vision model)",
                        hf.dir().display()
                    ),
                ))
            }
        };
        // Images embed without a tokenizer; texts need one.
        let (tokenizer, tokenizer_error) = if model.has_text() {
            match Tokenizer::from_model_file(&file) {
                Ok(t) => (Some(t), None),
                Err(e) => (None, Some(e.to_string())),
            }
        } else {
            (None, None)
        };
        Ok(ImageModel {
            path: path.to_path_buf(),
            model,
            processor,
            tokenizer,
            tokenizer_error,
        })
    }
}

impl ImageModel {
    pub fn model(&self) -> &VisionModel {
        &self.model
    }

    pub fn processor(&self) -> &ImageProcessor {
        &self.processor
    }

    /// The class names of a classification head.
    pub fn labels(&self) -> &[String] {
        &self.model.config().labels
    }

    /// True for CLIP and SigLIP (zero-shot classification and text embeddings), when their
    /// directory has a tokenizer.
    pub fn has_text(&self) -> bool {
        self.tokenizer.is_some()
    }

    fn pixels(&self, images: &[&RgbImage]) -> Result<(Vec<f32>, usize, usize)> {
        let mut all = Vec::new();
        let mut size = None;
        for img in images {
            let pv = self.processor.process(img).map_err(image_error)?;
            match size {
                None => size = Some((pv.height, pv.width)),
                Some(s) if s != (pv.height, pv.width) => return Err(Error::invalid(
                    "image",
                    "the processor gives images of different sizes; classify them one at a time",
                )),
                _ => {}
            }
            all.extend_from_slice(&pv.data);
        }
        let (h, w) = size.ok_or_else(|| Error::invalid("image", "no image given"))?;
        Ok((all, h, w))
    }

    /// The `top_k` labels of a classification head per image (softmax of the logits), best
    /// first.
    pub fn classify(&self, images: &[&RgbImage], top_k: usize) -> Result<Vec<Vec<LabelScore>>> {
        let (px, h, w) = self.pixels(images)?;
        let logits = self.model.image_logits(&px, images.len(), h, w)?;
        let labels = self.labels();
        Ok(logits
            .iter()
            .map(|l| {
                let p = crate::embed::softmax(l);
                let mut scored: Vec<LabelScore> = p
                    .iter()
                    .enumerate()
                    .map(|(i, &score)| LabelScore {
                        label: labels
                            .get(i)
                            .cloned()
                            .unwrap_or_else(|| format!("LABEL_{i}")),
                        score,
                    })
                    .collect();
                scored.sort_by(|a, b| b.score.total_cmp(&a.score));
                scored.truncate(top_k.max(1));
                scored
            })
            .collect())
    }

    /// Zero-shot scores of `labels` per image, best first (CLIP: softmax over the labels;
    /// SigLIP: each label's sigmoid on its own). `template` holds `{}` where the label goes.
    pub fn zero_shot(
        &self,
        images: &[&RgbImage],
        labels: &[&str],
        template: &str,
    ) -> Result<Vec<Vec<LabelScore>>> {
        if labels.is_empty() {
            return Err(Error::invalid("labels", "no candidate labels given"));
        }
        if !template.contains("{}") {
            return Err(Error::invalid(
                "template",
                format!("{template:?} has no {{}} for the label"),
            ));
        }
        let texts: Vec<String> = labels.iter().map(|l| template.replace("{}", l)).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let t = self.embed_texts(&refs, true)?;
        let i = self.embed_images(images, true)?;
        let scale = self.model.logit_scale().unwrap_or(1.0);
        let siglip = self.model.config().arch == VisionArch::Siglip;
        let bias = self.model.logit_bias().unwrap_or(0.0);
        Ok(i.iter()
            .map(|img| {
                let logits: Vec<f32> = t
                    .iter()
                    .map(|tv| scale * dot(img, tv) + if siglip { bias } else { 0.0 })
                    .collect();
                let scores = if siglip {
                    logits.iter().map(|&x| 1.0 / (1.0 + (-x).exp())).collect()
                } else {
                    crate::embed::softmax(&logits)
                };
                let mut out: Vec<LabelScore> = labels
                    .iter()
                    .zip(scores)
                    .map(|(l, score)| LabelScore {
                        label: l.to_string(),
                        score,
                    })
                    .collect();
                out.sort_by(|a, b| b.score.total_cmp(&a.score));
                out
            })
            .collect())
    }

    /// One embedding per image.
    pub fn embed_images(&self, images: &[&RgbImage], normalize: bool) -> Result<Vec<Vec<f32>>> {
        let (px, h, w) = self.pixels(images)?;
        let mut e = self.model.image_embeds(&px, images.len(), h, w)?;
        if normalize {
            e.iter_mut().for_each(|v| l2(v));
        }
        Ok(e)
    }

    /// One embedding per text (CLIP, SigLIP).
    pub fn embed_texts(&self, texts: &[&str], normalize: bool) -> Result<Vec<Vec<f32>>> {
        let Some(tok) = &self.tokenizer else {
            return Err(Error::invalid(
                "text",
                match &self.tokenizer_error {
                    Some(e) => format!("the text tower has no tokenizer: {e}"),
                    None => format!("{} has no text tower", self.model.config().architecture),
                },
            ));
        };
        let tc = self
            .model
            .config()
            .text
            .as_ref()
            .ok_or_else(|| Error::invalid("text", "no text tower"))?;
        let siglip = self.model.config().arch == VisionArch::Siglip;
        let max = if siglip {
            SIGLIP_TEXT_LEN.min(tc.max_positions)
        } else {
            tc.max_positions
        };
        let mut seqs = Vec::with_capacity(texts.len());
        for t in texts {
            let mut ids = tok.encode(t, true)?;
            if ids.len() > max {
                // Truncated keeping the last (end) token, as the tokenizer's truncation does.
                let last = *ids.last().unwrap_or(&0);
                ids.truncate(max - 1);
                ids.push(last);
            }
            if siglip {
                let pad = tc.pad.unwrap_or(1);
                ids.resize(max, pad);
            }
            seqs.push(ids);
        }
        let mut e = self.model.text_embeds(&seqs)?;
        if normalize {
            e.iter_mut().for_each(|v| l2(v));
        }
        Ok(e)
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn l2(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

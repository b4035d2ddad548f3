//! The image side of a vision-language model: its processor (read from the directory's
//! `processor_config.json` or `preprocessor_config.json`), its tower and connector, and the rule
//! that turns each image placeholder of a tokenized prompt into the image's tokens.

use super::image_error;
use cyb_media::image::{ImageProcessor, ResizeKernel, RgbImage};
use cyb_models::VlmModel;
use cyb_tensor::{Error, Result, Tensor};
use std::hash::{Hash, Hasher};
use std::path::Path;

/// Most images one prompt may carry.
pub const MAX_IMAGES: usize = 16;

/// A vision-language model's image side.
pub(crate) struct ImageSide {
    pub model: VlmModel,
    processor: ImageProcessor,
    /// How errors name the placeholder token (its text, such as `<image>`).
    pub placeholder: String,
}

/// One image of a prompt, preprocessed: its pixels and their fingerprint (which tells whether a
/// cached image's keys and values can be reused).
pub(crate) struct PreparedImage {
    pixels: Vec<f32>,
    pub hash: u64,
}

/// Where an image's tokens are in a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ImageSpan {
    pub start: usize,
    pub len: usize,
    pub hash: u64,
}

impl ImageSide {
    /// The processor of the model directory `dir` (the `image_processor` of a saved
    /// processor, else `preprocessor_config.json`), resizing as transformers 5's default
    /// (torchvision) backend does.
    pub fn load(model: VlmModel, dir: &Path) -> Result<ImageSide> {
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        let (text, name) = match read("processor_config.json")
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v.get("image_processor").map(ToString::to_string))
        {
            Some(t) => (t, "processor_config.json"),
            None => match read("preprocessor_config.json") {
                Some(t) => (t, "preprocessor_config.json"),
                None => {
                    return Err(Error::invalid(
                        "image",
                        format!(
                            "{} has no processor_config.json or preprocessor_config.json (the \
                             image processor of a vision-language model)",
                            dir.display()
                        ),
                    ))
                }
            },
        };
        let processor =
            ImageProcessor::from_config_json(&text, ResizeKernel::Torch).map_err(|e| {
                Error::invalid(
                    "image",
                    format!("{}: {}", dir.join(name).display(), image_error(e)),
                )
            })?;
        let placeholder = format!("token {}", model.config().image_token);
        Ok(ImageSide {
            model,
            processor,
            placeholder,
        })
    }

    pub fn image_token(&self) -> u32 {
        self.model.config().image_token
    }

    /// Preprocesses `images` for the tower.
    pub fn prepare(&self, images: &[RgbImage]) -> Result<Vec<PreparedImage>> {
        if images.len() > MAX_IMAGES {
            return Err(Error::invalid(
                "image",
                format!("{} images; at most {MAX_IMAGES} per prompt", images.len()),
            ));
        }
        let size = self.model.image_size();
        images
            .iter()
            .map(|img| {
                let pv = self.processor.process(img).map_err(image_error)?;
                if (pv.height, pv.width) != (size, size) {
                    return Err(Error::invalid(
                        "image",
                        format!(
                            "the processor makes {}x{} images; the tower takes {size}x{size}",
                            pv.width, pv.height
                        ),
                    ));
                }
                let mut h = std::collections::hash_map::DefaultHasher::new();
                for v in &pv.data {
                    v.to_bits().hash(&mut h);
                }
                Ok(PreparedImage {
                    hash: h.finish(),
                    pixels: pv.data,
                })
            })
            .collect()
    }

    /// The embeddings of `images`, one `[tokens, hidden]` tensor each.
    pub fn encode(&self, images: &[&PreparedImage]) -> Result<Vec<Tensor>> {
        if images.is_empty() {
            return Ok(Vec::new());
        }
        let pixels: Vec<f32> = images
            .iter()
            .flat_map(|i| i.pixels.iter().copied())
            .collect();
        self.model.encode(&pixels, images.len())
    }

    /// `prompt` with each image placeholder expanded into the image's tokens, and where each
    /// image's tokens are. The placeholders must match the images one for one.
    pub fn expand(
        &self,
        prompt: &[u32],
        images: &[PreparedImage],
    ) -> Result<(Vec<u32>, Vec<ImageSpan>)> {
        let token = self.image_token();
        let found = prompt.iter().filter(|&&t| t == token).count();
        if found != images.len() {
            return Err(Error::invalid(
                "image",
                format!(
                    "the prompt has {found} image placeholders ({}) for {} images (a chat \
                     template writes one per image part; a raw prompt needs one per image)",
                    self.placeholder,
                    images.len()
                ),
            ));
        }
        let per = self.model.tokens_per_image();
        let mut ids = Vec::with_capacity(prompt.len() + images.len() * per);
        let mut spans = Vec::with_capacity(images.len());
        let mut next = images.iter();
        for &t in prompt {
            if t == token {
                let Some(img) = next.next() else {
                    return Err(Error::invalid("image", "more placeholders than images"));
                };
                spans.push(ImageSpan {
                    start: ids.len(),
                    len: per,
                    hash: img.hash,
                });
                ids.extend(std::iter::repeat_n(token, per));
            } else {
                ids.push(t);
            }
        }
        Ok((ids, spans))
    }
}

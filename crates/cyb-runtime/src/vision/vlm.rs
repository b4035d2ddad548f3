//! The image side of a vision-language model: its processor (read from the directory's
//! `processor_config.json` or `preprocessor_config.json`), its tower and connector, and the rule
//! that turns each image placeholder of a tokenized prompt into the image's tokens.
//!
//! - LLaVA: one image is one square input (the model's processor: resize, crop, normalize) and
//!   its placeholder becomes `tokens_per_image` image tokens.
//! - Idefics3 / SmolVLM: the image is resized so its longest edge is `size.longest_edge`, then
//!   up to multiples of the tile (`max_image_size.longest_edge`), cut into tiles row by row, and
//!   followed by the whole image resized to one tile (the global view); one that fits a tile is
//!   the global view alone. The placeholder becomes, per tile,
//!   `<fake_token_around_image><row_R_col_C>` and the tile's image tokens, a newline after each
//!   row, then `\n<fake_token_around_image><global-img>`, the global view's tokens and
//!   `<fake_token_around_image>` (as Idefics3's processor writes it), tokenized.

use super::image_error;
use crate::Tokenizer;
use cyb_media::image::process::to_chw;
use cyb_media::image::{resize_rgb, Filter, ImageError, ImageProcessor, ResizeKernel, RgbImage};
use cyb_models::{VlmFamily, VlmModel};
use cyb_tensor::{Error, Result, Tensor};
use serde_json::Value;
use std::hash::{Hash, Hasher};
use std::path::Path;

/// Most images one prompt may carry.
pub const MAX_IMAGES: usize = 16;

/// Idefics3's cap on the resized image's longest edge.
const IDEFICS3_MAX_SIDE: usize = 4096;

/// Most tiles one image may be cut into (Idefics3's processor names rows and columns up to 6;
/// the published models use at most 4 × 4).
const MAX_TILES: usize = 64;

/// How images become the tower's inputs.
enum Processor {
    /// One square input per image.
    Single(ImageProcessor),
    /// Idefics3's tiles and global view.
    Tiles(TileProcessor),
}

struct TileProcessor {
    longest: usize,
    tile: usize,
    split: bool,
    filter: Filter,
    rescale: f32,
    mean: [f32; 3],
    std: [f32; 3],
}

/// A vision-language model's image side.
pub(crate) struct ImageSide {
    pub model: VlmModel,
    processor: Processor,
    /// How errors name the placeholder token (its text, such as `<image>`).
    pub placeholder: String,
}

/// One image of a prompt, preprocessed: the tower's inputs (`frames` of them: tiles, then the
/// global view), the tile grid, and a fingerprint of the pixels (which tells whether a cached
/// image's keys and values can be reused).
pub(crate) struct PreparedImage {
    pixels: Vec<f32>,
    frames: usize,
    rows: usize,
    cols: usize,
    pub hash: u64,
}

/// A run of image tokens in a prompt: the `len` tokens from `start` are frame `frame` (a
/// tile or the global view) of image `image`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ImageSpan {
    pub start: usize,
    pub len: usize,
    pub image: usize,
    pub frame: usize,
    pub hash: u64,
}

fn config_error(dir: &Path, name: &str, e: ImageError) -> Error {
    Error::invalid("image", format!("{}: {name}: {e}", dir.display()))
}

impl ImageSide {
    /// The processor of the model (the `image_processor` of a saved processor, else
    /// `preprocessor_config.json`, or what a `.model` container carries), resizing as
    /// transformers 5's default (torchvision) backend does.
    pub fn load(model: VlmModel, hf: &cyb_format::HfModel) -> Result<ImageSide> {
        let dir = hf.dir();
        let Some((config, name)) = hf.image_processor() else {
            return Err(Error::invalid(
                "image",
                format!(
                    "{} has no readable processor_config.json or preprocessor_config.json (the \
                     image processor of a vision-language model)",
                    dir.display()
                ),
            ));
        };
        let processor = match model.config().family {
            VlmFamily::Llava { .. } => Processor::Single(
                ImageProcessor::from_config_json(&config.to_string(), ResizeKernel::Torch)
                    .map_err(|e| config_error(dir, name, e))?,
            ),
            VlmFamily::Idefics3 { .. } => Processor::Tiles(
                TileProcessor::from_config(&config, model.image_size())
                    .map_err(|e| config_error(dir, name, e))?,
            ),
        };
        let placeholder = format!("token {}", model.config().image_token);
        Ok(ImageSide {
            model,
            processor,
            placeholder,
        })
    }

    /// [`crate::Model::prompt_key`]: the `i`-th image placeholder of `prompt` replaced by
    /// `2^31 | h` for a 31-bit hash `h` of `images[i]`'s size and pixels (placeholders past the
    /// images stay as they are).
    pub fn keyed(&self, prompt: &[u32], images: &[RgbImage]) -> Vec<u32> {
        let token = self.image_token();
        let mut next = images.iter();
        prompt
            .iter()
            .map(|&t| match (t == token).then(|| next.next()).flatten() {
                Some(img) => {
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    (img.width, img.height).hash(&mut h);
                    img.pixels.hash(&mut h);
                    (1 << 31) | (h.finish() as u32 & 0x7fff_ffff)
                }
                None => t,
            })
            .collect()
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
                let (pixels, frames, rows, cols) = match &self.processor {
                    Processor::Single(p) => {
                        let pv = p.process(img).map_err(image_error)?;
                        if (pv.height, pv.width) != (size, size) {
                            return Err(Error::invalid(
                                "image",
                                format!(
                                    "the processor makes {}x{} images; the tower takes \
                                     {size}x{size}",
                                    pv.width, pv.height
                                ),
                            ));
                        }
                        (pv.data, 1, 0, 0)
                    }
                    Processor::Tiles(t) => t.process(img).map_err(image_error)?,
                };
                let mut h = std::collections::hash_map::DefaultHasher::new();
                for v in &pixels {
                    v.to_bits().hash(&mut h);
                }
                Ok(PreparedImage {
                    hash: h.finish(),
                    pixels,
                    frames,
                    rows,
                    cols,
                })
            })
            .collect()
    }

    /// The embeddings of `images`: per image, one `[tokens_per_image, hidden]` tensor per
    /// frame (its tiles, then the global view).
    pub fn encode(&self, images: &[&PreparedImage]) -> Result<Vec<Vec<Tensor>>> {
        if images.is_empty() {
            return Ok(Vec::new());
        }
        let pixels: Vec<f32> = images
            .iter()
            .flat_map(|i| i.pixels.iter().copied())
            .collect();
        let frames: usize = images.iter().map(|i| i.frames).sum();
        let mut per_frame = self.model.encode(&pixels, frames)?.into_iter();
        Ok(images
            .iter()
            .map(|img| per_frame.by_ref().take(img.frames).collect())
            .collect())
    }

    /// `prompt` with each image placeholder expanded into the image's tokens, and where the
    /// runs of image tokens are. The placeholders must match the images one for one.
    pub fn expand(
        &self,
        prompt: &[u32],
        images: &[PreparedImage],
        tokenizer: &Tokenizer,
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
        let mut spans = Vec::new();
        let mut next = images.iter().enumerate();
        for &t in prompt {
            if t != token {
                ids.push(t);
                continue;
            }
            let Some((i, img)) = next.next() else {
                return Err(Error::invalid("image", "more placeholders than images"));
            };
            let expansion = match &self.processor {
                Processor::Single(_) => vec![token; per],
                Processor::Tiles(_) => {
                    let text = idefics3_text(&self.placeholder, img.rows, img.cols, per);
                    tokenizer.encode(&text, false)?
                }
            };
            // Each run of image tokens is the image's next frame.
            let mut frame = 0;
            let mut k = 0;
            while k < expansion.len() {
                if expansion[k] != token {
                    ids.push(expansion[k]);
                    k += 1;
                    continue;
                }
                let run = expansion[k..].iter().take_while(|&&x| x == token).count();
                if run != per || frame == img.frames {
                    return Err(Error::invalid(
                        "image",
                        format!(
                            "the image's text has a run of {run} image tokens after {frame} \
                             frames; each of its {} frames takes {per}",
                            img.frames
                        ),
                    ));
                }
                spans.push(ImageSpan {
                    start: ids.len(),
                    len: run,
                    image: i,
                    frame,
                    hash: img.hash,
                });
                ids.extend(std::iter::repeat_n(token, run));
                frame += 1;
                k += run;
            }
            if frame != img.frames {
                return Err(Error::invalid(
                    "image",
                    format!("the image's text has {frame} of its {} frames", img.frames),
                ));
            }
        }
        Ok((ids, spans))
    }
}

/// Idefics3's text for one image of `rows × cols` tiles (none: the global view alone), with
/// `per` image tokens per tile.
fn idefics3_text(image: &str, rows: usize, cols: usize, per: usize) -> String {
    const FAKE: &str = "<fake_token_around_image>";
    let tokens = image.repeat(per);
    let mut s = String::new();
    for r in 0..rows {
        for c in 0..cols {
            s.push_str(&format!("{FAKE}<row_{}_col_{}>{tokens}", r + 1, c + 1));
        }
        s.push('\n');
    }
    if rows > 0 {
        s.push('\n');
    }
    s.push_str(&format!("{FAKE}<global-img>{tokens}{FAKE}"));
    s
}

impl TileProcessor {
    fn from_config(c: &Value, tile: usize) -> std::result::Result<TileProcessor, ImageError> {
        let bad = |field: &str, why: String| ImageError::config(field, why);
        let edge = |k: &str, default: usize| -> std::result::Result<usize, ImageError> {
            match c.get(k) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v
                    .get("longest_edge")
                    .and_then(Value::as_u64)
                    .filter(|&n| n > 0 && n <= IDEFICS3_MAX_SIDE as u64)
                    .map(|n| n as usize)
                    .ok_or_else(|| bad(k, format!("{v}: expected {{\"longest_edge\": N}}"))),
            }
        };
        let max_tile = edge("max_image_size", tile)?;
        if max_tile != tile {
            return Err(bad(
                "max_image_size",
                format!("tiles of {max_tile} px for a tower of {tile} px"),
            ));
        }
        let triple = |k: &str| -> std::result::Result<[f32; 3], ImageError> {
            match c.get(k).and_then(Value::as_array) {
                None => Ok([0.5; 3]),
                Some(a) if a.len() == 3 => {
                    let mut out = [0f32; 3];
                    for (o, v) in out.iter_mut().zip(a) {
                        *o = v
                            .as_f64()
                            .ok_or_else(|| bad(k, format!("{v} is not a number")))?
                            as f32;
                    }
                    Ok(out)
                }
                Some(a) => Err(bad(k, format!("{} values, not 3", a.len()))),
            }
        };
        let flag = |k: &str| c.get(k).and_then(Value::as_bool).unwrap_or(true);
        for k in ["do_resize", "do_rescale", "do_normalize"] {
            if !flag(k) {
                return Err(bad(k, "false is not supported for Idefics3 images".into()));
            }
        }
        let std = triple("image_std")?;
        if std.iter().any(|&s| s == 0.0 || !s.is_finite()) {
            return Err(bad("image_std", format!("{std:?}")));
        }
        let longest = edge("size", 4 * tile)?;
        let side = longest.div_ceil(tile);
        if side * side > MAX_TILES {
            return Err(bad(
                "size",
                format!(
                    "a longest edge of {longest} px cuts up to {side} x {side} tiles of {tile} px; \
                     at most {MAX_TILES} tiles an image"
                ),
            ));
        }
        Ok(TileProcessor {
            longest,
            tile,
            split: flag("do_image_splitting"),
            filter: Filter::from_pil_code(c.get("resample").and_then(Value::as_i64).unwrap_or(1))?,
            rescale: c
                .get("rescale_factor")
                .and_then(Value::as_f64)
                .unwrap_or(1.0 / 255.0) as f32,
            mean: triple("image_mean")?,
            std,
        })
    }

    fn resize(
        &self,
        img: &RgbImage,
        w: usize,
        h: usize,
    ) -> std::result::Result<RgbImage, ImageError> {
        if (img.width, img.height) == (w, h) {
            return Ok(img.clone());
        }
        resize_rgb(img, w, h, self.filter, ResizeKernel::Torch)
    }

    /// The normalized frames (tiles row by row, then the global view), their count, and the
    /// tile grid (0 × 0 when the image is the global view alone).
    #[allow(clippy::type_complexity)]
    fn process(
        &self,
        img: &RgbImage,
    ) -> std::result::Result<(Vec<f32>, usize, usize, usize), ImageError> {
        let (h, w) = longest_edge_size(img.height, img.width, self.longest);
        let img = self.resize(img, w, h)?;
        let t = self.tile;
        let mut frames: Vec<RgbImage> = Vec::new();
        let (mut rows, mut cols) = (0, 0);
        let global = if self.split {
            let (h, w) = tile_multiple_size(img.height, img.width, t);
            let img = self.resize(&img, w, h)?;
            if h > t || w > t {
                (rows, cols) = (h.div_ceil(t), w.div_ceil(t));
                if rows * cols > MAX_TILES {
                    return Err(ImageError::config(
                        "size",
                        format!(
                            "{w}x{h} images make {rows} x {cols} tiles of {t} px; at most \
                             {MAX_TILES} tiles an image"
                        ),
                    ));
                }
                for r in 0..rows {
                    for c in 0..cols {
                        frames.push(img.crop(c * t, r * t, t, t));
                    }
                }
                self.resize(&img, t, t)?
            } else {
                img
            }
        } else {
            self.resize(&img, t, t)?
        };
        frames.push(global);
        let norm = Some((self.mean, self.std));
        let mut pixels = Vec::with_capacity(frames.len() * 3 * t * t);
        for f in &frames {
            if (f.width, f.height) != (t, t) {
                return Err(ImageError::config(
                    "max_image_size",
                    format!("a {}x{} frame for tiles of {t}", f.width, f.height),
                ));
            }
            pixels.extend(to_chw(f, Some(self.rescale), norm).data);
        }
        Ok((pixels, frames.len(), rows, cols))
    }
}

/// The longest edge scaled to `longest` (the other by the aspect ratio, rounded up to even),
/// then both kept under [`IDEFICS3_MAX_SIDE`].
fn longest_edge_size(height: usize, width: usize, longest: usize) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    let (mut h, mut w) = if width >= height {
        let mut h = (longest as f64 / aspect) as usize;
        h += h % 2;
        (h, longest)
    } else {
        let mut w = (longest as f64 * aspect) as usize;
        w += w % 2;
        (longest, w)
    };
    h = h.max(1);
    w = w.max(1);
    let aspect = w as f64 / h as f64;
    if w >= h && w > IDEFICS3_MAX_SIDE {
        w = IDEFICS3_MAX_SIDE;
        h = (w as f64 / aspect) as usize;
    } else if h > w && h > IDEFICS3_MAX_SIDE {
        h = IDEFICS3_MAX_SIDE;
        w = (h as f64 * aspect) as usize;
    }
    (h.max(1), w.max(1))
}

/// Both sides rounded up to multiples of the tile, the shorter one from the aspect ratio.
fn tile_multiple_size(height: usize, width: usize, tile: usize) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    let up = |n: usize| n.div_ceil(tile).max(1) * tile;
    if width >= height {
        let w = up(width);
        (up((w as f64 / aspect) as usize), w)
    } else {
        let h = up(height);
        (h, up((h as f64 * aspect) as usize))
    }
}

//! From a decoded image to a model's input: Hugging Face image processors driven by
//! `preprocessor_config.json` (`CLIPImageProcessor`, `SiglipImageProcessor`,
//! `ViTImageProcessor`, `BitImageProcessor` as DINOv2 uses it, `ConvNextImageProcessor`…),
//! torchvision's `Resize`/`CenterCrop`/`Normalize` for checkpoints without a config, and
//! Ultralytics' letterbox for YOLO detectors.

use super::resize::{resize_rgb, Filter, ResizeKernel};
use super::{ImageError, RgbImage};
use serde_json::Value;

/// ImageNet's channel means and deviations (torchvision's and `BitImageProcessor`'s).
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];
/// OpenAI CLIP's.
pub const CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
pub const CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_6, 0.275_777_1];

/// A float image in channel-first order, `[3, height, width]`.
#[derive(Clone, Debug, PartialEq)]
pub struct PixelValues {
    pub height: usize,
    pub width: usize,
    pub data: Vec<f32>,
}

/// How the image is resized before cropping.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ResizeRule {
    /// To exactly `width × height`.
    Exact { width: usize, height: usize },
    /// The shorter side to `n`, the longer side `int(n · long / short)`.
    ShortestEdge(usize),
}

/// How a center crop's offset is rounded, and where a too-small image is padded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CropRule {
    /// Hugging Face's: `(size - crop) // 2`; a small image is padded with zeros, the extra
    /// pixel of an odd padding going before it.
    HuggingFace,
    /// torchvision's `CenterCrop`: `round((size - crop) / 2)`; the extra padding pixel after.
    Torchvision,
}

/// A vision model's preprocessing: resize, center crop, rescale, normalize, channels first.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageProcessor {
    pub resize: Option<ResizeRule>,
    pub filter: Filter,
    /// Whose resize is reproduced (Pillow's, as Hugging Face's PIL backend, or torch's, as
    /// its torchvision backend).
    pub kernel: ResizeKernel,
    /// `(height, width)` of the center crop.
    pub crop: Option<(usize, usize)>,
    pub crop_rule: CropRule,
    /// Multiplies the 0–255 values (1/255 in almost every config).
    pub rescale: Option<f32>,
    /// `(x - mean) / std` per channel after rescaling.
    pub normalize: Option<([f32; 3], [f32; 3])>,
}

impl ImageProcessor {
    /// torchvision's classic ImageNet evaluation transform: `Resize(resize)` (bilinear,
    /// antialiased), `CenterCrop(crop)`, `ToTensor()`, `Normalize(IMAGENET_MEAN, IMAGENET_STD)`,
    /// on a PIL image (Pillow's resize).
    pub fn torchvision_imagenet(resize: usize, crop: usize) -> ImageProcessor {
        ImageProcessor {
            resize: Some(ResizeRule::ShortestEdge(resize)),
            filter: Filter::Bilinear,
            kernel: ResizeKernel::Pillow,
            crop: Some((crop, crop)),
            crop_rule: CropRule::Torchvision,
            rescale: Some(1.0 / 255.0),
            normalize: Some((IMAGENET_MEAN, IMAGENET_STD)),
        }
    }

    /// Reads a Hugging Face `preprocessor_config.json`; fields it leaves out take the defaults
    /// of the processor class it names (`image_processor_type`).
    pub fn from_config_json(
        text: &str,
        kernel: ResizeKernel,
    ) -> Result<ImageProcessor, ImageError> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| ImageError::config("preprocessor_config.json", e.to_string()))?;
        let Some(obj) = v.as_object() else {
            return Err(ImageError::config(
                "preprocessor_config.json",
                "not a JSON object",
            ));
        };
        let class = obj
            .get("image_processor_type")
            .or_else(|| obj.get("feature_extractor_type"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim_end_matches("Fast")
            .trim_end_matches("Pil");
        let d = ClassDefaults::of(class)?;
        let flag = |k: &str, default: bool| -> Result<bool, ImageError> {
            match obj.get(k) {
                None | Some(Value::Null) => Ok(default),
                Some(Value::Bool(b)) => Ok(*b),
                Some(other) => Err(field(k, format!("{other} is not true or false"))),
            }
        };
        let size = match obj.get("size") {
            None | Some(Value::Null) => d.size,
            Some(s) => size_rule(s, "size", d.default_to_square)?,
        };
        let mut crop = if flag("do_center_crop", d.crop.is_some())? {
            match obj.get("crop_size") {
                None | Some(Value::Null) => Some(d.crop.unwrap_or((224, 224))),
                Some(c) => Some(match size_rule(c, "crop_size", true)? {
                    ResizeRule::Exact { width, height } => (height, width),
                    ResizeRule::ShortestEdge(n) => (n, n),
                }),
            }
        } else {
            None
        };
        let resize = if flag("do_resize", true)? {
            if class == "ConvNextImageProcessor" {
                // ConvNeXt: below 384 pixels, the shortest edge to size / crop_pct, then the
                // center size × size; from 384 up, a square of size.
                match size {
                    ResizeRule::ShortestEdge(n) if n < 384 => {
                        let pct = obj
                            .get("crop_pct")
                            .and_then(Value::as_f64)
                            .unwrap_or(224.0 / 256.0);
                        if !(pct > 0.0 && pct <= 1.0) {
                            return Err(field("crop_pct", format!("{pct} is not in (0, 1]")));
                        }
                        crop = Some((n, n));
                        Some(ResizeRule::ShortestEdge((n as f64 / pct) as usize))
                    }
                    ResizeRule::ShortestEdge(n) => Some(ResizeRule::Exact {
                        width: n,
                        height: n,
                    }),
                    exact => Some(exact),
                }
            } else {
                Some(size)
            }
        } else {
            None
        };
        let filter = match obj.get("resample") {
            None | Some(Value::Null) => d.filter,
            Some(r) => Filter::from_pil_code(
                r.as_i64()
                    .ok_or_else(|| field("resample", format!("{r} is not an integer")))?,
            )?,
        };
        let rescale = if flag("do_rescale", true)? {
            Some(match obj.get("rescale_factor") {
                None | Some(Value::Null) => 1.0 / 255.0,
                Some(f) => f
                    .as_f64()
                    .ok_or_else(|| field("rescale_factor", format!("{f} is not a number")))?
                    as f32,
            })
        } else {
            None
        };
        let normalize = if flag("do_normalize", true)? {
            let mean = triple(obj.get("image_mean"), "image_mean")?.unwrap_or(d.mean);
            let std = triple(obj.get("image_std"), "image_std")?.unwrap_or(d.std);
            if let Some(bad) = std.iter().find(|s| !(s.is_finite() && **s != 0.0)) {
                return Err(field("image_std", format!("{bad} cannot divide")));
            }
            Some((mean, std))
        } else {
            None
        };
        Ok(ImageProcessor {
            resize,
            filter,
            kernel,
            crop,
            crop_rule: CropRule::HuggingFace,
            rescale,
            normalize,
        })
    }

    /// The 8-bit image after resizing and cropping (before any float step).
    pub fn resize_and_crop(&self, img: &RgbImage) -> Result<RgbImage, ImageError> {
        let resized = match self.resize {
            None => None,
            Some(rule) => {
                let (w, h) = rule.output_size(img.width, img.height)?;
                Some(resize_rgb(img, w, h, self.filter, self.kernel)?)
            }
        };
        match (self.crop, resized) {
            (Some((ch, cw)), r) => center_crop(r.as_ref().unwrap_or(img), ch, cw, self.crop_rule),
            (None, Some(r)) => Ok(r),
            (None, None) => Ok(img.clone()),
        }
    }

    /// The model input `[3, H, W]`.
    pub fn process(&self, img: &RgbImage) -> Result<PixelValues, ImageError> {
        let img = self.resize_and_crop(img)?;
        Ok(to_chw(&img, self.rescale, self.normalize))
    }
}

/// The output `(width, height)` of a resize rule on a `w × h` image.
impl ResizeRule {
    pub fn output_size(self, w: usize, h: usize) -> Result<(usize, usize), ImageError> {
        match self {
            ResizeRule::Exact { width, height } => Ok((width, height)),
            ResizeRule::ShortestEdge(n) => {
                let (short, long) = if w <= h { (w, h) } else { (h, w) };
                // int(n * long / short), in floating point as Python computes it.
                let new_long = (n as f64 * long as f64 / short as f64) as usize;
                if new_long == 0 || new_long > super::MAX_SIDE as usize {
                    return Err(ImageError::config(
                        "resize",
                        format!("a {w}x{h} image cannot be resized to a shortest edge of {n}"),
                    ));
                }
                Ok(if w <= h { (n, new_long) } else { (new_long, n) })
            }
        }
    }
}

/// The `ch × cw` center of `img`, padded with zeros first where it is smaller.
fn center_crop(
    img: &RgbImage,
    ch: usize,
    cw: usize,
    rule: CropRule,
) -> Result<RgbImage, ImageError> {
    let too_many = (ch.max(img.height) * cw.max(img.width)) as u64 > super::MAX_PIXELS;
    if ch == 0
        || cw == 0
        || ch > super::MAX_SIDE as usize
        || cw > super::MAX_SIDE as usize
        || too_many
    {
        return Err(ImageError::config("crop_size", format!("{ch}x{cw}")));
    }
    let mut img = std::borrow::Cow::Borrowed(img);
    if ch > img.height || cw > img.width {
        let (nh, nw) = (ch.max(img.height), cw.max(img.width));
        let before = |extra: usize| match rule {
            CropRule::HuggingFace => extra.div_ceil(2),
            CropRule::Torchvision => extra / 2,
        };
        let (top, left) = (before(nh - img.height), before(nw - img.width));
        img = std::borrow::Cow::Owned(img.pad(nw, nh, left, top, 0));
    }
    let offset = |size: usize, crop: usize| match rule {
        CropRule::HuggingFace => (size - crop) / 2,
        CropRule::Torchvision => ((size - crop) as f64 / 2.0).round_ties_even() as usize,
    };
    let (top, left) = (offset(img.height, ch), offset(img.width, cw));
    Ok(img.crop(left, top, cw, ch))
}

/// `[3, H, W]` floats: `v · rescale`, then `(x - mean) / std`.
pub fn to_chw(
    img: &RgbImage,
    rescale: Option<f32>,
    normalize: Option<([f32; 3], [f32; 3])>,
) -> PixelValues {
    let plane = img.width * img.height;
    let mut data = vec![0f32; 3 * plane];
    for c in 0..3 {
        let (mean, std) = normalize.map_or((0.0, 1.0), |(m, s)| (m[c], s[c]));
        let out = &mut data[c * plane..(c + 1) * plane];
        for (o, px) in out.iter_mut().zip(img.pixels.chunks_exact(3)) {
            let mut x = f32::from(px[c]);
            if let Some(r) = rescale {
                x *= r;
            }
            if normalize.is_some() {
                x = (x - mean) / std;
            }
            *o = x;
        }
    }
    PixelValues {
        height: img.height,
        width: img.width,
        data,
    }
}

/// The defaults of a Hugging Face image processor class.
struct ClassDefaults {
    size: ResizeRule,
    filter: Filter,
    crop: Option<(usize, usize)>,
    mean: [f32; 3],
    std: [f32; 3],
    default_to_square: bool,
}

impl ClassDefaults {
    fn of(class: &str) -> Result<ClassDefaults, ImageError> {
        let square = |n| ResizeRule::Exact {
            width: n,
            height: n,
        };
        Ok(match class {
            // DINOv2's BitImageProcessor has CLIP's defaults.
            "CLIPImageProcessor" | "CLIPFeatureExtractor" | "BitImageProcessor" | "" => {
                ClassDefaults {
                    size: ResizeRule::ShortestEdge(224),
                    filter: Filter::Bicubic,
                    crop: Some((224, 224)),
                    mean: CLIP_MEAN,
                    std: CLIP_STD,
                    default_to_square: false,
                }
            }
            "SiglipImageProcessor" | "Siglip2ImageProcessor" => ClassDefaults {
                size: square(224),
                filter: Filter::Bicubic,
                crop: None,
                mean: [0.5; 3],
                std: [0.5; 3],
                default_to_square: true,
            },
            "ViTImageProcessor" | "ViTFeatureExtractor" | "DeiTImageProcessor" => ClassDefaults {
                size: square(224),
                filter: Filter::Bilinear,
                crop: None,
                mean: [0.5; 3],
                std: [0.5; 3],
                default_to_square: true,
            },
            "ConvNextImageProcessor" => ClassDefaults {
                size: ResizeRule::ShortestEdge(384),
                filter: Filter::Bicubic,
                crop: None,
                mean: [0.5; 3],
                std: [0.5; 3],
                default_to_square: false,
            },
            other => {
                return Err(ImageError::config(
                    "image_processor_type",
                    format!(
                        "{other} is not supported (CLIPImageProcessor, SiglipImageProcessor, \
                         ViTImageProcessor, DeiTImageProcessor, BitImageProcessor and \
                         ConvNextImageProcessor are)"
                    ),
                ))
            }
        })
    }
}

fn field(k: &str, reason: String) -> ImageError {
    ImageError::config(format!("preprocessor_config.json: {k}"), reason)
}

fn dim(v: &Value, k: &str) -> Result<usize, ImageError> {
    match v.as_u64() {
        Some(n) if n > 0 && n <= u64::from(super::MAX_SIDE) => Ok(n as usize),
        _ => Err(field(k, format!("{v} is not a size in pixels"))),
    }
}

/// A `size` / `crop_size` entry: an integer, `{"shortest_edge": n}` or
/// `{"height": h, "width": w}`.
fn size_rule(v: &Value, k: &str, default_to_square: bool) -> Result<ResizeRule, ImageError> {
    if v.is_u64() {
        let n = dim(v, k)?;
        return Ok(if default_to_square {
            ResizeRule::Exact {
                width: n,
                height: n,
            }
        } else {
            ResizeRule::ShortestEdge(n)
        });
    }
    let o = v
        .as_object()
        .ok_or_else(|| field(k, format!("{v} is not a size")))?;
    if o.get("longest_edge").is_some_and(|l| !l.is_null()) && o.get("shortest_edge").is_some() {
        return Err(field(
            k,
            "shortest_edge with longest_edge is not supported".into(),
        ));
    }
    if let Some(s) = o.get("shortest_edge").filter(|s| !s.is_null()) {
        return Ok(ResizeRule::ShortestEdge(dim(s, k)?));
    }
    match (o.get("height"), o.get("width")) {
        (Some(h), Some(w)) => Ok(ResizeRule::Exact {
            width: dim(w, k)?,
            height: dim(h, k)?,
        }),
        _ => Err(field(
            k,
            format!("{v} has neither shortest_edge nor height and width"),
        )),
    }
}

fn triple(v: Option<&Value>, k: &str) -> Result<Option<[f32; 3]>, ImageError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    if let Some(x) = v.as_f64() {
        return Ok(Some([x as f32; 3]));
    }
    let arr = v
        .as_array()
        .filter(|a| a.len() == 3)
        .ok_or_else(|| field(k, format!("{v} is not 3 numbers")))?;
    let mut out = [0f32; 3];
    for (o, x) in out.iter_mut().zip(arr) {
        *o = x
            .as_f64()
            .ok_or_else(|| field(k, format!("{x} is not a number")))? as f32;
    }
    Ok(Some(out))
}

/// Ultralytics' letterbox: the image scaled to fit `height × width` (keeping its aspect),
/// centred on a grey (114) canvas, values divided by 255.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Letterbox {
    pub height: usize,
    pub width: usize,
}

/// A letterboxed image and how to map boxes back to the original.
#[derive(Clone, Debug)]
pub struct LetterboxInput {
    pub image: RgbImage,
    /// Scale from original to letterboxed pixels (one for both axes).
    pub ratio: f64,
    /// The size `(width, height)` the image was scaled to before padding (each side rounded,
    /// so the exact scale of each axis is `scaled / original`).
    pub scaled: (usize, usize),
    /// Padding added on the left and at the top.
    pub pad: (usize, usize),
    /// The original `(width, height)`.
    pub original: (usize, usize),
}

impl Letterbox {
    pub fn apply(&self, img: &RgbImage) -> Result<LetterboxInput, ImageError> {
        let (h, w) = (img.height as f64, img.width as f64);
        let r = (self.height as f64 / h).min(self.width as f64 / w);
        // Python's round: halves to even.
        let nw = ((w * r).round_ties_even() as usize).max(1);
        let nh = ((h * r).round_ties_even() as usize).max(1);
        let dw = (self.width as f64 - nw as f64) / 2.0;
        let dh = (self.height as f64 - nh as f64) / 2.0;
        let side = |d: f64| -> usize { (d - 0.1).round_ties_even().max(0.0) as usize };
        let (left, top) = (side(dw), side(dh));
        let resized = if (nw, nh) == (img.width, img.height) {
            img.clone()
        } else {
            resize_rgb(img, nw, nh, Filter::Bilinear, ResizeKernel::OpenCv)?
        };
        let right = (dw + 0.1).round_ties_even().max(0.0) as usize;
        let bottom = (dh + 0.1).round_ties_even().max(0.0) as usize;
        let (cw, ch) = (left + nw + right, top + nh + bottom);
        Ok(LetterboxInput {
            image: resized.pad(cw, ch, left, top, 114),
            ratio: r,
            scaled: (nw, nh),
            pad: (left, top),
            original: (img.width, img.height),
        })
    }
}

impl LetterboxInput {
    /// The network input `[3, H, W]`, RGB, values in 0..1.
    pub fn pixel_values(&self) -> PixelValues {
        to_chw(&self.image, Some(1.0 / 255.0), None)
    }
}

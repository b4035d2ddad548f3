//! Image files and uploads to 8-bit RGB: PNG, JPEG, WebP, BMP and GIF (its first frame), the
//! EXIF orientation applied, alpha dropped (as Pillow's `convert("RGB")` does), grey repeated
//! into the three channels.

use super::ImageError;
use image::{DynamicImage, ImageDecoder, ImageReader, Limits};
use std::io::Cursor;
use std::path::Path;

/// The longest side decoded.
pub const MAX_SIDE: u32 = 32_768;
/// The most pixels decoded (width × height), checked against the header before the pixel
/// buffer exists.
pub const MAX_PIXELS: u64 = 1 << 27;
/// The most bytes the decoder may allocate for one image.
const MAX_ALLOC: u64 = 3 << 30;

/// An 8-bit RGB image, rows top to bottom, pixels interleaved (`[r, g, b]` per pixel).
#[derive(Clone, PartialEq, Eq)]
pub struct RgbImage {
    pub width: usize,
    pub height: usize,
    pub pixels: Vec<u8>,
}

impl std::fmt::Debug for RgbImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RgbImage({}x{})", self.width, self.height)
    }
}

impl RgbImage {
    /// An image from interleaved RGB bytes; `pixels.len()` must be `width * height * 3`.
    pub fn new(width: usize, height: usize, pixels: Vec<u8>) -> Result<RgbImage, ImageError> {
        if width == 0 || height == 0 || pixels.len() != width * height * 3 {
            return Err(ImageError::config(
                "image",
                format!(
                    "{} bytes for a {width}x{height} RGB image (need {} and no zero side)",
                    pixels.len(),
                    width * height * 3
                ),
            ));
        }
        Ok(RgbImage {
            width,
            height,
            pixels,
        })
    }

    /// A `width × height` image filled with one colour.
    pub fn filled(width: usize, height: usize, rgb: [u8; 3]) -> RgbImage {
        let pixels = rgb
            .iter()
            .copied()
            .cycle()
            .take(width * height * 3)
            .collect();
        RgbImage {
            width,
            height,
            pixels,
        }
    }

    /// The `w × h` region whose top-left corner is at (`left`, `top`); it must lie inside.
    pub fn crop(&self, left: usize, top: usize, w: usize, h: usize) -> RgbImage {
        debug_assert!(left + w <= self.width && top + h <= self.height);
        let mut pixels = Vec::with_capacity(w * h * 3);
        for y in top..top + h {
            let row = (y * self.width + left) * 3;
            pixels.extend_from_slice(&self.pixels[row..row + w * 3]);
        }
        RgbImage {
            width: w,
            height: h,
            pixels,
        }
    }

    /// This image placed at (`left`, `top`) on a `width × height` canvas of `fill`.
    pub fn pad(&self, width: usize, height: usize, left: usize, top: usize, fill: u8) -> RgbImage {
        debug_assert!(left + self.width <= width && top + self.height <= height);
        let mut pixels = vec![fill; width * height * 3];
        for y in 0..self.height {
            let src = y * self.width * 3;
            let dst = ((top + y) * width + left) * 3;
            pixels[dst..dst + self.width * 3]
                .copy_from_slice(&self.pixels[src..src + self.width * 3]);
        }
        RgbImage {
            width,
            height,
            pixels,
        }
    }
}

/// Decodes an image file (the format is read from its first bytes, not its name).
pub fn decode_image_file(path: &Path) -> Result<RgbImage, ImageError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| ImageError::Io {
        file: file.clone(),
        source,
    })?;
    decode_image_bytes(&bytes, &file)
}

/// Decodes an image held in memory; `name` names it in errors (a path, an upload's name or
/// `<bytes>`).
pub fn decode_image_bytes(bytes: &[u8], name: &str) -> Result<RgbImage, ImageError> {
    match std::panic::catch_unwind(|| decode_inner(bytes, name)) {
        Ok(r) => r,
        Err(p) => Err(ImageError::DecoderPanic {
            file: name.to_string(),
            reason: p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into()),
        }),
    }
}

fn decode_inner(bytes: &[u8], name: &str) -> Result<RgbImage, ImageError> {
    let file = || name.to_string();
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|source| ImageError::Io {
            file: file(),
            source,
        })?;
    if reader.format().is_none() {
        return Err(ImageError::Unsupported {
            file: file(),
            reason: "not a PNG, JPEG, WebP, BMP or GIF file".into(),
        });
    }
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_ALLOC);
    reader.limits(limits);
    let mut decoder = reader
        .into_decoder()
        .map_err(|e| from_image_error(e, name))?;
    let (w, h) = decoder.dimensions();
    if w == 0 || h == 0 {
        return Err(ImageError::Malformed {
            file: file(),
            reason: format!("the header gives a {w}x{h} image"),
        });
    }
    if w > MAX_SIDE || h > MAX_SIDE || u64::from(w) * u64::from(h) > MAX_PIXELS {
        return Err(too_large(name, w.into(), h.into()));
    }
    let orientation = decoder
        .orientation()
        .map_err(|e| from_image_error(e, name))?;
    let mut img = DynamicImage::from_decoder(decoder).map_err(|e| from_image_error(e, name))?;
    img.apply_orientation(orientation);
    let rgb = img.into_rgb8();
    let (width, height) = (rgb.width() as usize, rgb.height() as usize);
    Ok(RgbImage {
        width,
        height,
        pixels: rgb.into_raw(),
    })
}

fn too_large(name: &str, width: u64, height: u64) -> ImageError {
    ImageError::TooLarge {
        file: name.to_string(),
        detail: format!(
            "the header gives {width}x{height} pixels; at most {MAX_SIDE} a side and \
             {MAX_PIXELS} in all are decoded"
        ),
    }
}

fn from_image_error(e: image::ImageError, name: &str) -> ImageError {
    let file = name.to_string();
    match e {
        image::ImageError::IoError(source) => ImageError::Io { file, source },
        image::ImageError::Unsupported(u) => ImageError::Unsupported {
            file,
            reason: u.to_string(),
        },
        image::ImageError::Limits(l) => ImageError::TooLarge {
            file,
            detail: l.to_string(),
        },
        other => ImageError::Malformed {
            file,
            reason: other.to_string(),
        },
    }
}

impl RgbImage {
    /// Draws the outline of the box `[x1, y1, x2, y2]` (pixels, clipped to the image) in
    /// `rgb`, `thickness` pixels wide.
    pub fn draw_box(&mut self, bbox: [f32; 4], rgb: [u8; 3], thickness: usize) {
        let clamp_x = |v: f32| (v.max(0.0) as usize).min(self.width - 1);
        let clamp_y = |v: f32| (v.max(0.0) as usize).min(self.height - 1);
        let (x1, y1, x2, y2) = (
            clamp_x(bbox[0]),
            clamp_y(bbox[1]),
            clamp_x(bbox[2]),
            clamp_y(bbox[3]),
        );
        if x2 < x1 || y2 < y1 {
            return;
        }
        let t = thickness.max(1);
        let mut put = |x: usize, y: usize| {
            let i = (y * self.width + x) * 3;
            self.pixels[i..i + 3].copy_from_slice(&rgb);
        };
        for k in 0..t {
            for x in x1..=x2 {
                put(x, (y1 + k).min(y2));
                put(x, y2.saturating_sub(k).max(y1));
            }
            for y in y1..=y2 {
                put((x1 + k).min(x2), y);
                put(x2.saturating_sub(k).max(x1), y);
            }
        }
    }

    /// Writes the image as a PNG file.
    pub fn save_png(&self, path: &Path) -> Result<(), ImageError> {
        let file = path.display().to_string();
        image::save_buffer_with_format(
            path,
            &self.pixels,
            self.width as u32,
            self.height as u32,
            image::ExtendedColorType::Rgb8,
            image::ImageFormat::Png,
        )
        .map_err(|e| match e {
            image::ImageError::IoError(source) => ImageError::Io { file, source },
            other => ImageError::Malformed {
                file,
                reason: other.to_string(),
            },
        })
    }
}

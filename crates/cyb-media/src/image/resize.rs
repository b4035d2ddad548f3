//! Resizing 8-bit RGB images bit for bit as the Python tools do, so a model sees the pixels it
//! was trained and published with:
//!
//! - [`ResizeKernel::Pillow`]: Pillow's `Image.resize` (what Hugging Face's PIL-backend image
//!   processors and torchvision's transforms on PIL images call). A separable convolution —
//!   horizontal pass first, then vertical — whose filter is widened by the scale when
//!   shrinking (antialiasing); weights in fixed point with 22 fraction bits, the intermediate
//!   image stored as 8 bits.
//! - [`ResizeKernel::Torch`]: torch's antialiased `interpolate` on `uint8` tensors (what Hugging
//!   Face's torchvision-backend image processors, the default where torchvision is installed,
//!   call). The same filters, but weights in 16-bit fixed point whose precision is chosen
//!   per pass from the largest weight, so a few pixels differ from Pillow's by one level.
//! - [`ResizeKernel::OpenCv`]: OpenCV's `cv2.resize(INTER_LINEAR)` (what Ultralytics' letterbox
//!   calls): bilinear between the two nearest source pixels with 11-bit weights, no
//!   antialiasing; an exact halving averages 2×2 blocks as OpenCV does. Bilinear only.

use super::{ImageError, RgbImage};

/// The resampling filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    Nearest,
    Bilinear,
    Bicubic,
    Lanczos,
}

impl Filter {
    /// The filter of Pillow's resample code, as `preprocessor_config.json` stores it
    /// (`resample`: 0 nearest, 1 Lanczos, 2 bilinear, 3 bicubic).
    pub fn from_pil_code(code: i64) -> Result<Filter, ImageError> {
        match code {
            0 => Ok(Filter::Nearest),
            1 => Ok(Filter::Lanczos),
            2 => Ok(Filter::Bilinear),
            3 => Ok(Filter::Bicubic),
            4 | 5 => Err(ImageError::config(
                "resample",
                format!(
                    "Pillow's {} filter is not supported (nearest, bilinear, bicubic and \
                     Lanczos are)",
                    if code == 4 { "box" } else { "Hamming" }
                ),
            )),
            _ => Err(ImageError::config(
                "resample",
                format!("{code} is not one of Pillow's resample codes (0 to 5)"),
            )),
        }
    }

    /// Half the filter's width in source pixels at scale 1.
    fn support(self) -> f64 {
        match self {
            Filter::Nearest => 0.5,
            Filter::Bilinear => 1.0,
            Filter::Bicubic => 2.0,
            Filter::Lanczos => 3.0,
        }
    }

    fn weight(self, x: f64, fixed: Fixed) -> f64 {
        let x = x.abs();
        match self {
            Filter::Nearest => {
                if x < 0.5 {
                    1.0
                } else {
                    0.0
                }
            }
            Filter::Bilinear => (1.0 - x).max(0.0),
            Filter::Bicubic => {
                // Keys' cubic with a = -0.5 (Pillow's and torch's antialiased bicubic).
                const A: f64 = -0.5;
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    // The same polynomial, evaluated in each library's order (the last bits
                    // of the weights differ).
                    match fixed {
                        Fixed::Pillow => (((x - 5.0) * x + 8.0) * x - 4.0) * A,
                        Fixed::Torch => ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A,
                    }
                } else {
                    0.0
                }
            }
            Filter::Lanczos => {
                if x < 3.0 {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let px = x * std::f64::consts::PI;
        px.sin() / px
    }
}

/// Whose resize to reproduce (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResizeKernel {
    Pillow,
    Torch,
    OpenCv,
}

/// `img` resized to `width × height` with `filter`, pixel for pixel as `kernel`'s library.
pub fn resize_rgb(
    img: &RgbImage,
    width: usize,
    height: usize,
    filter: Filter,
    kernel: ResizeKernel,
) -> Result<RgbImage, ImageError> {
    if width == 0
        || height == 0
        || width > super::MAX_SIDE as usize
        || height > super::MAX_SIDE as usize
        || (width * height) as u64 > super::MAX_PIXELS
    {
        return Err(ImageError::config(
            "resize",
            format!(
                "cannot resize to {width}x{height} (at most {} a side and {} pixels)",
                super::MAX_SIDE,
                super::MAX_PIXELS
            ),
        ));
    }
    if width == img.width && height == img.height {
        return Ok(img.clone());
    }
    match (kernel, filter) {
        (ResizeKernel::Pillow, Filter::Nearest) => Ok(nearest(img, width, height, true)),
        (ResizeKernel::Torch, Filter::Nearest) => Ok(nearest(img, width, height, false)),
        (ResizeKernel::Pillow, f) => Ok(convolve(img, width, height, f, Fixed::Pillow)),
        (ResizeKernel::Torch, f) => Ok(convolve(img, width, height, f, Fixed::Torch)),
        (ResizeKernel::OpenCv, Filter::Bilinear) => Ok(opencv_bilinear(img, width, height)),
        (ResizeKernel::OpenCv, f) => Err(ImageError::config(
            "resize",
            format!("OpenCV's {f:?} interpolation is not supported (bilinear is)"),
        )),
    }
}

/// Nearest neighbour. Pillow takes the pixel under each output pixel's centre, stepping the
/// position by `in/out` in double precision (the sum, not the product, so the rounding of
/// the steps decides ties); torch's `nearest` takes `floor(i · in/out)` with the scale in
/// single precision.
fn nearest(img: &RgbImage, width: usize, height: usize, pillow: bool) -> RgbImage {
    let positions = |n_in: usize, n_out: usize| -> Vec<usize> {
        if !pillow {
            let s = n_in as f32 / n_out as f32;
            (0..n_out)
                .map(|i| ((i as f32 * s).floor() as usize).min(n_in - 1))
                .collect()
        } else {
            let step = n_in as f64 / n_out as f64;
            let mut at = step * 0.5;
            (0..n_out)
                .map(|_| {
                    let i = (at as usize).min(n_in - 1);
                    at += step;
                    i
                })
                .collect()
        }
    };
    let xs = positions(img.width, width);
    let ys = positions(img.height, height);
    let mut pixels = Vec::with_capacity(width * height * 3);
    for &yy in &ys {
        let row = &img.pixels[yy * img.width * 3..(yy + 1) * img.width * 3];
        for &x in &xs {
            pixels.extend_from_slice(&row[x * 3..x * 3 + 3]);
        }
    }
    RgbImage {
        width,
        height,
        pixels,
    }
}

/// The weights of one pass: for each output pixel, the first source pixel and how many follow,
/// and `ksize` weights (normalized to sum to 1).
struct Coeffs {
    ksize: usize,
    bounds: Vec<(usize, usize)>,
    weights: Vec<f64>,
}

/// Pillow's `precompute_coeffs` (torch's antialiased weights follow the same rule): output
/// pixel `i` is centred at `(i + 0.5) · in/out` in the source, and when shrinking the filter is
/// widened by the scale. torch also caps a window at `ksize` taps.
fn coeffs(in_size: usize, out_size: usize, filter: Filter, fixed: Fixed) -> Coeffs {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filter.support() * filterscale;
    let ksize = support.ceil() as usize * 2 + 1;
    let inv = 1.0 / filterscale;
    let mut bounds = Vec::with_capacity(out_size);
    let mut weights = vec![0.0; out_size * ksize];
    for (i, k) in weights.chunks_exact_mut(ksize).enumerate() {
        let center = (i as f64 + 0.5) * scale;
        // C's truncating casts, as both libraries write them.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
        let n = xmax.saturating_sub(xmin).min(ksize);
        let mut total = 0.0;
        for (x, w) in k[..n].iter_mut().enumerate() {
            *w = filter.weight((x as f64 + xmin as f64 - center + 0.5) * inv, fixed);
            total += *w;
        }
        if total != 0.0 {
            k[..n].iter_mut().for_each(|w| *w /= total);
        }
        bounds.push((xmin, n));
    }
    Coeffs {
        ksize,
        bounds,
        weights,
    }
}

/// How the float weights become integers, and how sums are rounded back to 8 bits.
#[derive(Clone, Copy)]
enum Fixed {
    Pillow,
    Torch,
}

/// Integer weights of a pass and the number of fraction bits they carry.
struct IntCoeffs {
    ksize: usize,
    bounds: Vec<(usize, usize)>,
    k: Vec<i32>,
    bits: u32,
}

fn to_fixed(c: Coeffs, fixed: Fixed) -> IntCoeffs {
    let bits = match fixed {
        Fixed::Pillow => 22,
        Fixed::Torch => torch_precision(&c.weights),
    };
    let one = (1u64 << bits) as f64;
    let k = c
        .weights
        .iter()
        .map(|&w| {
            if w < 0.0 {
                (-0.5 + w * one) as i32
            } else {
                (0.5 + w * one) as i32
            }
        })
        .collect();
    IntCoeffs {
        ksize: c.ksize,
        bounds: c.bounds,
        k,
        bits,
    }
}

/// torch's weight precision for a pass: the most fraction bits (up to 22) with which the
/// largest weight still fits a signed 16-bit integer.
fn torch_precision(weights: &[f64]) -> u32 {
    let max = weights.iter().fold(0.0f64, |m, &w| m.max(w));
    let mut bits = 0;
    while bits < 22 {
        let next = (0.5 + max * (1u64 << (bits + 1)) as f64) as i64;
        if next >= 1 << 15 {
            break;
        }
        bits += 1;
    }
    bits
}

/// One output value: the weighted sum of `taps` (stride `stride` in `src` from `start`), rounded
/// at `bits` fraction bits and clamped to 0..=255.
#[inline]
fn tap(src: &[u8], start: usize, stride: usize, k: &[i32], bits: u32) -> u8 {
    let mut acc: i64 = 1 << (bits - 1);
    for (j, &w) in k.iter().enumerate() {
        acc += i64::from(src[start + j * stride]) * i64::from(w);
    }
    (acc >> bits).clamp(0, 255) as u8
}

/// The separable convolution resize: a pass per axis whose size changes. torch runs the
/// horizontal pass first; Pillow runs the vertical one first when the height shrinks by more
/// than twice as many pixels as the width.
fn convolve(img: &RgbImage, width: usize, height: usize, filter: Filter, fixed: Fixed) -> RgbImage {
    let need_h = width != img.width;
    let need_v = height != img.height;
    let (dw, dh) = (
        img.width as i64 - width as i64,
        img.height as i64 - height as i64,
    );
    let vertical_first = matches!(fixed, Fixed::Pillow) && dh > 0 && dh > 2 * dw;
    let horizontal =
        |im: &RgbImage| pass_h(im, &to_fixed(coeffs(im.width, width, filter, fixed), fixed));
    let vertical = |im: &RgbImage| {
        pass_v(
            im,
            &to_fixed(coeffs(im.height, height, filter, fixed), fixed),
        )
    };
    match (need_h, need_v, vertical_first) {
        (true, true, false) => vertical(&horizontal(img)),
        (true, true, true) => horizontal(&vertical(img)),
        (true, false, _) => horizontal(img),
        (false, true, _) => vertical(img),
        (false, false, _) => img.clone(),
    }
}

fn pass_h(img: &RgbImage, c: &IntCoeffs) -> RgbImage {
    let width = c.bounds.len();
    let mut out = vec![0u8; width * img.height * 3];
    let bits = c.bits.max(1);
    for (r, orow) in out.chunks_exact_mut(width * 3).enumerate() {
        let src = &img.pixels[r * img.width * 3..(r + 1) * img.width * 3];
        for (x, px) in orow.chunks_exact_mut(3).enumerate() {
            let (xmin, n) = c.bounds[x];
            let k = &c.k[x * c.ksize..x * c.ksize + n];
            for (ch, v) in px.iter_mut().enumerate() {
                *v = tap(src, xmin * 3 + ch, 3, k, bits);
            }
        }
    }
    RgbImage {
        width,
        height: img.height,
        pixels: out,
    }
}

fn pass_v(img: &RgbImage, c: &IntCoeffs) -> RgbImage {
    let height = c.bounds.len();
    let w3 = img.width * 3;
    let mut out = vec![0u8; w3 * height];
    let bits = c.bits.max(1);
    for (y, orow) in out.chunks_exact_mut(w3).enumerate() {
        let (ymin, n) = c.bounds[y];
        let k = &c.k[y * c.ksize..y * c.ksize + n];
        for (i, v) in orow.iter_mut().enumerate() {
            *v = tap(&img.pixels, ymin * w3 + i, w3, k, bits);
        }
    }
    RgbImage {
        width: img.width,
        height,
        pixels: out,
    }
}

/// OpenCV's 8-bit `INTER_LINEAR`.
fn opencv_bilinear(img: &RgbImage, width: usize, height: usize) -> RgbImage {
    if img.width == 2 * width && img.height == 2 * height {
        return halve(img);
    }
    let xs = opencv_taps(img.width, width);
    let ys = opencv_taps(img.height, height);
    let w3 = width * 3;
    // Horizontal pass into 32-bit rows scaled by 2048, each source row once: output rows
    // advance through the source, so the last two rows made are kept.
    let hrow = |sy: usize, row: &mut Vec<i32>| {
        let src = &img.pixels[sy * img.width * 3..(sy + 1) * img.width * 3];
        row.clear();
        for &(sx, a0, a1) in &xs {
            let sx1 = (sx + 1).min(img.width - 1);
            for c in 0..3 {
                row.push(i32::from(src[sx * 3 + c]) * a0 + i32::from(src[sx1 * 3 + c]) * a1);
            }
        }
    };
    let (mut r0, mut r1) = (Vec::with_capacity(w3), Vec::with_capacity(w3));
    let mut held: Option<(usize, usize)> = None;
    let mut pixels = Vec::with_capacity(w3 * height);
    for &(sy, b0, b1) in &ys {
        let sy1 = (sy + 1).min(img.height - 1);
        match held {
            Some(h) if h == (sy, sy1) => {}
            Some((_, last)) if last == sy => {
                std::mem::swap(&mut r0, &mut r1);
                hrow(sy1, &mut r1);
            }
            _ => {
                hrow(sy, &mut r0);
                hrow(sy1, &mut r1);
            }
        }
        held = Some((sy, sy1));
        // The vector path's rounding: both rows cut to 16 bits, multiplied keeping the high
        // half, then rounded by 2 bits.
        for (s0, s1) in r0.iter().zip(&r1) {
            let v = (((s0 >> 4) * b0) >> 16) + (((s1 >> 4) * b1) >> 16);
            pixels.push(((v + 2) >> 2).clamp(0, 255) as u8);
        }
    }
    RgbImage {
        width,
        height,
        pixels,
    }
}

/// For each output index: the left source index and the two 11-bit weights.
fn opencv_taps(in_size: usize, out_size: usize) -> Vec<(usize, i32, i32)> {
    let scale = 1.0 / (out_size as f64 / in_size as f64);
    (0..out_size)
        .map(|d| {
            let f = ((d as f64 + 0.5) * scale - 0.5) as f32;
            let mut s = f.floor() as i64;
            let mut f = f - s as f32;
            if s < 0 {
                s = 0;
                f = 0.0;
            }
            if s >= in_size as i64 - 1 {
                s = in_size as i64 - 1;
                f = 0.0;
            }
            let a0 = ((1.0 - f) * 2048.0).round_ties_even() as i32;
            let a1 = (f * 2048.0).round_ties_even() as i32;
            (s as usize, a0, a1)
        })
        .collect()
}

/// Exact halving: each output pixel is the rounded mean of a 2×2 block.
fn halve(img: &RgbImage) -> RgbImage {
    let (w, h) = (img.width / 2, img.height / 2);
    let mut pixels = Vec::with_capacity(w * h * 3);
    let at = |x: usize, y: usize, c: usize| u32::from(img.pixels[(y * img.width + x) * 3 + c]);
    for y in 0..h {
        for x in 0..w {
            for c in 0..3 {
                let s = at(2 * x, 2 * y, c)
                    + at(2 * x + 1, 2 * y, c)
                    + at(2 * x, 2 * y + 1, c)
                    + at(2 * x + 1, 2 * y + 1, c);
                pixels.push(((s + 2) >> 2) as u8);
            }
        }
    }
    RgbImage {
        width: w,
        height: h,
        pixels,
    }
}

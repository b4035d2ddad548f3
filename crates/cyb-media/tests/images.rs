//! Image decoding and preprocessing against Hugging Face's image processors and torchvision
//! (reference outputs from tools/fixtures/make_image_fixtures.py).

use cyb_media::image::{
    decode_image_bytes, decode_image_file, ImageError, ImageProcessor, ResizeKernel, RgbImage,
};
use serde_json::Value;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/images")
}

fn load(name: &str) -> RgbImage {
    decode_image_file(&dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn cases() -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(dir().join("cases.json")).unwrap();
    serde_json::from_str::<Value>(&text)
        .unwrap()
        .as_object()
        .unwrap()
        .clone()
}

fn processor(case: &Value) -> ImageProcessor {
    let kernel = match case["backend"].as_str().unwrap() {
        "pil" => ResizeKernel::Pillow,
        _ => ResizeKernel::Torch,
    };
    match &case["config"] {
        Value::Null => ImageProcessor::torchvision_imagenet(256, 224),
        c => ImageProcessor::from_config_json(&c.to_string(), kernel).unwrap(),
    }
}

/// Every processor, both backends, every image: the resized and cropped pixels equal the
/// reference's exactly, and the float values agree within 1e-5.
#[test]
fn processors_match_transformers_and_torchvision() {
    let mut failures = Vec::new();
    for (key, case) in cases() {
        let proc = processor(&case);
        for (name, want) in case["images"].as_object().unwrap() {
            let src = load(&format!("src_{name}.png"));
            let got = proc.resize_and_crop(&src).unwrap();
            let out_name = match key.as_str() {
                "imagenet" => format!("out_imagenet_{name}.png"),
                k => format!("out_{k}_{name}.png"),
            };
            let reference = load(&out_name);
            assert_eq!(
                (got.width, got.height),
                (reference.width, reference.height),
                "{key} {name}: size"
            );
            let differ = got
                .pixels
                .iter()
                .zip(&reference.pixels)
                .filter(|(a, b)| a != b)
                .count();
            if differ > 0 {
                failures.push(format!("{key} {name}: {differ} values differ"));
            }
            let pv = proc.process(&src).unwrap();
            let shape: Vec<usize> = want["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as usize)
                .collect();
            assert_eq!(shape, vec![3, pv.height, pv.width], "{key} {name}: shape");
            let stride = want["stride"].as_u64().unwrap() as usize;
            let mut worst = 0f64;
            for (i, w) in want["sample"].as_array().unwrap().iter().enumerate() {
                let d = (f64::from(pv.data[i * stride]) - w.as_f64().unwrap()).abs();
                worst = worst.max(d);
            }
            if worst > 1e-5 {
                failures.push(format!("{key} {name}: float values off by {worst}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn exif_orientation_is_applied() {
    let img = load("exif6.jpg");
    let upright = load("exif6_upright.png");
    assert_eq!((img.width, img.height), (upright.width, upright.height));
    assert_eq!((img.width, img.height), (40, 64));
    // JPEG decoders may round differently by a level or two; the orientation is what counts.
    let mean_diff = img
        .pixels
        .iter()
        .zip(&upright.pixels)
        .map(|(a, b)| (i32::from(*a) - i32::from(*b)).abs())
        .sum::<i32>() as f64
        / img.pixels.len() as f64;
    assert!(mean_diff < 2.0, "mean difference {mean_diff}");
}

#[test]
fn formats_decode_to_the_same_pixels() {
    let src = load("src_small.png");
    let mut buf = Vec::new();
    for format in [
        image::ImageFormat::Bmp,
        image::ImageFormat::Gif,
        image::ImageFormat::WebP,
    ] {
        buf.clear();
        let rgb =
            image::RgbImage::from_raw(src.width as u32, src.height as u32, src.pixels.clone())
                .unwrap();
        rgb.write_to(&mut std::io::Cursor::new(&mut buf), format)
            .unwrap();
        let back = decode_image_bytes(&buf, "<bytes>").unwrap();
        assert_eq!(
            (back.width, back.height),
            (src.width, src.height),
            "{format:?}"
        );
        if format != image::ImageFormat::Gif {
            // GIF quantizes to 256 colours; the others are lossless here.
            assert_eq!(back.pixels, src.pixels, "{format:?}");
        }
    }
}

#[test]
fn hostile_images_are_refused() {
    // A PNG header promising 100,000 x 100,000 pixels: refused before any pixel buffer.
    let mut png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
    png.extend_from_slice(&100_000u32.to_be_bytes());
    png.extend_from_slice(&100_000u32.to_be_bytes());
    png.extend_from_slice(&[8, 2, 0, 0, 0]);
    let crc = crc32(&png[12..]);
    png.extend_from_slice(&crc.to_be_bytes());
    let e = decode_image_bytes(&png, "huge.png").unwrap_err();
    assert!(matches!(e, ImageError::TooLarge { .. }), "{e}");
    assert!(e.to_string().contains("huge.png"), "{e}");

    // Truncations and byte flips of a real file: an error naming it, never a panic.
    let good = std::fs::read(dir().join("src_small.png")).unwrap();
    // (The last 12 bytes are the end chunk, which decoders may do without.)
    for cut in [0, 4, 8, 20, 33, 100, good.len() / 2, good.len() - 13] {
        let e = decode_image_bytes(&good[..cut], "cut.png").unwrap_err();
        assert!(e.to_string().starts_with("cut.png"), "{e}");
    }
    let jpg = std::fs::read(dir().join("exif6.jpg")).unwrap();
    for i in (0..jpg.len()).step_by(37) {
        let mut bad = jpg.clone();
        bad[i] ^= 0xa5;
        // Either it decodes (a flipped coefficient is still a JPEG) or it names the file.
        if let Err(e) = decode_image_bytes(&bad, "flip.jpg") {
            assert!(e.to_string().starts_with("flip.jpg"), "{e}");
        }
    }
    let e = decode_image_bytes(b"GIF89a", "short.gif").unwrap_err();
    assert!(e.to_string().starts_with("short.gif"), "{e}");
    let e = decode_image_bytes(b"hello, world", "text.png").unwrap_err();
    assert!(matches!(e, ImageError::Unsupported { .. }), "{e}");
}

#[test]
fn bad_configs_are_refused() {
    for (cfg, what) in [
        (
            r#"{"image_processor_type": "LlavaNextImageProcessor"}"#,
            "not supported",
        ),
        (
            r#"{"image_processor_type": "ViTImageProcessor", "resample": 4}"#,
            "box",
        ),
        (
            r#"{"image_processor_type": "ViTImageProcessor", "size": {"height": 0, "width": 3}}"#,
            "size",
        ),
        (
            r#"{"image_processor_type": "ViTImageProcessor", "image_std": [0, 1, 1]}"#,
            "divide",
        ),
        (
            r#"{"image_processor_type": "ViTImageProcessor", "image_mean": [1, 2]}"#,
            "3 numbers",
        ),
        ("[1, 2]", "JSON object"),
    ] {
        let e = ImageProcessor::from_config_json(cfg, ResizeKernel::Pillow).unwrap_err();
        assert!(e.to_string().contains(what), "{cfg}: {e}");
    }
}

/// A config asking for an enormous resize or crop is refused when it is applied, before the
/// output is allocated.
#[test]
fn enormous_outputs_are_refused() {
    let img = RgbImage::filled(64, 16, [1, 2, 3]);
    for cfg in [
        r#"{"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 30000}, "do_center_crop": false}"#,
        r#"{"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 16}, "crop_size": {"height": 30000, "width": 30000}}"#,
    ] {
        let p = ImageProcessor::from_config_json(cfg, ResizeKernel::Pillow).unwrap();
        let e = p.process(&img).unwrap_err().to_string();
        assert!(e.contains("30000") || e.contains("pixels"), "{cfg}: {e}");
    }
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Resizes of one image to many sizes (up, down, one side kept, 1–3 pixels) against Pillow,
/// torch and OpenCV themselves: Pillow's and torch's exactly; OpenCV's within one level (its
/// vector and scalar paths round the last bit differently).
#[test]
fn resizes_match_pillow_torch_and_opencv() {
    use cyb_media::image::{resize_rgb, Filter};
    let src = load("src_small.png");
    let mut failures = Vec::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(dir().join("resize")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let stem = name.trim_end_matches(".png");
        let parts: Vec<&str> = stem.split('_').collect();
        let (lib, filter, size) = (parts[0], parts[1], parts[2]);
        let (w, h) = size.split_once('x').unwrap();
        let (w, h): (usize, usize) = (w.parse().unwrap(), h.parse().unwrap());
        let kernel = match lib {
            "pil" => ResizeKernel::Pillow,
            "torch" => ResizeKernel::Torch,
            _ => ResizeKernel::OpenCv,
        };
        let filter = match filter {
            "nearest" => Filter::Nearest,
            "bilinear" => Filter::Bilinear,
            "lanczos" => Filter::Lanczos,
            _ => Filter::Bicubic,
        };
        let got = resize_rgb(&src, w, h, filter, kernel).unwrap();
        let want = load(&format!("resize/{name}"));
        assert_eq!((got.width, got.height), (want.width, want.height), "{name}");
        let diffs: Vec<i32> = got
            .pixels
            .iter()
            .zip(&want.pixels)
            .map(|(a, b)| (i32::from(*a) - i32::from(*b)).abs())
            .filter(|d| *d > 0)
            .collect();
        let allowed = if kernel == ResizeKernel::OpenCv { 1 } else { 0 };
        if diffs.iter().any(|d| *d > allowed) {
            failures.push(format!(
                "{name}: {} values differ, by up to {}",
                diffs.len(),
                diffs.iter().max().unwrap()
            ));
        }
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} reference resizes found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

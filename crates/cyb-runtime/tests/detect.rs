//! The real YOLOv8n DocLayNet layout detector (tools/fetch_onnx_models.sh) against Ultralytics'
//! own predictions on drawn pages (tests/fixtures/detect, made by
//! tools/fixtures/make_detect_fixtures.py). With `CI=true` a missing model fails the test.

use cyb_runtime::{DetectOptions, Detection, Runtime, RuntimeOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn model() -> Option<PathBuf> {
    let cache = cyb_runtime::cache_dir();
    let p = std::env::var_os("CYB_ONNX_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join("onnx-models"))
        .join("layout/yolov8n-doclaynet.onnx");
    if p.is_file() {
        return Some(p);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{} is missing (run tools/fetch_onnx_models.sh)",
        p.display()
    );
    eprintln!(
        "skipping: {} is missing (tools/fetch_onnx_models.sh)",
        p.display()
    );
    None
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/detect")
}

fn iou(a: &[f32; 4], b: &[f32; 4]) -> f32 {
    let w = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let h = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let area = |r: &[f32; 4]| (r[2] - r[0]) * (r[3] - r[1]);
    w * h / (area(a) + area(b) - w * h)
}

/// Each detection on one side with a score clear of the threshold has a partner on the other:
/// the same class, IoU ≥ 0.99, the score within 0.01.
fn unmatched(from: &[Detection], to: &[Detection], conf: f32) -> Vec<String> {
    from.iter()
        .filter(|d| d.score > conf + 0.02)
        .filter(|d| {
            !to.iter().any(|t| {
                t.class == d.class
                    && iou(&t.bbox, &d.bbox) >= 0.99
                    && (t.score - d.score).abs() < 0.01
            })
        })
        .map(|d| format!("{} {:.3} {:?}", d.label, d.score, d.bbox))
        .collect()
}

#[test]
fn layout_detector_matches_ultralytics() {
    let Some(path) = model() else { return };
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    let det = rt.load_detector(&path).unwrap();
    assert_eq!(det.input_size(), (1024, 1024));
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("expected.json")).unwrap())
            .unwrap();
    let names: Vec<&str> = expected["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(det.names(), names);
    let opts = DetectOptions {
        conf: expected["conf"].as_f64().unwrap() as f32,
        iou: expected["iou"].as_f64().unwrap() as f32,
        ..DetectOptions::default()
    };
    let mut failures = Vec::new();
    for (page, want) in expected["pages"].as_object().unwrap() {
        let img = cyb_runtime::vision::load_image(&fixtures().join(format!("{page}.png"))).unwrap();
        let got = det.detect(&img, &opts).unwrap();
        let want: Vec<Detection> = want
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let b: Vec<f32> = d["bbox"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap() as f32)
                    .collect();
                let class = d["class"].as_u64().unwrap() as usize;
                Detection {
                    class,
                    label: names[class].to_string(),
                    score: d["score"].as_f64().unwrap() as f32,
                    bbox: [b[0], b[1], b[2], b[3]],
                }
            })
            .collect();
        assert!(
            want.len() >= 5,
            "{page}: the reference found only {}",
            want.len()
        );
        for m in unmatched(&want, &got, opts.conf) {
            failures.push(format!("{page}: Ultralytics found {m}, cyb-llm did not"));
        }
        for m in unmatched(&got, &want, opts.conf) {
            failures.push(format!("{page}: cyb-llm found {m}, Ultralytics did not"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn detector_refuses_what_it_cannot_run() {
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    // A graph that is not a detector: an ONNX node test model with two inputs.
    let dir = tempdir();
    let e = rt.load_detector(&dir.join("missing.onnx")).unwrap_err();
    assert!(e.to_string().contains("missing.onnx"), "{e}");
    let Some(path) = model() else { return };
    let det = rt.load_detector(&path).unwrap();
    let img = cyb_media::image::RgbImage::filled(64, 48, [255, 255, 255]);
    let bad = DetectOptions {
        conf: 1.5,
        ..DetectOptions::default()
    };
    let e = det.detect(&img, &bad).unwrap_err();
    assert!(e.to_string().contains("conf"), "{e}");
    // A blank page: nothing found, no error.
    assert!(det
        .detect(&img, &DetectOptions::default())
        .unwrap()
        .is_empty());
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("cyb-detect-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

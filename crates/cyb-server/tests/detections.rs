//! `POST /v1/detections` over the real YOLOv8n DocLayNet layout detector
//! (tools/fetch_onnx_models.sh): the objects of a drawn page equal Ultralytics' predictions
//! (tests/fixtures/detect, tools/fixtures/make_detect_fixtures.py); images as base64, data
//! URLs and `{"url": ...}`; 400s for what cannot be answered. With `CI=true` a missing model
//! fails the test.

mod common;

use base64::Engine;
use common::*;
use cyb_runtime::{Runtime, RuntimeOptions};
use cyb_server::{ServedVision, ServerConfig, VisionNet};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

fn layout_model() -> Option<PathBuf> {
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
    eprintln!("skipping: {} is missing", p.display());
    None
}

#[tokio::test]
async fn detections_match_ultralytics() {
    let Some(path) = layout_model() else { return };
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    let detector = Arc::new(rt.load_detector(&path).unwrap());
    let config = ServerConfig {
        vision: vec![ServedVision {
            id: "layout".into(),
            net: VisionNet::Detector(detector),
        }],
        ..ServerConfig::default()
    };
    let s = start(vec![("tiny", fixture("tiny_chat/hf"))], config).await;
    let url = s.url("/v1/detections");
    let png = std::fs::read(fixture("detect/page_wide.png")).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("detect/expected.json")).unwrap())
            .unwrap();
    let want = expected["pages"]["page_wide"].as_array().unwrap();
    let names = expected["names"].as_array().unwrap();

    for image in [
        json!(b64),
        json!(format!("data:image/png;base64,{b64}")),
        json!({"url": format!("data:image/png;base64,{b64}")}),
    ] {
        let (st, v) = post(&url, &json!({"image": image})).await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["model"], "layout");
        let page = &v["data"][0];
        assert_eq!(
            (page["width"].as_u64(), page["height"].as_u64()),
            (Some(1024), Some(768))
        );
        let objects = page["objects"].as_array().unwrap();
        assert_eq!(objects.len(), want.len(), "{v}");
        // The best object: same class, box and score as Ultralytics'.
        let (got, best) = (&objects[0], &want[0]);
        assert_eq!(
            got["label"],
            names[best["class"].as_u64().unwrap() as usize]
        );
        let score = |x: &Value| x.as_f64().unwrap();
        assert!(
            (score(&got["score"]) - score(&best["score"])).abs() < 0.01,
            "{got} vs {best}"
        );
        for k in 0..4 {
            let (a, b) = (score(&got["box"][k]), score(&best["bbox"][k]));
            assert!((a - b).abs() < 1.0, "{got} vs {best}");
        }
    }

    // Two images, a higher threshold.
    let (st, v) = post(
        &url,
        &json!({"model": "layout", "images": [b64, b64], "conf": 0.8}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    let strong = want
        .iter()
        .filter(|d| d["score"].as_f64().unwrap() > 0.8)
        .count();
    assert_eq!(data[1]["objects"].as_array().unwrap().len(), strong);

    // The detector is listed.
    let models = get_json(&s.url("/v1/models")).await;
    assert!(models["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["id"] == "layout"));

    for (body, what) in [
        (json!({}), "image is required"),
        (json!({"image": "%%%"}), "base64"),
        (json!({"image": "https://example.com/a.png"}), "not fetched"),
        (json!({"image": "data:image/png,abc"}), "base64"),
        (json!({"image": b64, "conf": 2.0}), "conf"),
        (json!({"images": []}), "between 1 and"),
        (
            json!({"image": base64::engine::general_purpose::STANDARD.encode(b"not an image")}),
            "unsupported image",
        ),
        (
            json!({"model": "tiny", "image": b64}),
            "does not answer /v1/detections",
        ),
    ] {
        let (st, v) = post(&url, &body).await;
        assert_eq!(st, 400, "{body}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(what), "{body}: {msg}");
    }
    let (st, _) = post(&url, &json!({"model": "nope", "image": b64})).await;
    assert_eq!(st, 404);
}

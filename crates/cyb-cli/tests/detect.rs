//! `cyb-llm detect` with the real YOLOv8n DocLayNet layout detector (tools/fetch_onnx_models.sh)
//! on a drawn page whose Ultralytics predictions are in tests/fixtures/detect: the JSON lists
//! as many objects, the best one Ultralytics' best; `-o` writes the page with boxes drawn;
//! a file that is no image is refused by name. With `CI=true` a missing model fails.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

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
    None
}

#[test]
fn detect_prints_json_and_draws_boxes() {
    let Some(model) = layout_model() else { return };
    let page = fixture("detect/page_letter.png");
    let out = std::env::temp_dir().join(format!("cyb-detect-{}.png", std::process::id()));
    let o = Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .args(["detect", "--backend", "cpu", "--json", "-o"])
        .arg(&out)
        .arg(&model)
        .arg(&page)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("detect/expected.json")).unwrap())
            .unwrap();
    let want = expected["pages"]["page_letter"].as_array().unwrap();
    let objects = v[0]["objects"].as_array().unwrap();
    assert_eq!(objects.len(), want.len(), "{v}");
    let best_class = want[0]["class"].as_u64().unwrap() as usize;
    assert_eq!(objects[0]["label"], expected["names"][best_class]);
    assert_eq!(
        (v[0]["width"].as_u64(), v[0]["height"].as_u64()),
        (Some(850), Some(1100))
    );
    let drawn = cyb_media::image::decode_image_file(&out).unwrap();
    let original = cyb_media::image::decode_image_file(&page).unwrap();
    assert_eq!(
        (drawn.width, drawn.height),
        (original.width, original.height)
    );
    assert_ne!(drawn.pixels, original.pixels, "no box was drawn");
    std::fs::remove_file(&out).ok();

    let o = Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .args(["detect", "--backend", "cpu"])
        .arg(&model)
        .arg(fixture("detect/expected.json"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("expected.json") && err.contains("unsupported image"),
        "{err}"
    );
}

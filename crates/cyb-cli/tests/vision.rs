//! `cyb-llm classify-image` and `cyb-llm embed --image` on the tiny random-weight ViT, CLIP and
//! SigLIP of tests/fixtures/vision, against transformers' pipelines
//! (tools/fixtures/make_vision_fixtures.py).

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

fn cyb(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("vision/reference.json")).unwrap())
        .unwrap()
}

#[test]
fn classify_image_matches_the_pipelines() {
    let r = reference();
    let img = fixture("images/src_wide.png");
    let vit = fixture("vision/vit");
    let (ok, out, err) = cyb(&[
        "classify-image",
        "--backend",
        "cpu",
        vit.to_str().unwrap(),
        img.to_str().unwrap(),
        "--top-k",
        "3",
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let got = v[0]["labels"].as_array().unwrap();
    let want = r["vit"]["pipeline"]["wide"].as_array().unwrap();
    assert_eq!(got.len(), 3);
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g["label"], w["label"]);
        assert!((g["score"].as_f64().unwrap() - w["score"].as_f64().unwrap()).abs() < 1e-5);
    }

    let clip = fixture("vision/clip");
    let (ok, out, err) = cyb(&[
        "classify-image",
        "--backend",
        "cpu",
        clip.to_str().unwrap(),
        img.to_str().unwrap(),
        "--labels",
        "cat,red circle,blue gradient,tree",
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let got = v[0]["labels"].as_array().unwrap();
    let want = r["clip"]["zero_shot"]["wide"].as_array().unwrap();
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g["label"], w["label"]);
        assert!((g["score"].as_f64().unwrap() - w["score"].as_f64().unwrap()).abs() < 1e-5);
    }

    // A head-less model asked for labels it has no head for, and labels for a model without a
    // text tower: clear errors.
    let dino = fixture("vision/dinov2");
    let (ok, _, err) = cyb(&[
        "classify-image",
        dino.to_str().unwrap(),
        img.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("no image-classification head"), "{err}");
    let (ok, _, err) = cyb(&[
        "classify-image",
        vit.to_str().unwrap(),
        img.to_str().unwrap(),
        "--labels",
        "a,b",
    ]);
    assert!(!ok && err.contains("no text tower"), "{err}");
}

#[test]
fn embed_images_and_texts() {
    let siglip = fixture("vision/siglip");
    let (a, b) = (
        fixture("images/src_wide.png"),
        fixture("images/src_tall.png"),
    );
    let (ok, out, err) = cyb(&[
        "embed",
        "--backend",
        "cpu",
        siglip.to_str().unwrap(),
        "a red circle",
        "--image",
        a.to_str().unwrap(),
        "--image",
        b.to_str().unwrap(),
        "--normalize",
    ]);
    assert!(ok, "{err}");
    let v: Vec<Vec<f32>> = serde_json::from_str(&out).unwrap();
    assert_eq!(v.len(), 3);
    for e in &v {
        let n: f32 = e.iter().map(|x| x * x).sum();
        assert!((n - 1.0).abs() < 1e-4);
    }
    // The text vector is the text tower's (transformers' get_text_features of the padded ids is
    // checked in the model tests); the two images differ.
    assert_ne!(v[1], v[2]);
    let vit = fixture("vision/vit");
    let (ok, _, err) = cyb(&["embed", vit.to_str().unwrap(), "some text"]);
    assert!(!ok && err.contains("vision model"), "{err}");
}

/// `--arch` on the real MobileNetV2 checkpoint (tools/fetch_mobilenet_weights.sh): the top
/// class is torchvision's (tests/fixtures/pytorch/mobilenet_v2.json); a checkpoint whose pickle
/// asks for os.system is refused naming the global.
#[test]
fn classify_image_with_a_pytorch_checkpoint() {
    let img = fixture("images/src_tall.png");
    let evil = fixture("pytorch/evil.pth");
    let (ok, _, err) = cyb(&[
        "classify-image",
        evil.to_str().unwrap(),
        "--arch",
        "resnet18",
        img.to_str().unwrap(),
    ]);
    assert!(
        !ok && err.contains("system") && err.contains("evil.pth"),
        "{err}"
    );
    let cache = cyb_runtime::cache_dir();
    let pth = cache.join("torchvision/mobilenet_v2-b0353104.pth");
    if !pth.is_file() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{} is missing (run tools/fetch_mobilenet_weights.sh)",
            pth.display()
        );
        return;
    }
    let (ok, out, err) = cyb(&[
        "classify-image",
        "--backend",
        "cpu",
        pth.to_str().unwrap(),
        "--arch",
        "mobilenet_v2",
        img.to_str().unwrap(),
        "--top-k",
        "1",
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let want: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("pytorch/mobilenet_v2.json")).unwrap(),
    )
    .unwrap();
    let logits: Vec<f64> = want["logits"]["tall"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let top = logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .unwrap()
        .0;
    assert_eq!(
        v[0]["labels"][0]["class"].as_u64(),
        Some(top as u64),
        "{out}"
    );
}

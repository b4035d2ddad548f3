//! Image classification and zero-shot classification against transformers' pipelines, on the
//! tiny random-weight ViT, CLIP and SigLIP of tests/fixtures/vision
//! (tools/fixtures/make_vision_fixtures.py: `image-classification` and
//! `zero-shot-image-classification` with the PIL-backend processors).

use cyb_media::image::ResizeKernel;
use cyb_runtime::{Runtime, RuntimeOptions};
use serde_json::Value;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn reference() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("vision/reference.json")).unwrap(),
    )
    .unwrap()
}

fn image(name: &str) -> cyb_media::image::RgbImage {
    cyb_runtime::vision::load_image(&fixtures().join(format!("images/src_{name}.png"))).unwrap()
}

fn check(what: &str, got: &[cyb_runtime::LabelScore], want: &Value) {
    let want = want.as_array().unwrap();
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.label, w["label"].as_str().unwrap(), "{what}: order");
        let ws = w["score"].as_f64().unwrap() as f32;
        assert!(
            (g.score - ws).abs() < 1e-5,
            "{what}: {} {} vs {ws}",
            g.label,
            g.score
        );
    }
}

#[test]
fn classification_and_zero_shot_match_the_pipelines() {
    let r = reference();
    let rt = Runtime::new(RuntimeOptions {
        backend: Some("cpu".into()),
        ..Default::default()
    })
    .unwrap();
    let vit = rt
        .load_image_model(&fixtures().join("vision/vit"), ResizeKernel::Pillow)
        .unwrap();
    for name in ["wide", "tall"] {
        let img = image(name);
        let got = vit.classify(&[&img], 3).unwrap();
        check(&format!("vit {name}"), &got[0], &r["vit"]["pipeline"][name]);
    }
    for model in ["clip", "siglip"] {
        let m = rt
            .load_image_model(
                &fixtures().join(format!("vision/{model}")),
                ResizeKernel::Pillow,
            )
            .unwrap();
        let labels: Vec<&str> = r[model]["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        for name in ["wide", "tall"] {
            let img = image(name);
            let got = m
                .zero_shot(&[&img], &labels, cyb_runtime::vision::DEFAULT_TEMPLATE)
                .unwrap();
            check(
                &format!("{model} {name}"),
                &got[0],
                &r[model]["zero_shot"][name],
            );
        }
        // Two images in one batch give what each gives alone.
        let (a, b) = (image("wide"), image("tall"));
        let both = m.embed_images(&[&a, &b], true).unwrap();
        let alone = m.embed_images(&[&b], true).unwrap();
        for (x, y) in both[1].iter().zip(&alone[0]) {
            assert!((x - y).abs() < 1e-6);
        }
        let n: f32 = both[0].iter().map(|x| x * x).sum();
        assert!((n - 1.0).abs() < 1e-5);
    }
    let e = vit
        .zero_shot(&[&image("wide")], &["cat"], "{}")
        .unwrap_err();
    assert!(e.to_string().contains("no text tower"), "{e}");
    let dino = rt
        .load_image_model(&fixtures().join("vision/dinov2"), ResizeKernel::Pillow)
        .unwrap();
    let e = dino.classify(&[&image("wide")], 3).unwrap_err();
    assert!(
        e.to_string().contains("no image-classification head"),
        "{e}"
    );
}

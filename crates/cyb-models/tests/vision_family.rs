//! The ViTStyle family against transformers: tiny random-weight ViT (with a classification
//! head), CLIP, SigLIP, DINOv2 (positions interpolated) and DINOv2 with registers
//! (tests/fixtures/vision, made by tools/fixtures/make_vision_fixtures.py), on images that go
//! through the real preprocessing (each directory's preprocessor_config.json, Pillow's resize).

use cyb_backend::{Backend, Dispatcher};
use cyb_media::image::{decode_image_file, ImageProcessor, ResizeKernel};
use cyb_models::VisionModel;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn reference() -> Value {
    let text = std::fs::read_to_string(fixtures().join("vision/reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn dispatchers() -> Vec<(&'static str, Arc<Dispatcher>)> {
    let cpu: Arc<dyn Backend> = Arc::new(cyb_cpu::CpuBackend::new().unwrap());
    vec![
        ("reference", Arc::new(Dispatcher::reference())),
        ("cpu", Arc::new(Dispatcher::new(vec![cpu]))),
    ]
}

fn values(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// Largest absolute difference, relative to the reference's largest magnitude (at least 1).
fn close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let diff = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let scale = want.iter().map(|y| y.abs()).fold(1f32, f32::max);
    assert!(
        diff / scale <= tol,
        "{what}: off by {diff:e} (scale {scale})"
    );
}

fn strided(v: &Value, all: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let stride = v["stride"].as_u64().unwrap() as usize;
    let want = values(&v["sample"]);
    let got = all
        .iter()
        .step_by(stride)
        .copied()
        .take(want.len())
        .collect();
    (got, want)
}

/// The model's preprocessed input for one image, checked against the processor's.
fn pixels(model: &str, image: &str, want: &Value) -> (Vec<f32>, usize, usize) {
    let cfg = std::fs::read_to_string(
        fixtures().join(format!("vision/{model}/preprocessor_config.json")),
    )
    .unwrap();
    let proc = ImageProcessor::from_config_json(&cfg, ResizeKernel::Pillow).unwrap();
    let img = decode_image_file(&fixtures().join(format!("images/src_{image}.png"))).unwrap();
    let pv = proc.process(&img).unwrap();
    let (got, w) = strided(&want["pixel_values"], &pv.data);
    close(&format!("{model} {image} pixel_values"), &got, &w, 1e-6);
    (pv.data, pv.height, pv.width)
}

const TOL: f32 = 1e-5;

#[test]
fn vision_models_match_transformers() {
    let r = reference();
    for (backend, d) in dispatchers() {
        for model in ["vit", "clip", "siglip", "dinov2", "dinov2_reg"] {
            let file = cyb_format::open(fixtures().join(format!("vision/{model}"))).unwrap();
            let m = VisionModel::load(&file, d.clone()).unwrap();
            let refm = &r[model];
            for image in ["wide", "tall"] {
                let want = &refm[image];
                let tag = format!("{backend} {model} {image}");
                let (px, h, w) = pixels(model, image, want);
                let out = m.encode(&px, 1, h, w).unwrap();
                let (got, exp) = strided(&want["last_hidden_state"], &out.last_hidden_state);
                close(&format!("{tag} last_hidden_state"), &got, &exp, TOL);
                if let Some(p) = want.get("pooler_output") {
                    close(
                        &format!("{tag} pooler_output"),
                        &out.pooled[0],
                        &values(&p["values"]),
                        TOL,
                    );
                }
                if let Some(l) = want.get("logits") {
                    let logits = m.image_logits(&px, 1, h, w).unwrap();
                    close(
                        &format!("{tag} logits"),
                        &logits[0],
                        &values(&l["values"]),
                        TOL,
                    );
                }
                if let Some(e) = want.get("image_embeds") {
                    let emb = m.image_embeds(&px, 1, h, w).unwrap();
                    close(
                        &format!("{tag} image_embeds"),
                        &emb[0],
                        &values(&e["values"]),
                        TOL,
                    );
                }
            }
            if let Some(t) = refm.get("text_embeds") {
                let pad = if model == "clip" { Some(1) } else { None };
                let ids: Vec<Vec<u32>> = refm["text_ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| {
                        let mut v: Vec<u32> = s
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_u64().unwrap() as u32)
                            .collect();
                        // CLIP runs the unpadded sequence (its causal mask keeps pads out anyway).
                        if let Some(p) = pad {
                            while v.last() == Some(&p) {
                                v.pop();
                            }
                        }
                        v
                    })
                    .collect();
                let got = m.text_embeds(&ids).unwrap().concat();
                close(
                    &format!("{backend} {model} text_embeds"),
                    &got,
                    &values(&t["values"]),
                    TOL,
                );
                let scale = refm["logit_scale"].as_f64().unwrap() as f32;
                assert!((m.logit_scale().unwrap() - scale).abs() < 1e-5 * scale);
                if let Some(b) = refm.get("logit_bias") {
                    assert!((m.logit_bias().unwrap() - b.as_f64().unwrap() as f32).abs() < 1e-6);
                }
            }
        }
    }
}

#[test]
fn vision_models_refuse_what_they_cannot_run() {
    let d = Arc::new(Dispatcher::reference());
    let file = cyb_format::open(fixtures().join("vision/vit")).unwrap();
    let m = VisionModel::load(&file, d).unwrap();
    let e = m.encode(&vec![0.0; 3 * 48 * 48], 1, 48, 48).unwrap_err();
    assert!(e.to_string().contains("32x32"), "{e}");
    let e = m.encode(&[0.0; 10], 1, 32, 32).unwrap_err();
    assert!(e.to_string().contains("values"), "{e}");
    let e = m.text_embeds(&[vec![1, 2]]).unwrap_err();
    assert!(e.to_string().contains("no text tower"), "{e}");
}

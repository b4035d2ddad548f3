//! `POST /v1/classifications` and images in `POST /v1/embeddings` over the tiny random-weight
//! ViT and CLIP of tests/fixtures/vision: scores equal transformers' pipelines
//! (tools/fixtures/make_vision_fixtures.py), embeddings equal the runtime's; 400s for what a
//! model cannot answer.

mod common;

use base64::Engine;
use common::*;
use cyb_media::image::ResizeKernel;
use cyb_runtime::{Runtime, RuntimeOptions};
use cyb_server::{ServedVision, ServerConfig, VisionNet};
use serde_json::{json, Value};
use std::sync::Arc;

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("vision/reference.json")).unwrap())
        .unwrap()
}

fn close_scores(got: &Value, want: &Value) {
    let (g, w) = (got.as_array().unwrap(), want.as_array().unwrap());
    assert_eq!(g.len(), w.len(), "{got} vs {want}");
    for (a, b) in g.iter().zip(w) {
        assert_eq!(a["label"], b["label"]);
        assert!(
            (a["score"].as_f64().unwrap() - b["score"].as_f64().unwrap()).abs() < 1e-5,
            "{a} vs {b}"
        );
    }
}

#[tokio::test]
async fn classifications_and_image_embeddings() {
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    let load = |name: &str| {
        Arc::new(
            rt.load_image_model(&fixture(&format!("vision/{name}")), ResizeKernel::Pillow)
                .unwrap(),
        )
    };
    let (vit, clip) = (load("vit"), load("clip"));
    let config = ServerConfig {
        vision: vec![
            ServedVision {
                id: "vit".into(),
                net: VisionNet::Image(vit),
            },
            ServedVision {
                id: "clip".into(),
                net: VisionNet::Image(clip.clone()),
            },
        ],
        ..ServerConfig::default()
    };
    let s = start(vec![("tiny", fixture("tiny_chat/hf"))], config).await;
    let r = reference();
    let png = std::fs::read(fixture("images/src_wide.png")).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
    let url = s.url("/v1/classifications");

    let (st, v) = post(&url, &json!({"model": "vit", "image": b64, "top_k": 3})).await;
    assert_eq!(st, 200, "{v}");
    close_scores(&v["data"][0]["labels"], &r["vit"]["pipeline"]["wide"]);

    let labels = r["clip"]["labels"].clone();
    let (st, v) = post(&url, &json!({"model": "clip", "images": [format!("data:image/png;base64,{b64}")], "labels": labels})).await;
    assert_eq!(st, 200, "{v}");
    close_scores(&v["data"][0]["labels"], &r["clip"]["zero_shot"]["wide"]);

    for (body, what) in [
        (
            json!({"model": "vit", "image": b64, "labels": ["a"]}),
            "no text tower",
        ),
        (
            json!({"model": "clip", "image": b64}),
            "no classification head",
        ),
        (
            json!({"model": "clip", "image": b64, "labels": ["a"], "template": "x"}),
            "template",
        ),
        (json!({"model": "tiny", "image": b64}), "does not answer"),
        (json!({"model": "vit"}), "image is required"),
    ] {
        let (st, v) = post(&url, &body).await;
        assert_eq!(st, 400, "{body}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(what),
            "{body}: {v}"
        );
    }

    // Embeddings: a text and an image in one request, equal to the runtime's own.
    let url = s.url("/v1/embeddings");
    let body =
        json!({"model": "clip", "input": ["a red circle", {"image": b64}], "normalize": true});
    let (st, v) = post(&url, &body).await;
    assert_eq!(st, 200, "{v}");
    let img = cyb_runtime::vision::decode_image(&png, "x").unwrap();
    let want_img = clip.embed_images(&[&img], true).unwrap().remove(0);
    let want_txt = clip.embed_texts(&["a red circle"], true).unwrap().remove(0);
    let got = |i: usize| -> Vec<f32> {
        v["data"][i]["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    assert_eq!(got(0), want_txt);
    assert_eq!(got(1), want_img);
    let body = json!({"model": "vit", "input": "text"});
    let (st, v) = post(&url, &body).await;
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("images only"),
        "{v}"
    );
    let body =
        json!({"model": "clip", "input": [{"image_url": {"url": "https://example.com/x.png"}}]});
    let (st, v) = post(&url, &body).await;
    assert_eq!(st, 400, "{v}");
    // The text model keeps answering text embeddings as before (a 400: it is a generator).
    let (st, _) = post(&url, &json!({"model": "tiny", "input": "x"})).await;
    assert_eq!(st, 400);
}

//! `POST /v1/detections`: objects in images from a YOLO detector served with the text models.
//!
//! Request (JSON): `model` (a detector's id; optional when the server has one), `image` (one
//! image) or `images` (several), each a base64 string, a `data:image/...;base64,` URL, or
//! `{"url": DATA_URL}` as OpenAI's `image_url` parts carry it; optional `conf` (0.25), `iou`
//! (0.7), `max_det` (300), `agnostic` (false). Remote URLs are refused: the server does not
//! fetch. Response: `{"object": "list", "model", "data": [{"index", "width", "height",
//! "objects": [{"label", "class", "score", "box": [x1, y1, x2, y2]}]}]}`, boxes in the
//! original image's pixels, objects by descending score.

use crate::error::ApiError;
use crate::request::parse_body;
use crate::{sse, AppState};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use cyb_runtime::DetectOptions;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// Images per request.
const MAX_IMAGES: usize = 16;

#[derive(Deserialize)]
struct DetectRequest {
    model: Option<String>,
    image: Option<Value>,
    images: Option<Vec<Value>>,
    conf: Option<f32>,
    iou: Option<f32>,
    max_det: Option<usize>,
    agnostic: Option<bool>,
}

pub async fn detections(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = sse::body_bytes(body)?;
    let req: DetectRequest = parse_body(&body)?;
    let served = &state.config.detectors;
    let entry =
        match req
            .model
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
        {
            Some(id) => {
                served.iter().find(|d| d.id == id).ok_or_else(|| {
                    match state.models.kind_of(id) {
                Some(_) => ApiError::invalid(
                    "model",
                    format!("model {id} is not a detector: /v1/detections needs a YOLO detector"),
                )
                .with_code("model_not_supported"),
                None => ApiError::model_not_found(id),
            }
                })?
            }
            None => served.first().ok_or_else(|| {
                ApiError::invalid(
                    "model",
                    "this server has no detector (serve a YOLO ONNX export to answer \
                 /v1/detections)",
                )
                .with_code("model_not_supported")
            })?,
        };
    let bad =
        |param: &'static str, msg: String| ApiError::invalid(param, msg).with_code("invalid_value");
    let images: Vec<Value> = match (req.image, req.images) {
        (Some(i), None) => vec![i],
        (None, Some(list)) => list,
        (Some(_), Some(_)) => return Err(bad("images", "give image or images, not both".into())),
        (None, None) => return Err(bad("image", "image is required".into())),
    };
    if images.is_empty() || images.len() > MAX_IMAGES {
        return Err(bad(
            "images",
            format!("{} images; give between 1 and {MAX_IMAGES}", images.len()),
        ));
    }
    let bytes: Vec<Vec<u8>> = images
        .iter()
        .enumerate()
        .map(|(i, v)| image_bytes(v).map_err(|m| bad("images", format!("image {i}: {m}"))))
        .collect::<Result<_, _>>()?;
    let defaults = DetectOptions::default();
    let opts = DetectOptions {
        conf: req.conf.unwrap_or(defaults.conf),
        iou: req.iou.unwrap_or(defaults.iou),
        max_det: req.max_det.unwrap_or(defaults.max_det),
        agnostic: req.agnostic.unwrap_or(false),
    };
    for (param, v) in [("conf", opts.conf), ("iou", opts.iou)] {
        if !(0.0..=1.0).contains(&v) {
            return Err(bad(param, format!("{param} {v} is not in [0, 1]")));
        }
    }
    let permit = state.admission.admit().await?;
    let detector = entry.detector.clone();
    let results = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        bytes
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let img = cyb_runtime::vision::decode_image(b, &format!("image {i}"))?;
                let found = detector.detect(&img, &opts)?;
                Ok((img.width, img.height, found))
            })
            .collect::<cyb_tensor::Result<Vec<_>>>()
    })
    .await
    .map_err(|e| ApiError::server(format!("the detection task failed: {e}")))??;
    let data: Vec<Value> = results
        .into_iter()
        .enumerate()
        .map(|(i, (w, h, found))| {
            let objects: Vec<Value> = found
                .iter()
                .map(|d| json!({"label": d.label, "class": d.class, "score": d.score, "box": d.bbox}))
                .collect();
            json!({"index": i, "width": w, "height": h, "objects": objects})
        })
        .collect();
    Ok(Json(json!({"object": "list", "model": entry.id, "data": data})).into_response())
}

/// The bytes of one image given as base64, a data URL, or `{"url": ...}`.
fn image_bytes(v: &Value) -> Result<Vec<u8>, String> {
    let s = match v {
        Value::String(s) => s.as_str(),
        Value::Object(o) => o
            .get("url")
            .and_then(Value::as_str)
            .ok_or("an image object needs a url")?,
        _ => return Err("an image is a base64 string or a data URL".into()),
    };
    let b64 = if let Some(rest) = s.strip_prefix("data:") {
        let (meta, data) = rest.split_once(',').ok_or("a data URL without a comma")?;
        if !meta.ends_with(";base64") {
            return Err("a data URL must be base64-encoded".into());
        }
        data
    } else if s.starts_with("http://") || s.starts_with("https://") {
        return Err(
            "remote image URLs are not fetched; send the image as base64 or a data URL".into(),
        );
    } else {
        s
    };
    let clean: String = b64.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(clean.as_bytes())
        .map_err(|e| format!("not valid base64: {e}"))
}

//! The image endpoints, answered by the vision models served next to the text models:
//!
//! - `POST /v1/detections` (YOLO detectors): `model` (default: the first detector), `image`
//!   or `images`, optional `conf` (0.25), `iou` (0.7), `max_det` (300), `agnostic` (false) →
//!   `{"object": "list", "model", "data": [{"index", "width", "height", "objects": [{"label",
//!   "class", "score", "box": [x1, y1, x2, y2]}]}]}`, boxes in the original image's pixels.
//! - `POST /v1/classifications` (ViTStyle models): `model` (default: the first), `image` or
//!   `images`, optional `labels` (zero-shot with CLIP/SigLIP; else the classification head),
//!   `template` (`"This is a photo of {}."`), `top_k` (5, a head's labels) →
//!   `{"object": "list", "model", "data": [{"index", "labels": [{"label", "score"}]}]}`.
//! - Images in `POST /v1/embeddings` (ViTStyle models): `input` items may be
//!   `{"image": IMAGE}` or `{"type": "image_url", "image_url": {"url": IMAGE}}`; strings go
//!   through a CLIP/SigLIP text tower, so texts and images share one space.
//!
//! An image is a base64 string, a `data:image/...;base64,` URL or `{"url": ...}` holding one;
//! remote URLs are refused (the server does not fetch). Work runs on blocking threads and takes
//! one of the `--parallel` slots.

use crate::config::{ServedVision, VisionNet};
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
use std::path::Path;
use std::sync::Arc;

/// Images per request.
const MAX_IMAGES: usize = 16;

fn bad(param: &'static str, msg: impl Into<String>) -> ApiError {
    ApiError::invalid(param, msg.into()).with_code("invalid_value")
}

/// The vision model `id` names (or the first of the wanted kind), which must be of that kind.
fn find<'a>(
    state: &'a AppState,
    id: Option<&str>,
    want_detector: bool,
    endpoint: &str,
) -> Result<&'a ServedVision, ApiError> {
    let is_kind = |v: &ServedVision| matches!(v.net, VisionNet::Detector(_)) == want_detector;
    let what = if want_detector {
        "a YOLO detector"
    } else {
        "an image model (ViT, CLIP, SigLIP, DINOv2)"
    };
    match id.map(str::trim).filter(|m| !m.is_empty()) {
        Some(id) => match state.config.vision.iter().find(|v| v.id == id) {
            Some(v) if is_kind(v) => Ok(v),
            Some(_) => Err(not_supported(id, endpoint, what)),
            None if state.models.kind_of(id).is_some() => Err(not_supported(id, endpoint, what)),
            None => Err(ApiError::model_not_found(id)),
        },
        None => state
            .config
            .vision
            .iter()
            .find(|v| is_kind(v))
            .ok_or_else(|| {
                ApiError::invalid(
                    "model",
                    format!("this server has no model for {endpoint} (it needs {what})"),
                )
                .with_code("model_not_supported")
            }),
    }
}

fn not_supported(id: &str, endpoint: &str, what: &str) -> ApiError {
    ApiError::invalid(
        "model",
        format!("model {id} does not answer {endpoint}: it needs {what}"),
    )
    .with_code("model_not_supported")
}

/// `image` or `images` decoded to bytes.
fn request_images(
    image: Option<Value>,
    images: Option<Vec<Value>>,
) -> Result<Vec<Vec<u8>>, ApiError> {
    let list: Vec<Value> = match (image, images) {
        (Some(i), None) => vec![i],
        (None, Some(list)) => list,
        (Some(_), Some(_)) => return Err(bad("images", "give image or images, not both")),
        (None, None) => return Err(bad("image", "image is required")),
    };
    if list.is_empty() || list.len() > MAX_IMAGES {
        return Err(bad(
            "images",
            format!("{} images; give between 1 and {MAX_IMAGES}", list.len()),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, v)| image_bytes(v, None).map_err(|m| bad("images", format!("image {i}: {m}"))))
        .collect()
}

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
    let entry = find(&state, req.model.as_deref(), true, "/v1/detections")?;
    let VisionNet::Detector(detector) = &entry.net else {
        return Err(ApiError::server("a detector entry without a detector"));
    };
    let bytes = request_images(req.image, req.images)?;
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
    let detector = detector.clone();
    let results = in_slot(&state, "detection", move || {
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
    .await?;
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

#[derive(Deserialize)]
struct ClassifyRequest {
    model: Option<String>,
    image: Option<Value>,
    images: Option<Vec<Value>>,
    labels: Option<Vec<String>>,
    template: Option<String>,
    top_k: Option<usize>,
}

pub async fn classifications(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = sse::body_bytes(body)?;
    let req: ClassifyRequest = parse_body(&body)?;
    let entry = find(&state, req.model.as_deref(), false, "/v1/classifications")?;
    let VisionNet::Image(model) = &entry.net else {
        return Err(ApiError::server("an image entry without an image model"));
    };
    let bytes = request_images(req.image, req.images)?;
    let labels = req.labels.unwrap_or_default();
    if labels.is_empty() && !model.model().has_classifier() {
        return Err(bad(
            "labels",
            format!(
                "model {} has no classification head: give candidate labels (zero-shot)",
                entry.id
            ),
        ));
    }
    if !labels.is_empty() && !model.has_text() {
        return Err(bad(
            "labels",
            format!("model {} has no text tower for zero-shot labels", entry.id),
        ));
    }
    if labels.len() > 1000 || labels.iter().any(|l| l.len() > 1000) {
        return Err(bad(
            "labels",
            "at most 1000 labels of at most 1000 bytes each",
        ));
    }
    let template = req
        .template
        .unwrap_or_else(|| cyb_runtime::vision::DEFAULT_TEMPLATE.to_string());
    if !labels.is_empty() && !template.contains("{}") {
        return Err(bad("template", "the template has no {} for the label"));
    }
    let top_k = req.top_k.unwrap_or(5).clamp(1, 1000);
    let model = model.clone();
    let results = in_slot(&state, "classification", move || {
        let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
        bytes
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let img = cyb_runtime::vision::decode_image(b, &format!("image {i}"))?;
                let mut r = if refs.is_empty() {
                    model.classify(&[&img], top_k)?
                } else {
                    model.zero_shot(&[&img], &refs, &template)?
                };
                Ok(r.pop().unwrap_or_default())
            })
            .collect::<cyb_tensor::Result<Vec<_>>>()
    })
    .await?;
    let data: Vec<Value> = results
        .into_iter()
        .enumerate()
        .map(|(i, scored)| {
            let labels: Vec<Value> = scored
                .iter()
                .map(|l| json!({"label": l.label, "score": l.score}))
                .collect();
            json!({"index": i, "labels": labels})
        })
        .collect();
    Ok(Json(json!({"object": "list", "model": entry.id, "data": data})).into_response())
}

/// True when `id` names a served image model (its embeddings are answered here).
pub fn is_image_model(state: &AppState, id: Option<&str>) -> bool {
    id.is_some_and(|id| {
        state
            .config
            .vision
            .iter()
            .any(|v| v.id == id && matches!(v.net, VisionNet::Image(_)))
    })
}

/// One embedding input: text or image bytes.
enum Item {
    Text(String),
    Image(Vec<u8>),
}

/// `/v1/embeddings` for an image model: `input` as a string, or an array of strings and image
/// objects; vectors in input order (`normalize` as asked, default false as the models give
/// them).
pub async fn embeddings(
    state: Arc<AppState>,
    id: &str,
    input: Option<&Value>,
    normalize: bool,
    base64_out: bool,
) -> Result<Response, ApiError> {
    let entry = find(&state, Some(id), false, "/v1/embeddings")?;
    let VisionNet::Image(model) = &entry.net else {
        return Err(ApiError::server("an image entry without an image model"));
    };
    let items: Vec<Item> = match input {
        Some(Value::String(s)) => vec![Item::Text(s.clone())],
        Some(Value::Array(list)) if !list.is_empty() && list.len() <= 2048 => list
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(Item::Text(s.clone())),
                Value::Object(o) => {
                    let img = o
                        .get("image")
                        .or_else(|| o.get("image_url"))
                        .ok_or_else(|| {
                            bad(
                                "input",
                                format!("input {i}: an object needs image or image_url"),
                            )
                        })?;
                    image_bytes(img, None)
                        .map(Item::Image)
                        .map_err(|m| bad("input", format!("input {i}: {m}")))
                }
                _ => Err(bad(
                    "input",
                    format!("input {i}: a string or an image object"),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(Value::Object(_)) => vec![match input
            .and_then(|v| v.get("image").or_else(|| v.get("image_url")))
        {
            Some(img) => Item::Image(image_bytes(img, None).map_err(|m| bad("input", m))?),
            None => return Err(bad("input", "an object needs image or image_url")),
        }],
        _ => {
            return Err(bad(
                "input",
                "input is a string, or an array of 1 to 2048 strings and images",
            ))
        }
    };
    if items.iter().filter(|i| matches!(i, Item::Image(_))).count() > MAX_IMAGES {
        return Err(bad(
            "input",
            format!("at most {MAX_IMAGES} images a request"),
        ));
    }
    if items.iter().any(|i| matches!(i, Item::Text(_))) && !model.has_text() {
        return Err(bad(
            "input",
            format!(
                "model {} embeds images only (it has no text tower)",
                entry.id
            ),
        ));
    }
    let model = model.clone();
    let vectors = in_slot(&state, "embedding", move || {
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Item::Text(t) => Ok(model.embed_texts(&[t.as_str()], normalize)?.remove(0)),
                Item::Image(b) => {
                    let img = cyb_runtime::vision::decode_image(b, &format!("input {i}"))?;
                    Ok(model.embed_images(&[&img], normalize)?.remove(0))
                }
            })
            .collect::<cyb_tensor::Result<Vec<Vec<f32>>>>()
    })
    .await?;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64_out {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "model": entry.id,
        "data": data,
        "usage": {"prompt_tokens": 0, "total_tokens": 0},
    }))
    .into_response())
}

/// Runs `work` on a blocking thread holding one of the `--parallel` slots.
async fn in_slot<T: Send + 'static>(
    state: &AppState,
    what: &str,
    work: impl FnOnce() -> cyb_tensor::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    let permit = state.admission.admit().await?;
    let out = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work()
    })
    .await
    .map_err(|e| ApiError::server(format!("the {what} task failed: {e}")))??;
    Ok(out)
}

/// The bytes of one image given as base64, a data URL, or `{"url": ...}`; a `file://` URL
/// is read only from under `local` (the server's `image_dir`), at most `max` bytes.
pub(crate) fn image_bytes(v: &Value, local: Option<(&Path, usize)>) -> Result<Vec<u8>, String> {
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
    } else if let Some(path) = s.strip_prefix("file://") {
        return local_image(path, local);
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

/// A `file://` image: a file under the allowed folder, read up to its size limit.
fn local_image(path: &str, local: Option<(&Path, usize)>) -> Result<Vec<u8>, String> {
    let Some((root, max)) = local else {
        return Err(
            "file:// image URLs are refused unless the server names a folder they may be read \
             from (--allow-image-dir)"
                .into(),
        );
    };
    let root = root
        .canonicalize()
        .map_err(|e| format!("the image folder {}: {e}", root.display()))?;
    let file = Path::new(path)
        .canonicalize()
        .map_err(|e| format!("{path}: {e}"))?;
    if !file.starts_with(&root) {
        return Err(format!(
            "{path} is outside the image folder {}",
            root.display()
        ));
    }
    let f = std::fs::File::open(&file).map_err(|e| format!("{path}: {e}"))?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(f, max as u64 + 1), &mut bytes)
        .map_err(|e| format!("{path}: {e}"))?;
    if bytes.len() > max {
        return Err(format!("{path} is larger than {max} bytes"));
    }
    Ok(bytes)
}

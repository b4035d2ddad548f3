//! `POST /v1/embeddings` (OpenAI's shape): `input` is a string, an array of strings, an array
//! of token ids, or an array of token-id arrays; `encoding_format` is `float` (default) or
//! `base64` (the little-endian f32 bytes); `usage` counts the tokens embedded. Extensions:
//! `pooling` (`cls`/`mean`/`max`), `normalize` (bool) and `truncate` (bool: cut overlong
//! inputs instead of answering 400). Encoder models answer, and image models (CLIP, SigLIP,
//! DINOv2, ViT: images as input items, see `vision`); a text generator is a 400.

use crate::error::ApiError;
use crate::request::parse_body;
use crate::{sse, AppState};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cyb_runtime::{EmbedInput, EmbedOptions, Pooling};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// OpenAI's limit on inputs per request.
const MAX_INPUTS: usize = 2048;

#[derive(Deserialize)]
struct EmbeddingRequest {
    model: Option<String>,
    input: Option<Value>,
    encoding_format: Option<String>,
    dimensions: Option<u64>,
    #[allow(dead_code)]
    user: Option<String>,
    pooling: Option<String>,
    normalize: Option<bool>,
    truncate: Option<bool>,
}

pub async fn handle(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = sse::body_bytes(body)?;
    let req: EmbeddingRequest = parse_body(&body)?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("{other:?} is not supported; use \"float\" or \"base64\""),
            )
            .with_code("invalid_value"))
        }
    };
    if crate::vision::is_image_model(&state, req.model.as_deref()) {
        let id = req.model.clone().unwrap_or_default();
        let normalize = req.normalize.unwrap_or(false);
        return crate::vision::embeddings(state, &id, req.input.as_ref(), normalize, base64).await;
    }
    let slot = state.find_encoder(req.model.as_deref()).await?;
    let size = slot.model.embedding_size();
    if let Some(d) = req.dimensions.filter(|&d| d as usize != size) {
        return Err(ApiError::invalid(
            "dimensions",
            format!(
                "model {} makes {size}-dimensional vectors; {d} cannot be given",
                slot.id
            ),
        )
        .with_code("invalid_value"));
    }
    let inputs = parse_input(req.input.as_ref())?;
    let opts = EmbedOptions {
        pooling: req
            .pooling
            .as_deref()
            .map(Pooling::parse)
            .transpose()
            .map_err(|e| ApiError::invalid("pooling", e.to_string()))?,
        normalize: req.normalize,
        truncate: req.truncate.unwrap_or(false),
    };
    let permit = state.admission.admit().await?;
    let model = slot.model.clone();
    let out = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        model.embed_with(&inputs, &opts)
    })
    .await
    .map_err(|e| ApiError::server(format!("the embedding task failed: {e}")))??;
    let data: Vec<Value> = out
        .vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Value::String(base64_encode(&bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": slot.id,
        "usage": {"prompt_tokens": out.tokens, "total_tokens": out.tokens},
    }))
    .into_response())
}

/// The accepted `input` forms, as the runtime's inputs.
fn parse_input(input: Option<&Value>) -> Result<Vec<EmbedInput>, ApiError> {
    let bad = |msg: String| ApiError::invalid("input", msg).with_code("invalid_value");
    let token = |v: &Value| v.as_u64().and_then(|t| u32::try_from(t).ok());
    let tokens = |a: &[Value]| -> Option<Vec<u32>> { a.iter().map(token).collect() };
    let inputs = match input {
        None | Some(Value::Null) => return Err(bad("input is required".into())),
        Some(Value::String(s)) => vec![EmbedInput::Text(s.clone())],
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(bad("input is an empty array; give at least one text".into()))
        }
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => a
            .iter()
            .filter_map(Value::as_str)
            .map(|s| EmbedInput::Text(s.to_string()))
            .collect(),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => {
            let ids = tokens(a).ok_or_else(|| bad("token ids must be integers ≥ 0".into()))?;
            vec![EmbedInput::Tokens(ids)]
        }
        Some(Value::Array(a)) if a.iter().all(Value::is_array) => a
            .iter()
            .map(|t| {
                t.as_array()
                    .and_then(|t| tokens(t))
                    .map(EmbedInput::Tokens)
                    .ok_or_else(|| bad("token ids must be integers ≥ 0".into()))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(bad(
                "input must be a string, an array of strings, an array of token ids or an \
                 array of token-id arrays"
                    .into(),
            ))
        }
    };
    if inputs.len() > MAX_INPUTS {
        return Err(bad(format!(
            "{} inputs; at most {MAX_INPUTS} per request",
            inputs.len()
        )));
    }
    Ok(inputs)
}

/// Standard base64 (RFC 4648, with padding), as OpenAI's `encoding_format: base64` uses.
fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::base64_encode;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, want) in cases {
            assert_eq!(base64_encode(plain.as_bytes()), want);
        }
    }
}

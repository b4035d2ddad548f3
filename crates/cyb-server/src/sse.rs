//! Server-sent events (`data: {json}\n\n` ... `data: [DONE]\n\n`) and request bodies.

use crate::error::ApiError;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use std::convert::Infallible;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

pub const DONE: &str = "data: [DONE]\n\n";

pub fn event(v: &serde_json::Value) -> String {
    format!("data: {v}\n\n")
}

/// Ends a stream: with `usage` (the client asked `stream_options.include_usage`), a final chunk
/// of `object` with no choices and the usage, as OpenAI sends it; then `[DONE]`.
pub async fn finish(
    tx: &mpsc::Sender<String>,
    usage: Option<(&str, &str, u64, &str, serde_json::Value)>,
) {
    if let Some((object, id, created, model, usage)) = usage {
        let chunk = serde_json::json!({
            "id": id,
            "object": object,
            "created": created,
            "model": model,
            "choices": [],
            "usage": usage,
        });
        let _ = tx.send(event(&chunk)).await;
    }
    let _ = tx.send(DONE.to_string()).await;
}

/// A streaming response of the events sent to the returned sender. Dropping the response
/// (the client went away) closes the channel, which the producer sees on its next send.
pub fn response(rx: mpsc::Receiver<String>) -> Response {
    let stream = ReceiverStream::new(rx).map(|s| Ok::<_, Infallible>(Bytes::from(s)));
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// The raw body, or the OpenAI-style error for one that is too large or unreadable.
pub fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rej| {
        let status = rej.status();
        let err = ApiError::invalid(
            None,
            format!("The request body was rejected: {}", rej.body_text()),
        )
        .with_status(status);
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            err.with_code("request_too_large")
        } else {
            err
        }
    })
}

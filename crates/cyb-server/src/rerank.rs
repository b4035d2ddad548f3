//! `POST /v1/rerank` (the shape of Jina's and Cohere's rerank APIs, as llama.cpp's server also
//! answers it): `query` and `documents` (strings), optional `top_n` and `return_documents`.
//! Each document is scored as the text pair `(query, document)` by a one-output cross-encoder
//! (bge-reranker, ms-marco MiniLM); `relevance_score` is the model's classification score as
//! `Model::classify_pair` gives it (the sigmoid of the logit for such a model, raw for a
//! regression head). Results come best first with the document's `index` in the request.
//! A pair longer than the model takes is a 400 naming the limit; the extension
//! `truncate: true` cuts the end of the query instead (the runtime shortens a pair's first
//! text, as transformers' `only_first` does).

use crate::error::ApiError;
use crate::request::parse_body;
use crate::{sse, AppState};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cyb_runtime::ClassifyOptions;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// Documents per request (Cohere's limit).
const MAX_DOCUMENTS: usize = 1000;

#[derive(Deserialize)]
struct RerankRequest {
    model: Option<String>,
    query: Option<String>,
    documents: Option<Vec<Value>>,
    top_n: Option<usize>,
    return_documents: Option<bool>,
    truncate: Option<bool>,
}

pub async fn handle(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = sse::body_bytes(body)?;
    let req: RerankRequest = parse_body(&body)?;
    let slot = state.find_encoder(req.model.as_deref()).await?;
    let labels = slot.model.class_labels();
    if labels.len() != 1 || slot.model.has_token_classifier() {
        return Err(ApiError::invalid(
            "model",
            format!(
                "model {} is not a reranker: /v1/rerank needs a cross-encoder with one output \
                 (a *ForSequenceClassification model with num_labels 1), this one has {} labels",
                slot.id,
                labels.len()
            ),
        )
        .with_code("model_not_supported"));
    }
    let bad = |param: &'static str, msg: &str| {
        ApiError::invalid(param, msg.to_string()).with_code("invalid_value")
    };
    let query = req
        .query
        .filter(|q| !q.trim().is_empty())
        .ok_or_else(|| bad("query", "query is required and must not be empty"))?;
    let documents: Vec<String> = req
        .documents
        .ok_or_else(|| bad("documents", "documents is required"))?
        .into_iter()
        .map(|d| match d {
            Value::String(s) => Some(s),
            // Cohere's older form: {"text": "..."}.
            Value::Object(o) => o.get("text").and_then(Value::as_str).map(String::from),
            _ => None,
        })
        .collect::<Option<_>>()
        .ok_or_else(|| {
            bad(
                "documents",
                "documents must be strings (or {\"text\": ...})",
            )
        })?;
    if documents.is_empty() || documents.len() > MAX_DOCUMENTS {
        return Err(bad(
            "documents",
            &format!(
                "{} documents; give between 1 and {MAX_DOCUMENTS}",
                documents.len()
            ),
        ));
    }
    let top_n = req.top_n.unwrap_or(documents.len());
    let return_documents = req.return_documents.unwrap_or(false);
    let opts = ClassifyOptions {
        truncate: req.truncate.unwrap_or(false),
        function: None,
    };
    let permit = state.admission.admit().await?;
    let model = slot.model.clone();
    let docs = documents.clone();
    let scores = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let pairs: Vec<(&str, &str)> = docs.iter().map(|d| (query.as_str(), d.as_str())).collect();
        model.classify_pair_with(&pairs, &opts)
    })
    .await
    .map_err(|e| ApiError::server(format!("the rerank task failed: {e}")))??;
    let mut ranked: Vec<(usize, f32)> = scores
        .iter()
        .enumerate()
        .map(|(i, s)| (i, s.first().map_or(f32::NAN, |l| l.score)))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    let results: Vec<Value> = ranked
        .into_iter()
        .take(top_n)
        .map(|(i, score)| {
            let mut r = json!({"index": i, "relevance_score": score});
            if return_documents {
                r["document"] = json!({"text": documents[i]});
            }
            r
        })
        .collect();
    Ok(Json(json!({"object": "list", "model": slot.id, "results": results})).into_response())
}

//! `POST /v1/completions`: raw text in, text out (no chat template).

use crate::error::ApiError;
use crate::reply::{self, check_context, finish_reason, finite, token_text, usage};
use crate::request::{parse_body, CompletionRequest};
use crate::worker::{self, Event, Job};
use crate::{new_id, sse, unix_now, AppState};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cyb_runtime::{TokenLogprobs, Tokenizer};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc;

/// OpenAI's default `max_tokens` for text completions.
const DEFAULT_MAX_TOKENS: usize = 16;

pub async fn handle(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = sse::body_bytes(body)?;
    let mut req: CompletionRequest = parse_body(&body)?;
    let slot = state.find_generator(req.common.model.as_deref()).await?;
    let limit = state.config.max_tokens_limit;
    let params = req.common.sampling(
        req.common.max_tokens,
        "max_tokens",
        limit,
        DEFAULT_MAX_TOKENS,
    )?;
    if req.best_of.is_some_and(|b| b != 1) {
        return Err(ApiError::invalid("best_of", "best_of > 1 is not supported"));
    }
    if req.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid(
            "suffix",
            "suffix (insertion) is not supported",
        ));
    }
    let top_logprobs = match req.logprobs {
        None => None,
        Some(n) if (0..=5).contains(&n) => Some(n as usize),
        Some(n) => {
            return Err(ApiError::invalid(
                "logprobs",
                format!("logprobs = {n} is out of range; it must be between 0 and 5"),
            )
            .with_code("invalid_value"))
        }
    };
    // Tokenizing is CPU work: off the async executor.
    let model = slot.model.clone();
    let prompt_value = std::mem::take(&mut req.prompt);
    let (prompt_text, prompt) =
        tokio::task::spawn_blocking(move || prompt_ids(&prompt_value, model.tokenizer()))
            .await
            .map_err(|e| ApiError::server(format!("the prompt task failed: {e}")))??;
    check_context(prompt.len(), slot.ctx, "prompt")?;
    let echo = if req.echo.unwrap_or(false) {
        prompt_text.clone()
    } else {
        String::new()
    };

    let permit = state.admission.admit().await?;
    let job = Job {
        images: Vec::new(),
        slot: slot.clone(),
        prompt,
        params,
        top_logprobs,
        lora: req.common.lora_scales(slot.model.lora_count())?,
        constraint: None,
    };
    let mut rx = worker::spawn(state.clone(), job, permit);
    let id = new_id("cmpl-");
    let created = unix_now();
    if req.common.stream() {
        let first = reply::first_event(&mut rx).await?;
        let (tx, out) = mpsc::channel(64);
        let include_usage = req.common.include_usage();
        let model_id = slot.id.clone();
        let slot = slot.clone();
        tokio::spawn(async move {
            let head = Head {
                id: &id,
                created,
                model: &model_id,
            };
            let tok = slot.model.tokenizer();
            stream(
                head,
                first,
                rx,
                tx,
                echo,
                include_usage,
                top_logprobs.is_some(),
                tok,
            )
            .await;
        });
        return Ok(sse::response(out));
    }
    let c = reply::collect(rx).await?;
    let tok = slot.model.tokenizer();
    let logprobs = top_logprobs.map(|_| logprobs_json(tok, &c.logprobs, echo.len()));
    Ok(Json(json!({
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": slot.id,
        "choices": [{
            "index": 0,
            "text": format!("{echo}{}", c.text),
            "logprobs": logprobs,
            "finish_reason": finish_reason(c.summary.finish),
        }],
        "usage": usage(&c.summary),
    }))
    .into_response())
}

struct Head<'a> {
    id: &'a str,
    created: u64,
    model: &'a str,
}

#[allow(clippy::too_many_arguments)]
async fn stream(
    head: Head<'_>,
    first: Event,
    mut rx: mpsc::Receiver<Event>,
    tx: mpsc::Sender<String>,
    echo: String,
    include_usage: bool,
    want_logprobs: bool,
    tok: &Tokenizer,
) {
    let chunk = |text: &str, logprobs: Value, finish: Value, usage: Option<Value>| {
        let mut v = json!({
            "id": head.id,
            "object": "text_completion",
            "created": head.created,
            "model": head.model,
            "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}],
        });
        if let (Some(u), Some(o)) = (usage, v.as_object_mut()) {
            o.insert("usage".into(), u);
        }
        sse::event(&v)
    };
    if !echo.is_empty()
        && tx
            .send(chunk(&echo, Value::Null, Value::Null, None))
            .await
            .is_err()
    {
        return;
    }
    let mut pending: Vec<TokenLogprobs> = Vec::new();
    let mut next = Some(first);
    loop {
        let ev = match next.take() {
            Some(ev) => ev,
            None => match rx.recv().await {
                Some(ev) => ev,
                None => return,
            },
        };
        match ev {
            Event::Piece { text, logprobs } => {
                pending.extend(logprobs);
                if text.is_empty() {
                    continue;
                }
                let lps = if want_logprobs {
                    logprobs_json(tok, &std::mem::take(&mut pending), 0)
                } else {
                    Value::Null
                };
                if tx.send(chunk(&text, lps, Value::Null, None)).await.is_err() {
                    return;
                }
            }
            Event::Done(summary) => {
                let lps = if want_logprobs {
                    logprobs_json(tok, &pending, 0)
                } else {
                    Value::Null
                };
                let finish = Value::from(finish_reason(summary.finish));
                let _ = tx.send(chunk("", lps, finish, Some(usage(&summary)))).await;
                let u = include_usage.then(|| {
                    (
                        "text_completion",
                        head.id,
                        head.created,
                        head.model,
                        usage(&summary),
                    )
                });
                sse::finish(&tx, u).await;
                return;
            }
            Event::Error(e) => {
                let _ = tx.send(sse::event(&e.body())).await;
                sse::finish(&tx, None).await;
                return;
            }
        }
    }
}

/// The legacy completions `logprobs` object; offsets count from `offset` (the echoed prompt).
fn logprobs_json(tok: &Tokenizer, lps: &[TokenLogprobs], offset: usize) -> Value {
    let mut tokens = Vec::new();
    let mut token_logprobs = Vec::new();
    let mut top = Vec::new();
    let mut offsets = Vec::new();
    let mut at = offset;
    for lp in lps {
        let t = token_text(tok, lp.token);
        offsets.push(at);
        at += t.len();
        tokens.push(t);
        token_logprobs.push(finite(lp.logprob));
        let mut m = serde_json::Map::new();
        for &(id, l) in &lp.top {
            m.insert(token_text(tok, id), finite(l).into());
        }
        top.push(Value::Object(m));
    }
    json!({"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top, "text_offset": offsets})
}

/// The prompt as text (for `echo`) and token ids: a string, a list of one string, a list of
/// token ids, or a list of one list of ids. Text gets the BOS the tokenizer adds.
fn prompt_ids(prompt: &Value, tok: &Tokenizer) -> Result<(String, Vec<u32>), ApiError> {
    let bad = || {
        ApiError::invalid(
            "prompt",
            "prompt must be a string, a list of token ids, or a list holding one of those (one prompt per request)",
        )
    };
    let one = match prompt {
        Value::Array(items) if items.len() == 1 && !items[0].is_number() => &items[0],
        other => other,
    };
    match one {
        Value::String(s) => {
            let ids = tok.encode(s, tok.add_bos())?;
            Ok((s.clone(), ids))
        }
        Value::Array(items) => {
            let ids = items
                .iter()
                .map(|v| {
                    v.as_u64()
                        .and_then(|i| u32::try_from(i).ok())
                        .filter(|&i| (i as usize) < tok.vocab_size())
                        .ok_or_else(|| {
                            ApiError::invalid(
                                "prompt",
                                format!(
                                    "{v} is not a token id of this model (vocabulary of {})",
                                    tok.vocab_size()
                                ),
                            )
                        })
                })
                .collect::<Result<Vec<u32>, _>>()?;
            let text = tok.decode(&ids, false)?;
            Ok((text, ids))
        }
        _ => Err(bad()),
    }
}

//! `POST /v1/chat/completions`.

use crate::error::ApiError;
use crate::reply::{self, chat_logprob, check_context, finish_reason, usage};
use crate::request::{parse_body, ChatRequest, Content, InMessage};
use crate::worker::{self, Event, Job};
use crate::{new_id, sse, structured, tool_calls, unix_now, AppState};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cyb_runtime::chat_template::{FunctionCall, ToolCall};
use cyb_runtime::{ChatMessage, ContentPart, RenderOptions};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc;

/// What the answer needs to know about the request.
struct Answer {
    id: String,
    created: u64,
    model: String,
    /// Offered tool names when the answer is parsed for tool calls.
    tools: Option<Vec<String>>,
}

pub async fn handle(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = sse::body_bytes(body)?;
    let req: ChatRequest = parse_body(&body)?;
    let slot = state.find_generator(req.common.model.as_deref()).await?;
    let (max, param) = match req.max_completion_tokens {
        Some(m) => (Some(m), "max_completion_tokens"),
        None => (req.common.max_tokens, "max_tokens"),
    };
    let limit = state.config.max_tokens_limit;
    let params = req.common.sampling(max, param, limit, limit)?;
    let top_logprobs = logprobs_setting(&req)?;
    let (tools_json, tool_names) = tools_setting(&req)?;
    let (messages, image_urls) = convert_messages(&req.messages)?;
    // The body limit of this route leaves room for images; the rest of the request keeps the
    // text limit.
    let url_bytes: usize = image_urls.iter().map(|u| u.to_string().len()).sum();
    if body.len().saturating_sub(url_bytes) > state.config.max_body_bytes {
        return Err(ApiError::invalid(
            None,
            format!(
                "The request body was rejected: without its images it is larger than {} bytes",
                state.config.max_body_bytes
            ),
        )
        .with_status(axum::http::StatusCode::PAYLOAD_TOO_LARGE)
        .with_code("request_too_large"));
    }
    if !image_urls.is_empty() && !slot.model.takes_images() {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "model {} takes no images (it is a text-only model); send text content",
                slot.id
            ),
        ));
    }
    if image_urls.len() > cyb_runtime::vision::MAX_IMAGES {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "{} images; at most {} per request",
                image_urls.len(),
                cyb_runtime::vision::MAX_IMAGES
            ),
        ));
    }
    let local = state
        .config
        .image_dir
        .clone()
        .map(|d| (d, state.config.max_image_bytes));
    // Rendering and tokenizing are CPU work bounded by the template's fuel and output limits,
    // run off the async executor so other requests are served meanwhile.
    let model = slot.model.clone();
    let (ctx, shift) = (slot.ctx, state.config.context_shift);
    let max_tokens = params.max_tokens;
    let (prompt, images) = tokio::task::spawn_blocking(move || -> Result<_, ApiError> {
        let local = local.as_ref().map(|(d, max)| (d.as_path(), *max));
        let mut images = Vec::with_capacity(image_urls.len());
        for (i, url) in image_urls.iter().enumerate() {
            let bytes = crate::vision::image_bytes(url, local)
                .map_err(|m| ApiError::invalid("messages", format!("image {i}: {m}")))?;
            let img = cyb_runtime::vision::decode_image(&bytes, &format!("image {i}"))
                .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
            images.push(img);
        }
        let encode = |messages: &[ChatMessage]| -> cyb_tensor::Result<Vec<u32>> {
            let text = match model.chat_template() {
                Some(t) => t.render(
                    messages,
                    &RenderOptions {
                        add_generation_prompt: true,
                        tools: tools_json.clone(),
                        ..RenderOptions::default()
                    },
                )?,
                None => model.render_chat(messages, true)?,
            };
            model.prompt_ids(&text, model.chat_template().is_none())
        };
        if !shift {
            return Ok((encode(&messages)?, images));
        }
        // Context shift: the oldest turns go until the prompt fits with room for the answer
        // (with the images of the turns that went).
        let mut all = messages;
        let (ids, _) = cyb_runtime::fit_chat(&mut all, ctx, max_tokens, encode)?;
        // Turns go oldest first, so the images that went are the first ones.
        let kept: usize = all.iter().map(ChatMessage::image_count).sum();
        images.drain(..images.len().saturating_sub(kept));
        Ok((ids, images))
    })
    .await
    .map_err(|e| ApiError::server(format!("the prompt task failed: {e}")))??;
    check_context(prompt.len(), slot.ctx, "messages")?;
    let model = &slot.model;
    let constraint = match grammar_setting(&req, model)? {
        Some((grammar, param)) => Some(Box::new(
            structured::constraint(&slot, grammar, param).await?,
        ) as Box<dyn cyb_runtime::TokenConstraint>),
        None => None,
    };

    let permit = state.admission.admit().await?;
    let job = Job {
        slot: slot.clone(),
        prompt,
        images,
        params,
        top_logprobs,
        lora: req.common.lora_scales(slot.model.lora_count())?,
        constraint,
    };
    let mut rx = worker::spawn(state.clone(), job, permit);
    let answer = Answer {
        id: new_id("chatcmpl-"),
        created: unix_now(),
        model: slot.id.clone(),
        tools: tool_names,
    };
    let tok = slot.clone();
    if req.common.stream() {
        let first = reply::first_event(&mut rx).await?;
        let (tx, out) = mpsc::channel(64);
        let include_usage = req.common.include_usage();
        tokio::spawn(async move {
            stream(
                answer,
                first,
                rx,
                tx,
                include_usage,
                top_logprobs.is_some(),
                &tok.model,
            )
            .await;
        });
        return Ok(sse::response(out));
    }
    let c = reply::collect(rx).await?;
    let logprobs = top_logprobs.map(|_| {
        let content: Vec<Value> = c
            .logprobs
            .iter()
            .map(|lp| chat_logprob(slot.model.tokenizer(), lp))
            .collect();
        json!({"content": content})
    });
    let (message, finish) = final_message(&answer, c.text, finish_reason(c.summary.finish));
    Ok(Json(json!({
        "id": answer.id,
        "object": "chat.completion",
        "created": answer.created,
        "model": answer.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": finish,
        }],
        "usage": usage(&c.summary),
    }))
    .into_response())
}

/// The assistant message for the whole answer: tool calls when tools were offered and the
/// model called one, else the text.
fn final_message(answer: &Answer, text: String, finish: &'static str) -> (Value, &'static str) {
    if let Some(names) = &answer.tools {
        if let Some((content, calls)) = tool_calls::parse_tool_calls(&text, names) {
            let calls: Vec<Value> = calls
                .iter()
                .map(|c| {
                    json!({
                        "id": new_id("call_"),
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments.to_string()},
                    })
                })
                .collect();
            return (
                json!({"role": "assistant", "content": content, "tool_calls": calls}),
                "tool_calls",
            );
        }
    }
    (json!({"role": "assistant", "content": text}), finish)
}

async fn stream(
    answer: Answer,
    first: Event,
    mut rx: mpsc::Receiver<Event>,
    tx: mpsc::Sender<String>,
    include_usage: bool,
    want_logprobs: bool,
    model: &cyb_runtime::Model,
) {
    let chunk = |delta: Value, logprobs: Value, finish: Value| {
        sse::event(&json!({
            "id": answer.id,
            "object": "chat.completion.chunk",
            "created": answer.created,
            "model": answer.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        }))
    };
    let opening = chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
        Value::Null,
    );
    if tx.send(opening).await.is_err() {
        return;
    }
    // Text is held while it may still turn out to be a tool call, and log-probabilities of
    // tokens whose text is not complete yet wait for the piece that completes it.
    let mut held = String::new();
    let mut pending: Vec<Value> = Vec::new();
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
                if let Some(lp) = &logprobs {
                    pending.push(chat_logprob(model.tokenizer(), lp));
                }
                if answer.tools.is_some() {
                    held.push_str(&text);
                    continue;
                }
                if text.is_empty() {
                    continue;
                }
                let lps = if want_logprobs {
                    json!({"content": std::mem::take(&mut pending)})
                } else {
                    Value::Null
                };
                if tx
                    .send(chunk(json!({"content": text}), lps, Value::Null))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Event::Done(summary) => {
                let lps = if want_logprobs {
                    json!({"content": std::mem::take(&mut pending)})
                } else {
                    Value::Null
                };
                let mut finish = finish_reason(summary.finish);
                let mut delta = json!({});
                if answer.tools.is_some() {
                    let (message, f) = final_message(&answer, held.clone(), finish);
                    finish = f;
                    delta = match message.get("tool_calls") {
                        Some(Value::Array(calls)) => {
                            let indexed: Vec<Value> = calls
                                .iter()
                                .enumerate()
                                .map(|(i, c)| {
                                    let mut c = c.clone();
                                    if let Some(o) = c.as_object_mut() {
                                        o.insert("index".into(), i.into());
                                    }
                                    c
                                })
                                .collect();
                            json!({"content": message.get("content"), "tool_calls": indexed})
                        }
                        _ => json!({"content": held}),
                    };
                }
                let mut last = json!({
                    "id": answer.id,
                    "object": "chat.completion.chunk",
                    "created": answer.created,
                    "model": answer.model,
                    "choices": [{"index": 0, "delta": delta, "logprobs": lps, "finish_reason": finish}],
                });
                if let Some(o) = last.as_object_mut() {
                    o.insert("usage".into(), usage(&summary));
                }
                let _ = tx.send(sse::event(&last)).await;
                let u = include_usage.then(|| {
                    let (id, model) = (answer.id.as_str(), answer.model.as_str());
                    (
                        "chat.completion.chunk",
                        id,
                        answer.created,
                        model,
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

fn logprobs_setting(req: &ChatRequest) -> Result<Option<usize>, ApiError> {
    let on = req.logprobs.unwrap_or(false);
    match req.top_logprobs {
        Some(n) if !(0..=20).contains(&n) => Err(ApiError::invalid(
            "top_logprobs",
            format!("top_logprobs = {n} is out of range; it must be between 0 and 20"),
        )
        .with_code("invalid_value")),
        Some(n) if n > 0 && !on => Err(ApiError::invalid(
            "top_logprobs",
            "top_logprobs requires logprobs to be true",
        )),
        Some(n) => Ok(on.then_some(n as usize)),
        None => Ok(on.then_some(0)),
    }
}

/// The grammar the answer must follow and the parameter it came from: a forced tool call
/// (`tool_choice: "required"` or a named function) wins over `response_format`.
fn grammar_setting(
    req: &ChatRequest,
    model: &cyb_runtime::Model,
) -> Result<Option<(cyb_runtime::sampling::grammar::Grammar, &'static str)>, ApiError> {
    let tools = req.tools.as_deref().unwrap_or_default();
    if !tools.is_empty() {
        let only = match &req.tool_choice {
            Some(Value::String(s)) if s == "required" => Some(None),
            Some(v @ Value::Object(_)) => v
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .map(Some),
            _ => None,
        };
        if let Some(only) = only {
            return Ok(Some((structured::tool_call(model, tools, only)?, "tools")));
        }
    }
    Ok(structured::response_format(req.response_format.as_ref())?.map(|g| (g, "response_format")))
}

/// The tools for the template and the names the answer is parsed for; `tool_choice: "none"`
/// offers none.
fn tools_setting(req: &ChatRequest) -> Result<(Option<Value>, Option<Vec<String>>), ApiError> {
    let Some(tools) = &req.tools else {
        return Ok((None, None));
    };
    if tools.is_empty() {
        return Ok((None, None));
    }
    let mut names = Vec::new();
    for t in tools {
        let name = t
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .filter(|_| t.get("type").and_then(Value::as_str) == Some("function"));
        match name {
            Some(n) => names.push(n.to_string()),
            None => {
                return Err(ApiError::invalid(
                    "tools",
                    "each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                ))
            }
        }
    }
    match &req.tool_choice {
        Some(Value::String(s)) if s == "none" => Ok((None, None)),
        None => Ok((Some(Value::Array(tools.clone())), Some(names))),
        Some(Value::String(s)) if s == "auto" || s == "required" => {
            Ok((Some(Value::Array(tools.clone())), Some(names)))
        }
        Some(v @ Value::Object(_)) => {
            let named = v
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str);
            match named {
                Some(n) if names.iter().any(|x| x == n) => {
                    Ok((Some(Value::Array(tools.clone())), Some(names)))
                }
                _ => Err(ApiError::invalid(
                    "tool_choice",
                    "tool_choice names a function that is not among the tools",
                )),
            }
        }
        Some(other) => Err(ApiError::invalid(
            "tool_choice",
            format!(
                "tool_choice {other} is not one of \"none\", \"auto\", \"required\" or a function"
            ),
        )),
    }
}

/// The messages for the template, and the `image_url` values of their image parts in order.
fn convert_messages(messages: &[InMessage]) -> Result<(Vec<ChatMessage>, Vec<Value>), ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid("messages", "messages must not be empty"));
    }
    let mut images = Vec::new();
    let converted = messages
        .iter()
        .map(|m| {
            let mut parts_out: Option<Vec<ContentPart>> = None;
            let role = match m.role.as_str() {
                "developer" => "system",
                r @ ("system" | "user" | "assistant" | "tool") => r,
                other => {
                    return Err(ApiError::invalid(
                        "messages",
                        format!("unknown message role {other:?}; use system, developer, user, assistant or tool"),
                    ))
                }
            };
            let content = match &m.content {
                None => None,
                Some(Content::Text(s)) => Some(s.clone()),
                Some(Content::Parts(parts)) => {
                    let mut text = String::new();
                    let mut list = Vec::with_capacity(parts.len());
                    for p in parts {
                        match (p.kind.as_str(), &p.text, &p.image_url) {
                            ("text", Some(t), _) => {
                                text.push_str(t);
                                list.push(ContentPart::Text(t.clone()));
                            }
                            ("image_url", _, Some(url)) => {
                                images.push(url.clone());
                                list.push(ContentPart::Image);
                            }
                            ("image_url", _, None) => {
                                return Err(ApiError::invalid(
                                    "messages",
                                    "an image_url part needs image_url: {\"url\": ...}",
                                ))
                            }
                            (kind, _, _) => {
                                return Err(ApiError::invalid(
                                    "messages",
                                    format!("content parts of type {kind:?} are not supported (text, image_url)"),
                                ))
                            }
                        }
                    }
                    if list.contains(&ContentPart::Image) {
                        parts_out = Some(list);
                    }
                    Some(text)
                }
            };
            let tool_calls = m.tool_calls.as_ref().map(|calls| {
                calls
                    .iter()
                    .map(|c| ToolCall {
                        id: c.id.clone(),
                        kind: "function".into(),
                        function: FunctionCall {
                            name: c.function.name.clone(),
                            // Templates expect an object; OpenAI clients send a JSON string.
                            arguments: match &c.function.arguments {
                                Value::String(s) => serde_json::from_str(s)
                                    .unwrap_or_else(|_| Value::String(s.clone())),
                                v => v.clone(),
                            },
                        },
                    })
                    .collect()
            });
            Ok(ChatMessage {
                role: role.to_string(),
                content,
                tool_calls,
                tool_call_id: m.tool_call_id.clone(),
                name: m.name.clone(),
                parts: parts_out,
                ..ChatMessage::default()
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok((converted, images))
}

//! Pieces shared by the chat and text completion answers: usage, finish reasons,
//! log-probabilities, the context check and collecting a whole generation.

use crate::error::ApiError;
use crate::worker::{Event, Summary};
use cyb_runtime::{FinishReason, TokenLogprobs, Tokenizer};
use serde_json::{json, Value};
use tokio::sync::mpsc;

pub fn usage(s: &Summary) -> Value {
    json!({
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "total_tokens": s.prompt_tokens + s.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": s.cached_tokens},
    })
}

pub fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
    }
}

/// A token's own text (a lone byte of a multi-byte character decodes to U+FFFD, as OpenAI's
/// `token` field does; `bytes` keeps what is recoverable).
pub fn token_text(tok: &Tokenizer, id: u32) -> String {
    tok.decode(&[id], false).unwrap_or_default()
}

/// OpenAI reports impossible tokens as -9999 rather than -inf, which JSON cannot carry.
pub fn finite(lp: f32) -> f32 {
    if lp.is_finite() {
        lp
    } else {
        -9999.0
    }
}

/// One entry of chat `logprobs.content`.
pub fn chat_logprob(tok: &Tokenizer, lp: &TokenLogprobs) -> Value {
    let entry = |id: u32, l: f32| {
        let t = token_text(tok, id);
        json!({"token": t, "logprob": finite(l), "bytes": t.as_bytes()})
    };
    let mut e = entry(lp.token, lp.logprob);
    let top: Vec<Value> = lp.top.iter().map(|&(id, l)| entry(id, l)).collect();
    if let Some(obj) = e.as_object_mut() {
        obj.insert("top_logprobs".into(), top.into());
    }
    e
}

/// A prompt longer than the session holds cannot be answered.
pub fn check_context(
    prompt_tokens: usize,
    ctx: usize,
    param: &'static str,
) -> Result<(), ApiError> {
    if prompt_tokens == 0 {
        return Err(ApiError::invalid(param, "The prompt is empty"));
    }
    if prompt_tokens > ctx {
        return Err(ApiError::invalid(
            param,
            format!(
                "This model's maximum context length is {ctx} tokens. However, your prompt has {prompt_tokens} tokens. Please shorten it."
            ),
        )
        .with_code("context_length_exceeded"));
    }
    Ok(())
}

/// Everything a generation produced, for non-streaming answers.
pub struct Collected {
    pub text: String,
    pub logprobs: Vec<TokenLogprobs>,
    pub summary: Summary,
}

pub async fn collect(mut rx: mpsc::Receiver<Event>) -> Result<Collected, ApiError> {
    let mut text = String::new();
    let mut logprobs = Vec::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Piece {
                text: t,
                logprobs: lp,
            } => {
                text.push_str(&t);
                logprobs.extend(lp);
            }
            Event::Done(summary) => {
                return Ok(Collected {
                    text,
                    logprobs,
                    summary,
                })
            }
            Event::Error(e) => return Err(e),
        }
    }
    Err(ApiError::server("the generation ended without a result"))
}

/// The first event, so that an error before any output is a plain HTTP error rather than
/// an event inside a stream that already said 200.
pub async fn first_event(rx: &mut mpsc::Receiver<Event>) -> Result<Event, ApiError> {
    match rx.recv().await {
        Some(Event::Error(e)) => Err(e),
        Some(ev) => Ok(ev),
        None => Err(ApiError::server("the generation ended without a result")),
    }
}

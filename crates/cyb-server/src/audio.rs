//! `POST /v1/audio/transcriptions` and `POST /v1/audio/translations` (OpenAI's shape:
//! multipart/form-data) on a speech recognition model (Whisper).
//!
//! Fields: `file` (required; any container the decoder reads: WAV, FLAC, MP3, OGG/Vorbis,
//! M4A/AAC), `model`, `prompt` (the first window's prompt), `temperature`, `response_format`
//! (`json`, `text`, `srt`, `vtt`, `verbose_json`), `timestamp_granularities[]` (`segment`
//! and/or `word`: verbose_json's `segments` and `words`; segments alone by default), `stream`;
//! transcriptions also `language`. `temperature` 0 or absent decodes with
//! faster-whisper's fallback list (0, 0.2, …, 1.0: greedy or beam first, hotter when the text
//! fails the compression and log-probability checks); above 0 it samples at that temperature
//! only. `stream=true` sends `transcript.text.delta` events, one per decoded segment, then one
//! `transcript.text.done` with the whole text.
//!
//! An English-only model answers translations by transcribing: its output is English already
//! (faster-whisper does the same).
//!
//! Decoding the upload and transcribing run on a blocking thread and take one of the
//! `parallel` slots; a request whose client goes away stops at its next segment.

use crate::audio_form::AudioForm;
use crate::error::ApiError;
use crate::sse;
use crate::AppState;
use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cyb_runtime::transcribe::{
    decode_audio_bytes, Task, TranscribeOptions, Transcript, TranscriptFormat,
};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc;

/// The `response_format` values, as OpenAI names them.
const FORMATS: &str = "json, text, srt, vtt, verbose_json";

pub async fn transcriptions(
    State(state): State<Arc<AppState>>,
    body: Result<Multipart, MultipartRejection>,
) -> Result<Response, ApiError> {
    handle(state, body, Task::Transcribe).await
}

pub async fn translations(
    State(state): State<Arc<AppState>>,
    body: Result<Multipart, MultipartRejection>,
) -> Result<Response, ApiError> {
    handle(state, body, Task::Translate).await
}

/// What the request asks for, checked.
struct Request {
    opts: TranscribeOptions,
    format: TranscriptFormat,
    /// verbose_json lists the segments.
    segments: bool,
    /// verbose_json lists the words.
    words: bool,
    stream: bool,
}

async fn handle(
    state: Arc<AppState>,
    body: Result<Multipart, MultipartRejection>,
    task: Task,
) -> Result<Response, ApiError> {
    let form = AudioForm::read(body, state.config.max_audio_bytes).await?;
    let slot = state.find_speech(form.model.as_deref()).await?;
    let multilingual = slot.model.speech()?.is_multilingual();
    let req = request(&form, task, multilingual)?;
    let upload = form.file.ok_or_else(|| {
        ApiError::invalid(
            "file",
            "the `file` field is required: the audio to transcribe",
        )
    })?;

    let permit = state.admission.admit().await?;
    let samples = tokio::task::spawn_blocking(move || {
        decode_audio_bytes(upload.bytes, upload.name.as_deref())
    })
    .await
    .map_err(|e| ApiError::server(format!("the audio decoding task failed: {e}")))??;

    let (tx, mut rx) = mpsc::channel::<Progress>(16);
    let worker_state = state.clone();
    let model = slot.model.clone();
    let opts = req.opts.clone();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let _active = worker_state.metrics.active();
        // A closed channel (the client went away) stops the transcription.
        let mut on_segment = |s: &cyb_runtime::transcribe::Segment, _| {
            tx.blocking_send(Progress::Segment(s.text.clone())).is_ok()
        };
        let end = match model.transcribe(&samples, &opts, &mut on_segment) {
            Ok(mut t) => {
                // The endpoint's task, also where an English-only model transcribed.
                t.task = task.name().to_string();
                Progress::Done(t)
            }
            Err(e) => Progress::Failed(e.into()),
        };
        let _ = tx.blocking_send(end);
    });

    if req.stream {
        // The first event decides the status: an error before any text is a plain error answer.
        let first = first_event(&mut rx).await?;
        let (out, events) = mpsc::channel(16);
        tokio::spawn(stream(first, rx, out));
        return Ok(sse::response(events));
    }
    let transcript = loop {
        match rx.recv().await {
            Some(Progress::Segment(_)) => {}
            Some(Progress::Done(t)) => break t,
            Some(Progress::Failed(e)) => return Err(e),
            None => return Err(ApiError::server("the transcription task stopped")),
        }
    };
    Ok(render(&transcript, &req))
}

/// The request's fields as transcription options, or a 400 naming the bad one.
fn request(form: &AudioForm, task: Task, multilingual: bool) -> Result<Request, ApiError> {
    let format = match form.response_format.as_deref().map(str::trim) {
        None | Some("") => TranscriptFormat::Json,
        Some(f @ ("json" | "text" | "srt" | "vtt" | "verbose_json")) => {
            TranscriptFormat::parse(f).unwrap_or(TranscriptFormat::Json)
        }
        Some(other) => {
            return Err(ApiError::invalid(
                "response_format",
                format!("{other:?} is not a supported response_format; use one of {FORMATS}"),
            )
            .with_code("invalid_value"))
        }
    };
    let temperatures = match form.temperature.as_deref().map(str::trim) {
        None | Some("") => TranscribeOptions::default().temperatures,
        Some(t) => match t.parse::<f32>() {
            Ok(0.0) => TranscribeOptions::default().temperatures,
            Ok(v) if v.is_finite() && v > 0.0 && v <= 1.0 => vec![v],
            _ => {
                return Err(ApiError::invalid(
                    "temperature",
                    format!("{t:?} is not a valid temperature; it must be a number in [0, 1]"),
                )
                .with_code("invalid_value"))
            }
        },
    };
    let (mut words, mut segments) = (false, false);
    for g in &form.timestamp_granularities {
        match g.trim() {
            "word" => words = true,
            "segment" => segments = true,
            other => {
                return Err(ApiError::invalid(
                    "timestamp_granularities[]",
                    format!("{other:?} is not a timestamp granularity; use word or segment"),
                )
                .with_code("invalid_value"))
            }
        }
    }
    let stream = match form.stream.as_deref().map(str::trim) {
        None | Some("") => false,
        Some(s) if s.eq_ignore_ascii_case("true") || s == "1" => true,
        Some(s) if s.eq_ignore_ascii_case("false") || s == "0" => false,
        Some(s) => {
            return Err(
                ApiError::invalid("stream", format!("{s:?} is not true or false"))
                    .with_code("invalid_value"),
            )
        }
    };
    if stream && !matches!(format, TranscriptFormat::Json | TranscriptFormat::Text) {
        return Err(ApiError::invalid(
            "stream",
            "a stream sends text events; response_format must be json or text with stream=true",
        )
        .with_code("invalid_value"));
    }
    let nonempty = |s: &Option<String>| {
        s.as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    // Translations have no `language` (OpenAI's API); English-only models transcribe.
    let (task, language) = match task {
        Task::Translate if !multilingual => (Task::Transcribe, None),
        Task::Translate => (Task::Translate, None),
        Task::Transcribe => (Task::Transcribe, nonempty(&form.language)),
    };
    let verbose = format == TranscriptFormat::VerboseJson;
    let opts = TranscribeOptions {
        language,
        task,
        temperatures,
        initial_prompt: nonempty(&form.prompt),
        // Only verbose_json shows them, and they cost an alignment pass.
        word_timestamps: words && verbose,
        ..TranscribeOptions::default()
    };
    opts.validate()?;
    Ok(Request {
        opts,
        format,
        // As OpenAI: words alone leave the segments out.
        segments: segments || !words,
        words,
        stream,
    })
}
/// What the transcription thread reports: segments as they are decoded, then the end.
enum Progress {
    Segment(String),
    Done(Transcript),
    Failed(ApiError),
}

/// OpenAI's usage of an audio request: the seconds of audio.
fn usage(t: &Transcript) -> Value {
    json!({"type": "duration", "seconds": t.duration})
}

/// The transcript as `format`, with its media type.
fn render(t: &Transcript, req: &Request) -> Response {
    match req.format {
        TranscriptFormat::Json => {
            Json(json!({"text": t.text.trim(), "usage": usage(t)})).into_response()
        }
        TranscriptFormat::VerboseJson => {
            let mut v = t.verbose_json();
            if let Some(o) = v.as_object_mut() {
                if !req.segments {
                    o.remove("segments");
                }
                if req.words && !o.contains_key("words") {
                    o.insert("words".into(), json!([]));
                }
            }
            v["usage"] = usage(t);
            Json(v).into_response()
        }
        other => (
            [(header::CONTENT_TYPE, other.content_type())],
            t.render(other),
        )
            .into_response(),
    }
}

/// The first event of a stream: an error before any text becomes the answer's status.
async fn first_event(rx: &mut mpsc::Receiver<Progress>) -> Result<Progress, ApiError> {
    match rx.recv().await {
        Some(Progress::Failed(e)) => Err(e),
        Some(p) => Ok(p),
        None => Err(ApiError::server("the transcription task stopped")),
    }
}

/// Sends the stream's events: a delta per segment (the text's leading space dropped, so the
/// deltas add up to the final text), then `transcript.text.done`; a failure midway is an
/// error event. Returns when the client goes away.
async fn stream(first: Progress, mut rx: mpsc::Receiver<Progress>, out: mpsc::Sender<String>) {
    let mut started = false;
    let mut next = Some(first);
    while let Some(p) = next.take() {
        let event = match p {
            Progress::Segment(text) => {
                let delta = if started {
                    text
                } else {
                    text.trim_start().to_string()
                };
                if delta.is_empty() {
                    next = rx.recv().await;
                    continue;
                }
                started = true;
                json!({"type": "transcript.text.delta", "delta": delta})
            }
            Progress::Done(t) => json!({
                "type": "transcript.text.done",
                "text": t.text.trim(),
                "usage": usage(&t),
            }),
            Progress::Failed(e) => e.body(),
        };
        if out.send(sse::event(&event)).await.is_err() {
            return;
        }
        next = rx.recv().await;
    }
}

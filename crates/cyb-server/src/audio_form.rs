//! The multipart/form-data body of OpenAI's audio endpoints, read into its fields. The whole
//! body is bounded by the audio routes' body limit (413 above it); text fields are bounded
//! separately, so a long `prompt` cannot pass for an upload.

use crate::error::ApiError;
use axum::extract::multipart::{Field, MultipartError, MultipartRejection};
use axum::extract::Multipart;
use axum::http::StatusCode;

/// Largest text field (`prompt`, `language`, ...) in bytes.
pub const MAX_TEXT_FIELD: usize = 64 << 10;

/// The uploaded audio.
pub struct Upload {
    pub bytes: Vec<u8>,
    /// The client's file name, which tells the decoder the container when its bytes do not.
    pub name: Option<String>,
}

/// The fields of a transcription or translation request, as sent. Unknown fields are ignored,
/// as the JSON endpoints ignore unknown keys.
#[derive(Default)]
pub struct AudioForm {
    pub file: Option<Upload>,
    pub model: Option<String>,
    pub language: Option<String>,
    pub prompt: Option<String>,
    pub temperature: Option<String>,
    pub response_format: Option<String>,
    /// `timestamp_granularities[]` (repeatable; the bare name is taken too).
    pub timestamp_granularities: Vec<String>,
    pub stream: Option<String>,
}

impl AudioForm {
    /// Reads every field of `body`; `limit` is the body limit the route enforces (for the 413's
    /// message).
    pub async fn read(
        body: Result<Multipart, MultipartRejection>,
        limit: usize,
    ) -> Result<AudioForm, ApiError> {
        let multipart_error = |e| multipart_error(e, limit);
        let mut body = body.map_err(|rej| {
            ApiError::invalid(
                None,
                format!(
                    "the audio endpoints take a multipart/form-data body with a `file` field: {}",
                    rej.body_text()
                ),
            )
            .with_status(rej.status())
        })?;
        let mut form = AudioForm::default();
        while let Some(mut field) = body.next_field().await.map_err(multipart_error)? {
            let name = field.name().unwrap_or_default().to_string();
            match name.as_str() {
                "file" => {
                    if form.file.is_some() {
                        return Err(ApiError::invalid(
                            "file",
                            "more than one `file` field; send one audio file per request",
                        ));
                    }
                    let file_name = field.file_name().map(str::to_string);
                    let mut bytes = Vec::new();
                    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
                        bytes.extend_from_slice(&chunk);
                    }
                    form.file = Some(Upload {
                        bytes,
                        name: file_name,
                    });
                }
                "model" => form.model = Some(text(field, "model", limit).await?),
                "language" => form.language = Some(text(field, "language", limit).await?),
                "prompt" => form.prompt = Some(text(field, "prompt", limit).await?),
                "temperature" => form.temperature = Some(text(field, "temperature", limit).await?),
                "response_format" => {
                    form.response_format = Some(text(field, "response_format", limit).await?)
                }
                "timestamp_granularities[]" | "timestamp_granularities" => form
                    .timestamp_granularities
                    .push(text(field, "timestamp_granularities[]", limit).await?),
                "stream" => form.stream = Some(text(field, "stream", limit).await?),
                // Drained by the next `next_field`.
                _ => {}
            }
        }
        Ok(form)
    }
}

/// A text field, at most [`MAX_TEXT_FIELD`] bytes of UTF-8.
async fn text(mut field: Field<'_>, param: &'static str, limit: usize) -> Result<String, ApiError> {
    let mut bytes = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(|e| multipart_error(e, limit))? {
        if bytes.len() + chunk.len() > MAX_TEXT_FIELD {
            return Err(ApiError::invalid(
                param,
                format!("the {param} field is longer than {MAX_TEXT_FIELD} bytes"),
            )
            .with_code("invalid_value"));
        }
        bytes.extend_from_slice(&chunk);
    }
    String::from_utf8(bytes).map_err(|_| {
        ApiError::invalid(param, format!("the {param} field is not UTF-8 text"))
            .with_code("invalid_value")
    })
}

/// A body that broke off, was malformed or passed the size limit (413).
fn multipart_error(e: MultipartError, limit: usize) -> ApiError {
    let status = e.status();
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::invalid(
            "file",
            format!(
                "the request is larger than this server's limit of {limit} bytes for audio \
                 uploads (cyb-llm serve --max-audio-bytes)"
            ),
        )
        .with_status(status)
        .with_code("request_too_large");
    }
    let message = format!("the multipart body was rejected: {}", e.body_text());
    if status.is_server_error() {
        ApiError::server(message)
    } else {
        ApiError::invalid(None, message).with_status(status)
    }
}

/// [`AudioForm::read`] on a body given as bytes with its multipart boundary, as the audio
/// routes receive it: for fuzzing the form reader without a server.
pub async fn read_audio_form(
    body: Vec<u8>,
    boundary: &str,
    limit: usize,
) -> Result<AudioForm, ApiError> {
    use axum::extract::FromRequest;
    let req = axum::http::Request::builder()
        .method("POST")
        .header(
            axum::http::header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(axum::body::Body::from(body))
        .map_err(|e| ApiError::invalid(None, format!("cannot build the request: {e}")))?;
    let multipart = Multipart::from_request(req, &()).await;
    AudioForm::read(multipart, limit).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str, file: Option<&str>, value: &str) -> String {
        let filename = file.map_or(String::new(), |f| format!("; filename=\"{f}\""));
        format!(
            "--B\r\nContent-Disposition: form-data; name=\"{name}\"{filename}\r\n\r\n{value}\r\n"
        )
    }

    fn read(body: String) -> Result<AudioForm, ApiError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(read_audio_form(body.into_bytes(), "B", 1 << 20))
    }

    #[test]
    fn fields_are_read_and_bounded() {
        let body = part("file", Some("a.wav"), "RIFF")
            + &part("model", None, "whisper")
            + &part("timestamp_granularities[]", None, "word")
            + &part("timestamp_granularities[]", None, "segment")
            + &part("something_else", None, "ignored")
            + "--B--\r\n";
        let form = read(body).unwrap_or_else(|e| panic!("{e:?}"));
        let file = form.file.unwrap();
        assert_eq!(
            (file.bytes.as_slice(), file.name.as_deref()),
            (&b"RIFF"[..], Some("a.wav"))
        );
        assert_eq!(form.model.as_deref(), Some("whisper"));
        assert_eq!(form.timestamp_granularities, ["word", "segment"]);
        // Two files, and a text field past its limit, are refused.
        let two = part("file", Some("a"), "x") + &part("file", Some("b"), "y") + "--B--\r\n";
        assert!(read(two).is_err());
        let long = part("prompt", None, &"p".repeat(MAX_TEXT_FIELD + 1)) + "--B--\r\n";
        assert!(read(long).is_err());
        // A body that is not multipart at all.
        assert!(read("hello".into()).is_err());
    }
}

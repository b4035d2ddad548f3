//! OpenAI-style errors: `{"error": {"message", "type", "param", "code"}}` with a 4xx/5xx status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answer of the API.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `not_found_error`, `rate_limit_error`,
    /// `server_error`.
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    /// 400 about one request parameter.
    pub fn invalid(param: impl Into<Option<&'static str>>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.into().map(str::to_string),
            code: None,
        }
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    pub fn model_not_found(id: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "The model `{id}` does not exist; GET /v1/models lists the served ones"
            ),
            kind: "invalid_request_error",
            param: Some("model".into()),
            code: Some("model_not_found"),
        }
    }

    pub fn queue_full() -> Self {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: "The server is busy: every generation slot is taken and the queue is full; retry later".into(),
            kind: "rate_limit_error",
            param: None,
            code: Some("rate_limit_exceeded"),
        }
    }

    pub fn server(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
        }
    }

    pub fn not_found_route(path: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("No endpoint {path}"),
            kind: "invalid_request_error",
            param: None,
            code: Some("unknown_url"),
        }
    }

    /// The error object as JSON (also sent as an SSE event when a stream fails midway).
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

/// Errors of the runtime during a request: bad input the runtime found is the client's
/// fault (400), anything else is the server's.
impl From<cyb_tensor::Error> for ApiError {
    fn from(e: cyb_tensor::Error) -> Self {
        use cyb_tensor::Error as E;
        match e {
            E::InvalidArgument { .. } | E::Tokenizer { .. } => {
                ApiError::invalid(None, e.to_string())
            }
            other => ApiError::server(other.to_string()),
        }
    }
}

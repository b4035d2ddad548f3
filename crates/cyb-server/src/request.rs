//! Request bodies of the OpenAI API and their validation into sampling parameters.
//! Unknown fields are ignored, as the OpenAI API does for fields a model does not use.

use crate::error::ApiError;
use cyb_runtime::SamplingParams;
use serde::Deserialize;
use serde_json::Value;

/// `stop`: one string or a list.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// Fields shared by chat and text completions. `top_k`, `min_p` and `repetition_penalty`
/// are extensions (as in llama.cpp's and vLLM's servers).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Common {
    pub model: Option<String>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub seed: Option<serde_json::Number>,
    pub stop: Option<Stop>,
    pub n: Option<i64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<i64>,
    /// Keep generating past end-of-sequence tokens (llama.cpp's extension).
    pub ignore_eos: Option<bool>,
    /// The scales of the LoRA adapters loaded with the model for this request, by id (load
    /// order); adapters not listed get 0 (llama-server's extension).
    pub lora: Option<Vec<LoraChoice>>,
}

/// One adapter of a request's `lora` list.
#[derive(Clone, Debug, Deserialize)]
pub struct LoraChoice {
    pub id: i64,
    pub scale: f32,
}

impl Common {
    /// The request's LoRA scales for a model with `adapters` adapters (`None`: the model's
    /// defaults); an id the model lacks or a scale that is not a finite number is a 400.
    pub fn lora_scales(&self, adapters: usize) -> Result<Option<Vec<f32>>, ApiError> {
        let Some(list) = &self.lora else {
            return Ok(None);
        };
        let mut scales = vec![0.0; adapters];
        for c in list {
            let slot = usize::try_from(c.id)
                .ok()
                .and_then(|i| scales.get_mut(i))
                .ok_or_else(|| {
                    ApiError::invalid(
                        "lora",
                        format!(
                            "no LoRA adapter {} (the model has {adapters}; GET /lora-adapters \
                             lists them)",
                            c.id
                        ),
                    )
                })?;
            if !c.scale.is_finite() {
                return Err(ApiError::invalid("lora", "a scale must be a finite number"));
            }
            *slot = c.scale;
        }
        Ok(Some(scales))
    }
}

/// `content` of a message: text, or a list of parts of which only `text` parts are served.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Clone, Debug, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
    /// `{"url": ...}` (or the URL itself) of an `image_url` part.
    pub image_url: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct InMessage {
    pub role: String,
    pub content: Option<Content>,
    pub name: Option<String>,
    pub tool_calls: Option<Vec<InToolCall>>,
    pub tool_call_id: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct InToolCall {
    pub id: Option<String>,
    pub function: InFunction,
}

#[derive(Clone, Debug, Deserialize)]
pub struct InFunction {
    pub name: String,
    /// OpenAI sends the arguments as a JSON string.
    pub arguments: Value,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ChatRequest {
    #[serde(flatten)]
    pub common: Common,
    pub messages: Vec<InMessage>,
    pub max_completion_tokens: Option<i64>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<i64>,
    pub response_format: Option<Value>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct CompletionRequest {
    #[serde(flatten)]
    pub common: Common,
    pub prompt: Value,
    /// The number of most likely tokens to report per position (0–5 in OpenAI's API).
    pub logprobs: Option<i64>,
    pub echo: Option<bool>,
    pub suffix: Option<String>,
    pub best_of: Option<i64>,
}

/// Parses a JSON body into `T` with an OpenAI-style 400 on any error.
pub fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        let what = if e.is_syntax() || e.is_eof() {
            "We could not parse the JSON body of your request"
        } else {
            "Invalid request body"
        };
        ApiError::invalid(None, format!("{what}: {e}"))
    })
}

fn range(param: &'static str, v: f32, lo: f32, hi: f32, lo_open: bool) -> Result<f32, ApiError> {
    let low_ok = if lo_open { v > lo } else { v >= lo };
    if v.is_finite() && low_ok && v <= hi {
        Ok(v)
    } else {
        let open = if lo_open { "(" } else { "[" };
        Err(ApiError::invalid(
            param,
            format!("{v} is not a valid value for {param}; it must be in {open}{lo}, {hi}]"),
        )
        .with_code("invalid_value"))
    }
}

impl Common {
    /// Sampling parameters with OpenAI's defaults (temperature 1, top_p 1, no top-k, no
    /// min-p); `max_tokens` is the requested value, checked against `limit`, else `default`.
    pub fn sampling(
        &self,
        max_tokens: Option<i64>,
        max_param: &'static str,
        limit: usize,
        default: usize,
    ) -> Result<SamplingParams, ApiError> {
        if let Some(n) = self.n {
            if n != 1 {
                return Err(ApiError::invalid(
                    "n",
                    format!("n = {n} is not supported; this server returns one choice (n = 1)"),
                )
                .with_code("invalid_value"));
            }
        }
        let max_tokens = match max_tokens {
            None => default.min(limit),
            Some(m) if m >= 1 && (m as u64) <= limit as u64 => m as usize,
            Some(m) => {
                return Err(ApiError::invalid(
                    max_param,
                    format!("{max_param} = {m} is out of range; it must be between 1 and {limit}"),
                )
                .with_code("invalid_value"))
            }
        };
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > 4 {
            return Err(
                ApiError::invalid("stop", "at most 4 stop sequences are allowed")
                    .with_code("invalid_value"),
            );
        }
        let seed = self
            .seed
            .as_ref()
            .map(|n| {
                n.as_u64()
                    .or_else(|| n.as_i64().map(|i| i as u64))
                    .ok_or_else(|| ApiError::invalid("seed", "seed must be an integer"))
            })
            .transpose()?;
        Ok(SamplingParams {
            temperature: range(
                "temperature",
                self.temperature.unwrap_or(1.0),
                0.0,
                2.0,
                false,
            )?,
            top_p: range("top_p", self.top_p.unwrap_or(1.0), 0.0, 1.0, true)?,
            top_k: self.top_k.unwrap_or(0),
            min_p: range("min_p", self.min_p.unwrap_or(0.0), 0.0, 1.0, false)?,
            repetition_penalty: range(
                "repetition_penalty",
                self.repetition_penalty.unwrap_or(1.0),
                0.0,
                10.0,
                true,
            )?,
            presence_penalty: range(
                "presence_penalty",
                self.presence_penalty.unwrap_or(0.0),
                -2.0,
                2.0,
                false,
            )?,
            frequency_penalty: range(
                "frequency_penalty",
                self.frequency_penalty.unwrap_or(0.0),
                -2.0,
                2.0,
                false,
            )?,
            penalty_last_n: 64,
            seed,
            max_tokens: Some(max_tokens),
            stop,
            ignore_eos: self.ignore_eos.unwrap_or(false),
        })
    }

    pub fn stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
    }
}

//! Structured outputs: `response_format` and forced tool calls become a grammar that
//! constrains decoding (cyb-runtime's llguidance constraint).
//!
//! - `{"type": "json_object"}`: any JSON object;
//! - `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`: a JSON value valid
//!   against `schema` (always enforced, whatever `strict` says);
//! - extensions: `{"type": "regex", "regex": "..."}` and `{"type": "lark", "lark": "..."}`;
//! - `tool_choice: "required"` or a named function: one call in the model's own tool-call
//!   format (probed from its chat template: Hermes `<tool_call>` by default, Llama 3 JSON,
//!   Mistral `[TOOL_CALLS]`) whose arguments follow the tool's `parameters` schema.

use crate::error::ApiError;
use crate::pool::ModelSlot;
use cyb_runtime::chat_template::{FunctionCall, ToolCall};
use cyb_runtime::sampling::grammar::{with_json_layout, Grammar, GrammarConstraint};
use cyb_runtime::{ChatMessage, Model, RenderOptions};
use serde_json::{json, Value};
use std::sync::Arc;

const PARAM: &str = "response_format";

/// The grammar `response_format` asks for; `None` for plain text.
pub fn response_format(rf: Option<&Value>) -> Result<Option<Grammar>, ApiError> {
    let Some(rf) = rf else { return Ok(None) };
    let kind = rf.get("type").and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid(
            PARAM,
            "response_format must be an object with a string `type`",
        )
    })?;
    let field = |name: &str| {
        rf.get(name).and_then(Value::as_str).ok_or_else(|| {
            ApiError::invalid(
                PARAM,
                format!("response_format of type {kind:?} needs a string field `{name}`"),
            )
        })
    };
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(Grammar::JsonObject)),
        "json_schema" => {
            let spec = rf.get("json_schema").ok_or_else(|| {
                ApiError::invalid(
                    PARAM,
                    "response_format of type \"json_schema\" needs a `json_schema` object",
                )
            })?;
            match spec.get("schema") {
                None => Ok(Some(Grammar::JsonSchema(json!({})))),
                Some(s @ Value::Object(_)) => Ok(Some(Grammar::JsonSchema(s.clone()))),
                Some(Value::Bool(true)) => Ok(Some(Grammar::JsonSchema(json!({})))),
                Some(other) => Err(ApiError::invalid(
                    PARAM,
                    format!("json_schema.schema must be a JSON schema object, got {other}"),
                )),
            }
        }
        "regex" => Ok(Some(Grammar::Regex(field("regex")?.to_string()))),
        "lark" => Ok(Some(Grammar::Lark(field("lark")?.to_string()))),
        other => Err(ApiError::invalid(
            PARAM,
            format!(
                "response_format type {other:?} is not supported; use \"text\", \"json_object\", \"json_schema\", \"regex\" or \"lark\""
            ),
        )
        .with_code("invalid_value")),
    }
}

/// How the model writes a tool call.
#[derive(Clone, Copy, Debug, PartialEq)]
enum CallFormat {
    /// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`
    Hermes,
    /// `{"name": ..., "parameters": {...}}`
    Llama,
    /// `[TOOL_CALLS][{"name": ..., "arguments": {...}}]`
    Mistral,
}

/// Renders an assistant turn holding a call and looks at how the template wrote it.
fn probe_format(model: &Model) -> CallFormat {
    let Some(template) = model.chat_template() else {
        return CallFormat::Hermes;
    };
    let tool = json!({"type": "function", "function": {"name": "cyb_probe_fn",
        "description": "probe", "parameters": {"type": "object", "properties": {}}}});
    let messages = [
        ChatMessage::user("probe"),
        ChatMessage {
            role: "assistant".into(),
            content: None,
            tool_calls: Some(vec![ToolCall {
                id: Some("call_0".into()),
                kind: "function".into(),
                function: FunctionCall {
                    name: "cyb_probe_fn".into(),
                    arguments: json!({"cyb_probe_arg": 1}),
                },
            }]),
            ..ChatMessage::default()
        },
    ];
    let opts = RenderOptions {
        tools: Some(json!([tool])),
        ..RenderOptions::default()
    };
    let Ok(text) = template.render(&messages, &opts) else {
        return CallFormat::Hermes;
    };
    if text.contains("<tool_call>") {
        CallFormat::Hermes
    } else if text.contains("[TOOL_CALLS]") {
        CallFormat::Mistral
    } else if text.contains("\"parameters\"") && text.contains("cyb_probe_arg") {
        CallFormat::Llama
    } else {
        CallFormat::Hermes
    }
}

/// The grammar for one call of one of `tools` (`tool_choice: "required"`) or of `only`.
pub fn tool_call(model: &Model, tools: &[Value], only: Option<&str>) -> Result<Grammar, ApiError> {
    let format = probe_format(model);
    let args_key = if format == CallFormat::Llama {
        "parameters"
    } else {
        "arguments"
    };
    let mut options = Vec::new();
    for t in tools {
        let Some(f) = t.get("function") else { continue };
        let Some(name) = f.get("name").and_then(Value::as_str) else {
            continue;
        };
        if only.is_some_and(|o| o != name) {
            continue;
        }
        let params = match f.get("parameters") {
            None => json!({"type": "object"}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(other) => {
                return Err(ApiError::invalid(
                    "tools",
                    format!(
                        "the parameters of tool {name:?} must be a JSON schema object, got {other}"
                    ),
                ))
            }
        };
        options.push(json!({
            "type": "object",
            "properties": {"name": {"const": name}, args_key: params},
            "required": ["name", args_key],
            "additionalProperties": false,
        }));
    }
    let call = match options.len() {
        0 => return Err(ApiError::invalid("tool_choice", "no tool to call")),
        1 => options.remove(0),
        _ => json!({"anyOf": options}),
    };
    let call = with_json_layout(call).map_err(|e| ApiError::invalid("tools", e.to_string()))?;
    let lark = match format {
        CallFormat::Hermes => {
            format!("start: \"<tool_call>\\n\" call \"\\n</tool_call>\"\ncall: %json {call}\n")
        }
        CallFormat::Llama => format!("start: call\ncall: %json {call}\n"),
        CallFormat::Mistral => format!("start: \"[TOOL_CALLS][\" call \"]\"\ncall: %json {call}\n"),
    };
    Ok(Grammar::Lark(lark))
}

/// Compiles `grammar` for `slot`'s model off the async threads (indexing the vocabulary the
/// first time); a grammar that does not compile is a 400 naming the problem.
pub async fn constraint(
    slot: &Arc<ModelSlot>,
    grammar: Grammar,
    param: &'static str,
) -> Result<GrammarConstraint, ApiError> {
    let slot = slot.clone();
    let compiled = tokio::task::spawn_blocking(move || {
        let compiler = slot.grammar_compiler()?;
        compiler
            .compile(&grammar)
            .map_err(|e| ApiError::invalid(param, e.to_string()).with_code("invalid_grammar"))
    })
    .await;
    compiled.map_err(|e| ApiError::server(format!("grammar compilation failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_formats_map_to_grammars() {
        assert_eq!(response_format(None).unwrap(), None);
        assert_eq!(
            response_format(Some(&json!({"type": "text"}))).unwrap(),
            None
        );
        assert_eq!(
            response_format(Some(&json!({"type": "json_object"}))).unwrap(),
            Some(Grammar::JsonObject)
        );
        let s = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        assert_eq!(
            response_format(Some(
                &json!({"type": "json_schema", "json_schema": {"name": "x", "schema": s, "strict": true}})
            ))
            .unwrap(),
            Some(Grammar::JsonSchema(s))
        );
        for bad in [
            json!({"type": "json_schema"}),
            json!({"type": "json_schema", "json_schema": {"schema": 3}}),
            json!({"type": "yaml"}),
            json!({"type": "regex"}),
            json!("json_object"),
        ] {
            let e = response_format(Some(&bad)).unwrap_err();
            assert_eq!(e.status, 400, "{bad}");
            assert_eq!(e.param.as_deref(), Some(PARAM));
        }
    }
}

//! Tool calls in the formats models are trained to write, turned into OpenAI `tool_calls`:
//! - Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one or more,
//!   possibly after some text;
//! - Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`, or the newer
//!   `[TOOL_CALLS]name[ARGS]{...}`;
//! - Llama 3.x: the whole answer is `{"name": ..., "parameters": {...}}` (optionally after
//!   `<|python_tag|>`), accepted only when `name` is one of the offered tools.

use serde_json::Value;

/// One call: the function's name and its arguments as a JSON object.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedToolCall {
    pub name: String,
    pub arguments: Value,
}

/// The calls in `text` and the text that is not part of a call (`None` when nothing is
/// left). `None` overall when `text` holds no well-formed call. `tool_names` are the offered
/// tools' names.
pub fn parse_tool_calls(
    text: &str,
    tool_names: &[String],
) -> Option<(Option<String>, Vec<ParsedToolCall>)> {
    hermes(text)
        .or_else(|| mistral(text))
        .or_else(|| llama_json(text, tool_names))
}

fn leftover(s: String) -> Option<String> {
    let t = s.trim();
    (!t.is_empty()).then(|| t.to_string())
}

fn call_from(v: &Value, args_keys: &[&str]) -> Option<ParsedToolCall> {
    let name = v.get("name")?.as_str()?.to_string();
    let mut arguments = args_keys
        .iter()
        .find_map(|k| v.get(*k))
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()));
    // Some models write the arguments as a JSON string.
    if let Value::String(s) = &arguments {
        if let Ok(parsed) = serde_json::from_str::<Value>(s) {
            arguments = parsed;
        }
    }
    arguments
        .is_object()
        .then_some(ParsedToolCall { name, arguments })
}

fn hermes(text: &str) -> Option<(Option<String>, Vec<ParsedToolCall>)> {
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    let mut calls = Vec::new();
    let mut rest_text = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        rest_text.push_str(&rest[..start]);
        let after = &rest[start + OPEN.len()..];
        // A missing close tag at the very end still counts (generation stopped at it).
        let (inner, next) = match after.find(CLOSE) {
            Some(end) => (&after[..end], &after[end + CLOSE.len()..]),
            None => (after, ""),
        };
        let v: Value = serde_json::from_str(inner.trim()).ok()?;
        calls.push(call_from(&v, &["arguments", "parameters"])?);
        rest = next;
    }
    rest_text.push_str(rest);
    (!calls.is_empty()).then(|| (leftover(rest_text), calls))
}

fn mistral(text: &str) -> Option<(Option<String>, Vec<ParsedToolCall>)> {
    const TAG: &str = "[TOOL_CALLS]";
    let start = text.find(TAG)?;
    let before = text[..start].to_string();
    let body = text[start + TAG.len()..].trim();
    let calls = if body.starts_with('[') {
        let list: Vec<Value> = serde_json::from_str(body).ok()?;
        list.iter()
            .map(|v| call_from(v, &["arguments", "parameters"]))
            .collect::<Option<Vec<_>>>()?
    } else {
        let mut calls = Vec::new();
        for segment in body.split(TAG) {
            let (name, args) = segment.split_once("[ARGS]")?;
            let arguments: Value = serde_json::from_str(args.trim()).ok()?;
            if !arguments.is_object() {
                return None;
            }
            calls.push(ParsedToolCall {
                name: name.trim().to_string(),
                arguments,
            });
        }
        calls
    };
    (!calls.is_empty()).then(|| (leftover(before), calls))
}

fn llama_json(text: &str, tool_names: &[String]) -> Option<(Option<String>, Vec<ParsedToolCall>)> {
    let t = text.trim();
    let t = t.strip_prefix("<|python_tag|>").unwrap_or(t).trim();
    let v: Value = serde_json::from_str(t).ok()?;
    let call = call_from(&v, &["parameters", "arguments"])?;
    tool_names.contains(&call.name).then(|| (None, vec![call]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names() -> Vec<String> {
        vec!["get_weather".to_string()]
    }

    #[test]
    fn hermes_calls_with_text_before() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"CET\\\"}\"}</tool_call>";
        let (content, calls) = parse_tool_calls(text, &names()).unwrap();
        assert_eq!(content.as_deref(), Some("Let me check."));
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].arguments, json!({"city": "Paris"}));
        assert_eq!(calls[1].arguments, json!({"tz": "CET"}));
    }

    #[test]
    fn hermes_without_close_tag_and_broken_json() {
        let (_, calls) =
            parse_tool_calls("<tool_call>{\"name\": \"f\", \"arguments\": {}}", &[]).unwrap();
        assert_eq!(calls[0].name, "f");
        assert!(parse_tool_calls("<tool_call>{\"name\": \"f\", \"argu", &[]).is_none());
    }

    #[test]
    fn mistral_both_forms() {
        let (_, calls) = parse_tool_calls(
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]",
            &[],
        )
        .unwrap();
        assert_eq!(calls[0].arguments, json!({"city": "Oslo"}));
        let (_, calls) =
            parse_tool_calls("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}", &[]).unwrap();
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].arguments, json!({"city": "Rome"}));
    }

    #[test]
    fn llama_json_only_for_offered_tools() {
        let text =
            "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}}";
        let (content, calls) = parse_tool_calls(text, &names()).unwrap();
        assert_eq!(content, None);
        assert_eq!(calls[0].arguments, json!({"city": "Lima"}));
        assert!(parse_tool_calls("{\"name\": \"other\", \"parameters\": {}}", &names()).is_none());
        assert!(parse_tool_calls("Just an answer.", &names()).is_none());
    }
}

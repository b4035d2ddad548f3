//! Structured outputs over HTTP: `response_format` (json_object, json_schema, and the regex
//! and lark extensions) and forced tool calls. The tiny chat fixture has random weights, so
//! the answers are well-formed only because the grammar made them so.

mod common;

use common::{chat_text, post, start_tiny, stream};
use cyb_server::ServerConfig;
use serde_json::{json, Value};

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 10},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "pet": {"enum": ["cat", "dog", "none"]},
            "scores": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
                       "minItems": 1, "maxItems": 3},
            "home": {"type": "object",
                     "properties": {"city": {"type": "string", "maxLength": 8},
                                    "floor": {"type": "integer", "minimum": -2, "maximum": 40}},
                     "required": ["city", "floor"], "additionalProperties": false}
        },
        "required": ["name", "age", "pet", "scores", "home"],
        "additionalProperties": false
    })
}

/// Checks `v` against [`schema`] keyword by keyword.
fn check_person(v: &Value) -> Result<(), String> {
    let o = v.as_object().ok_or("not an object")?;
    let keys: Vec<&str> = o.keys().map(String::as_str).collect();
    if keys != ["name", "age", "pet", "scores", "home"] {
        return Err(format!("keys {keys:?}"));
    }
    let name = o["name"].as_str().ok_or("name")?;
    if name.chars().count() > 10 {
        return Err("name too long".into());
    }
    let age_ok = o["age"].as_u64().is_some_and(|a| a <= 120);
    if !age_ok {
        return Err("age".into());
    }
    if !["cat", "dog", "none"].contains(&o["pet"].as_str().ok_or("pet")?) {
        return Err("pet".into());
    }
    let scores = o["scores"].as_array().ok_or("scores")?;
    if !(1..=3).contains(&scores.len())
        || !scores.iter().all(|s| s.as_u64().is_some_and(|s| s <= 9))
    {
        return Err("scores".into());
    }
    let home = o["home"].as_object().ok_or("home")?;
    let city_ok = home["city"]
        .as_str()
        .is_some_and(|c| c.chars().count() <= 8);
    let floor_ok = home["floor"]
        .as_i64()
        .is_some_and(|f| (-2..=40).contains(&f));
    if home.len() != 2 || !city_ok || !floor_ok {
        return Err("home".into());
    }
    Ok(())
}

fn json_schema_format() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "person", "schema": schema(), "strict": true}})
}

#[tokio::test]
async fn json_schema_answers_always_validate() {
    let s = start_tiny(ServerConfig::default()).await;
    let url = s.url("/v1/chat/completions");
    let messages = json!([{"role": "user", "content": "Describe a person."}]);
    for (temperature, seed) in [(0.0, 0), (0.7, 1), (1.0, 2), (1.0, 3), (1.5, 4), (1.5, 5)] {
        for stream_it in [false, true] {
            let body = json!({"messages": messages, "response_format": json_schema_format(),
                "temperature": temperature, "seed": seed, "max_tokens": 180, "stream": stream_it});
            let (text, finish) = if stream_it {
                let events = stream(&url, &body).await;
                let finish = events
                    .iter()
                    .filter_map(|e| e["choices"].get(0)?["finish_reason"].as_str())
                    .next_back()
                    .map(str::to_string);
                (chat_text(&events), finish.unwrap_or_default())
            } else {
                let (st, v) = post(&url, &body).await;
                assert_eq!(st, 200, "{v}");
                let c = &v["choices"][0];
                let text = c["message"]["content"].as_str().unwrap().to_string();
                (text, c["finish_reason"].as_str().unwrap().to_string())
            };
            let case = format!("T={temperature} seed={seed} stream={stream_it}: {text}");
            assert_eq!(finish, "stop", "{case}");
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {case}"));
            check_person(&v).unwrap_or_else(|e| panic!("{e}: {case}"));
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn json_object_regex_and_lark_formats() {
    let s = start_tiny(ServerConfig::default()).await;
    let url = s.url("/v1/chat/completions");
    let messages = json!([{"role": "user", "content": "Answer."}]);
    for seed in 0..3 {
        let body = json!({"messages": messages, "response_format": {"type": "json_object"},
            "temperature": 1.0, "seed": seed, "max_tokens": 150});
        let (st, v) = post(&url, &body).await;
        assert_eq!(st, 200, "{v}");
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        if v["choices"][0]["finish_reason"] == "stop" {
            let parsed: Value =
                serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
            assert!(parsed.is_object(), "{text}");
        } else {
            assert!(text.starts_with('{'), "{text}");
        }

        let body = json!({"messages": messages, "temperature": 1.2, "seed": seed,
            "response_format": {"type": "regex", "regex": "(red|green|blue) [0-9]{3}"}});
        let (st, v) = post(&url, &body).await;
        assert_eq!(st, 200, "{v}");
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        let (color, digits) = text.split_once(' ').unwrap_or_else(|| panic!("{text}"));
        assert!(["red", "green", "blue"].contains(&color), "{text}");
        assert!(
            digits.len() == 3 && digits.bytes().all(|b| b.is_ascii_digit()),
            "{text}"
        );

        let lark = "start: \"(\" item (\", \" item)~0..3 \")\"\nitem: \"a\" | \"bb\" | NUM\nNUM: /[0-9]{1,2}/\n";
        let body = json!({"messages": messages, "temperature": 1.2, "seed": seed,
            "response_format": {"type": "lark", "lark": lark}});
        let (st, v) = post(&url, &body).await;
        assert_eq!(st, 200, "{v}");
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        let inner = text
            .strip_prefix('(')
            .and_then(|t| t.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{text}"));
        let items: Vec<&str> = inner.split(", ").collect();
        assert!((1..=4).contains(&items.len()), "{text}");
        for i in items {
            let num = (1..=2).contains(&i.len()) && i.bytes().all(|b| b.is_ascii_digit());
            assert!(i == "a" || i == "bb" || num, "{text}");
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn invalid_formats_are_400_naming_the_problem() {
    let s = start_tiny(ServerConfig::default()).await;
    let url = s.url("/v1/chat/completions");
    let messages = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strnig"}}}),
            "strnig",
        ),
        (
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/nope"}}}),
            "nope",
        ),
        (
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}),
            "schema",
        ),
        (json!({"type": "json_schema"}), "json_schema"),
        (json!({"type": "regex", "regex": "(open"}), ""),
        (
            json!({"type": "lark", "lark": "start: missing_rule"}),
            "missing_rule",
        ),
        (json!({"type": "yaml"}), "yaml"),
        (
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                "$ref": "#/$defs/a"}}}),
            "$ref cycle",
        ),
    ];
    for (rf, needle) in cases {
        let (st, v) = post(&url, &json!({"messages": messages, "response_format": rf})).await;
        assert_eq!(st, 400, "{rf}: {v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert_eq!(v["error"]["param"], "response_format", "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{rf}: {msg}");
        // The grammar engine's internal state stays out of the message.
        assert!(
            !msg.contains("<state>") && !msg.contains("lexer_cost"),
            "{rf}: {msg}"
        );
    }
    // The server is still up and serving constrained requests.
    let body =
        json!({"messages": messages, "response_format": {"type": "json_object"}, "max_tokens": 5});
    assert_eq!(post(&url, &body).await.0, 200);
    s.stop().await;
}

#[tokio::test]
async fn forced_tool_calls_follow_the_parameters_schema() {
    let s = start_tiny(ServerConfig::default()).await;
    let url = s.url("/v1/chat/completions");
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12},
                           "unit": {"enum": ["C", "F"]}},
            "required": ["city", "unit"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
            "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                           "b": {"type": "integer", "minimum": 0, "maximum": 99}},
            "required": ["a", "b"], "additionalProperties": false}}}
    ]);
    let messages = json!([{"role": "user", "content": "Weather in Paris?"}]);
    let named = json!({"type": "function", "function": {"name": "add"}});
    for (choice, seed) in [(json!("required"), 0), (json!("required"), 1), (named, 2)] {
        for stream_it in [false, true] {
            let body = json!({"messages": messages, "tools": tools, "tool_choice": choice,
                "temperature": 1.0, "seed": seed, "max_tokens": 150, "stream": stream_it});
            let (calls, finish) = if stream_it {
                let events = stream(&url, &body).await;
                let last = events
                    .iter()
                    .rev()
                    .find(|e| e["choices"].get(0).is_some())
                    .unwrap()
                    .clone();
                let c = &last["choices"][0];
                (c["delta"]["tool_calls"].clone(), c["finish_reason"].clone())
            } else {
                let (st, v) = post(&url, &body).await;
                assert_eq!(st, 200, "{v}");
                let c = &v["choices"][0];
                (
                    c["message"]["tool_calls"].clone(),
                    c["finish_reason"].clone(),
                )
            };
            let case = format!("{choice} seed={seed} stream={stream_it}: {calls}");
            assert_eq!(finish, "tool_calls", "{case}");
            let calls = calls.as_array().unwrap_or_else(|| panic!("{case}"));
            assert_eq!(calls.len(), 1, "{case}");
            let f = &calls[0]["function"];
            let args: Value = serde_json::from_str(f["arguments"].as_str().unwrap()).unwrap();
            match f["name"].as_str().unwrap() {
                "get_weather" => {
                    assert!(choice == "required", "{case}");
                    assert!(
                        args["city"].as_str().unwrap().chars().count() <= 12,
                        "{case}"
                    );
                    assert!(
                        ["C", "F"].contains(&args["unit"].as_str().unwrap()),
                        "{case}"
                    );
                    assert_eq!(args.as_object().unwrap().len(), 2, "{case}");
                }
                "add" => {
                    assert!(args["a"].as_u64().unwrap() <= 99, "{case}");
                    assert!(args["b"].as_u64().unwrap() <= 99, "{case}");
                    assert_eq!(args.as_object().unwrap().len(), 2, "{case}");
                }
                other => panic!("unknown tool {other}: {case}"),
            }
        }
    }
    s.stop().await;
}

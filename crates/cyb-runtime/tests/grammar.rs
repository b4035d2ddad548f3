//! Grammar-constrained decoding. The tiny chat fixture has random weights, so left alone it
//! writes noise: every output below is well-formed only because the constraint made it so.
//! Outputs are checked by hand-written checkers (a JSON-schema subset validator, the regex and
//! Lark languages spelled out), independent of llguidance.
#![cfg(feature = "grammar")]

use cyb_runtime::sampling::grammar::{Grammar, GrammarCompiler};
use cyb_runtime::{FinishReason, Model, Runtime, RuntimeOptions, SamplingParams};
use serde_json::{json, Value};
use std::path::PathBuf;

mod common;

fn tiny() -> Model {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny_chat/hf");
    Runtime::new(RuntimeOptions::default())
        .unwrap()
        .load(path)
        .unwrap()
}

/// Generates under `grammar`; returns the text and why generation ended.
fn run(
    model: &Model,
    compiler: &GrammarCompiler,
    grammar: &Grammar,
    prompt: &str,
    temperature: f32,
    seed: u64,
    max_tokens: usize,
) -> (String, FinishReason) {
    let prompt = model.tokenizer().encode(prompt, false).unwrap();
    let mut g = model.generator(None).unwrap();
    let params = SamplingParams {
        temperature,
        seed: Some(seed),
        max_tokens: Some(max_tokens),
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        ..SamplingParams::default()
    };
    let constraint = compiler.compile(grammar).unwrap();
    let mut gen = g
        .generate(&prompt, params)
        .unwrap()
        .with_constraint(Box::new(constraint));
    let mut text = String::new();
    for p in gen.by_ref() {
        text.push_str(&p.unwrap().text);
    }
    // Shown with --nocapture, to see what the constraint let through.
    eprintln!("T={temperature} seed={seed}: {text}");
    (text, gen.finish_reason().unwrap())
}

/// Checks `v` against the JSON-schema keywords the tests use; returns the first violation.
fn validate(v: &Value, s: &Value, at: &str) -> Result<(), String> {
    let fail = |why: &str| Err(format!("{at}: {why} (value {v})"));
    if let Some(options) = s.get("enum").and_then(Value::as_array) {
        if !options.contains(v) {
            return fail("not in enum");
        }
    }
    let ty = s.get("type").and_then(Value::as_str);
    let type_ok = match ty {
        None => true,
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        Some("null") => v.is_null(),
        Some(other) => return fail(&format!("checker does not know type {other}")),
    };
    if !type_ok {
        return fail("wrong type");
    }
    if let Some(x) = v.as_f64() {
        if s.get("minimum")
            .and_then(Value::as_f64)
            .is_some_and(|m| x < m)
        {
            return fail("below minimum");
        }
        if s.get("maximum")
            .and_then(Value::as_f64)
            .is_some_and(|m| x > m)
        {
            return fail("above maximum");
        }
    }
    if let Some(text) = v.as_str() {
        let n = text.chars().count() as u64;
        if s.get("maxLength")
            .and_then(Value::as_u64)
            .is_some_and(|m| n > m)
        {
            return fail("too long");
        }
        if s.get("minLength")
            .and_then(Value::as_u64)
            .is_some_and(|m| n < m)
        {
            return fail("too short");
        }
    }
    if let Some(items) = v.as_array() {
        let n = items.len() as u64;
        if s.get("maxItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| n > m)
        {
            return fail("too many items");
        }
        if s.get("minItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| n < m)
        {
            return fail("too few items");
        }
        if let Some(item_schema) = s.get("items") {
            for (i, item) in items.iter().enumerate() {
                validate(item, item_schema, &format!("{at}[{i}]"))?;
            }
        }
    }
    if let Some(obj) = v.as_object() {
        let props = s.get("properties").and_then(Value::as_object);
        for key in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = key.as_str().unwrap();
            if !obj.contains_key(key) {
                return fail(&format!("missing required {key}"));
            }
        }
        for (k, val) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(ps) => validate(val, ps, &format!("{at}.{k}"))?,
                None if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return fail(&format!("unexpected property {k}"))
                }
                None => {}
            }
        }
    }
    Ok(())
}

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "score": {"type": "number", "minimum": -1, "maximum": 1},
            "kind": {"enum": ["cat", "dog", 3, null]},
            "tags": {
                "type": "array",
                "items": {"type": "string", "enum": ["red", "green", "blue"]},
                "minItems": 1,
                "maxItems": 3
            },
            "address": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 10},
                    "zip": {"type": "integer", "minimum": 1000, "maximum": 99999},
                    "verified": {"type": "boolean"}
                },
                "required": ["city", "zip", "verified"],
                "additionalProperties": false
            }
        },
        "required": ["name", "age", "score", "kind", "tags", "address"],
        "additionalProperties": false
    })
}

#[test]
fn json_schema_output_always_parses_and_validates() {
    let model = tiny();
    let compiler = GrammarCompiler::new(model.tokenizer()).unwrap();
    let schema = person_schema();
    let grammar = Grammar::JsonSchema(schema.clone());
    for &temperature in &[0.0f32, 0.7, 1.0, 1.5] {
        for seed in 0..4u64 {
            let (text, finish) = run(&model, &compiler, &grammar, "JSON:", temperature, seed, 200);
            let case = format!("T={temperature} seed={seed}: {text:?}");
            assert_eq!(finish, FinishReason::Stop, "{case}");
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("does not parse ({e}): {case}"));
            validate(&v, &schema, "$").unwrap_or_else(|e| panic!("{e}: {case}"));
        }
    }
}

#[test]
fn json_object_output_is_an_object_and_refs_resolve() {
    let model = tiny();
    let compiler = GrammarCompiler::new(model.tokenizer()).unwrap();
    for seed in 0..4u64 {
        let (text, finish) = run(&model, &compiler, &Grammar::JsonObject, "{", 1.0, seed, 200);
        if finish == FinishReason::Stop {
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
            assert!(v.is_object(), "{text:?}");
        } else {
            // An unbounded object may run out of tokens; what it wrote is still a prefix.
            assert!(text.starts_with('{'), "{text:?}");
        }
    }
    // `$defs` and local `$ref`s.
    let schema = json!({
        "$defs": {"point": {"type": "object",
            "properties": {"x": {"type": "integer", "minimum": -9, "maximum": 9},
                           "y": {"type": "integer", "minimum": -9, "maximum": 9}},
            "required": ["x", "y"], "additionalProperties": false}},
        "type": "array", "items": {"$ref": "#/$defs/point"}, "minItems": 2, "maxItems": 4
    });
    let point = &schema["$defs"]["point"];
    for seed in 0..4u64 {
        let grammar = Grammar::JsonSchema(schema.clone());
        let (text, finish) = run(&model, &compiler, &grammar, "points", 1.2, seed, 200);
        assert_eq!(finish, FinishReason::Stop, "{text:?}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        let items = v.as_array().unwrap();
        assert!((2..=4).contains(&items.len()), "{text:?}");
        for item in items {
            validate(item, point, "$[]").unwrap_or_else(|e| panic!("{e}: {text:?}"));
        }
    }
}

/// The language of `(yes|no|maybe)-[0-9]{2,4}-[a-f]{1,3}`.
fn is_answer_code(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let [word, digits, hex] = parts.as_slice() else {
        return false;
    };
    ["yes", "no", "maybe"].contains(word)
        && (2..=4).contains(&digits.len())
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (1..=3).contains(&hex.len())
        && hex.bytes().all(|b| (b'a'..=b'f').contains(&b))
}

#[test]
fn regex_output_matches() {
    let model = tiny();
    let compiler = GrammarCompiler::new(model.tokenizer()).unwrap();
    let grammar = Grammar::Regex("(yes|no|maybe)-[0-9]{2,4}-[a-f]{1,3}".into());
    for &temperature in &[0.0f32, 1.0, 1.5] {
        for seed in 0..4u64 {
            let (text, finish) = run(&model, &compiler, &grammar, "code:", temperature, seed, 64);
            assert_eq!(finish, FinishReason::Stop, "{text:?}");
            assert!(
                is_answer_code(&text),
                "T={temperature} seed={seed}: {text:?}"
            );
        }
    }
}

const GREETING: &str = r#"
start: greeting " " name ("," " " name)~0..2 "!"
greeting: "hello" | "hi" | "hey"
name: /[A-Z][a-z]{1,8}/
"#;

/// The language of [`GREETING`].
fn is_greeting(s: &str) -> bool {
    let Some(body) = s.strip_suffix('!') else {
        return false;
    };
    let Some((greeting, names)) = body.split_once(' ') else {
        return false;
    };
    let names: Vec<&str> = names.split(", ").collect();
    ["hello", "hi", "hey"].contains(&greeting)
        && (1..=3).contains(&names.len())
        && names.iter().all(|n| {
            let b = n.as_bytes();
            (2..=9).contains(&b.len())
                && b[0].is_ascii_uppercase()
                && b[1..].iter().all(u8::is_ascii_lowercase)
        })
}

#[test]
fn lark_output_is_in_the_language() {
    let model = tiny();
    let compiler = GrammarCompiler::new(model.tokenizer()).unwrap();
    let grammar = Grammar::Lark(GREETING.into());
    for &temperature in &[0.0f32, 0.8, 1.5] {
        for seed in 0..4u64 {
            let (text, finish) = run(&model, &compiler, &grammar, "say:", temperature, seed, 80);
            assert_eq!(finish, FinishReason::Stop, "{text:?}");
            assert!(is_greeting(&text), "T={temperature} seed={seed}: {text:?}");
        }
    }
}

#[test]
fn bad_grammars_are_invalid_arguments() {
    let model = tiny();
    let compiler = GrammarCompiler::new(model.tokenizer()).unwrap();
    let bad = [
        Grammar::JsonSchema(json!({"type": "strnig"})),
        Grammar::JsonSchema(json!("not a schema")),
        Grammar::JsonSchema(json!({"$ref": "#/$defs/missing"})),
        Grammar::Regex("(unclosed".into()),
        Grammar::Lark("start: undefined_rule".into()),
        Grammar::Lark("start: (\"a\"".into()),
    ];
    for g in bad {
        match compiler.compile(&g) {
            Err(cyb_tensor::Error::InvalidArgument { op, reason }) => {
                assert_eq!(op, "grammar");
                assert!(!reason.is_empty());
            }
            Err(e) => panic!("{g:?}: wrong error {e}"),
            Ok(_) => panic!("{g:?} compiled"),
        }
    }
}

/// The real default model writes JSON that parses and validates; skipped without the file
/// (tools/fetch_smollm2.sh), failing under CI.
#[test]
fn smollm2_json_schema_output_parses() {
    let Some(path) = common::smollm2() else {
        return;
    };
    let model = Runtime::new(RuntimeOptions::default())
        .unwrap()
        .load(&path)
        .unwrap();
    let compiler = GrammarCompiler::new(model.tokenizer()).unwrap();
    let schema = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 40},
            "country": {"type": "string", "maxLength": 40},
            "population_millions": {"type": "number"},
            "landmarks": {"type": "array", "items": {"type": "string", "maxLength": 40},
                          "maxItems": 3}
        },
        "required": ["city", "country", "population_millions", "landmarks"],
        "additionalProperties": false
    });
    let msgs = [cyb_runtime::ChatMessage::new(
        "user",
        "Describe Paris as JSON with city, country, population_millions and landmarks.",
    )];
    let prompt = model.render_chat(&msgs, true).unwrap();
    let grammar = Grammar::JsonSchema(schema.clone());
    for (temperature, seed) in [(0.0f32, 0u64), (0.8, 1)] {
        let (text, finish) = run(&model, &compiler, &grammar, &prompt, temperature, seed, 160);
        assert_eq!(finish, FinishReason::Stop, "{text:?}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        validate(&v, &schema, "$").unwrap_or_else(|e| panic!("{e}: {text:?}"));
    }
}

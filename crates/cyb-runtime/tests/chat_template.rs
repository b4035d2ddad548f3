//! Chat templates of real models rendered by us equal what Hugging Face transformers renders
//! (tests/fixtures/chat_templates/cases.json, made by
//! tools/fixtures/make_chat_template_fixtures.py), byte for byte; a conversation the template
//! rejects with raise_exception gives an error carrying the template's message.

mod common;

use cyb_runtime::chat_template::{ChatMessage, ChatTemplate, RenderOptions};
use cyb_tensor::Error;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/chat_templates")
}

fn load_cases() -> Value {
    let text = std::fs::read_to_string(fixture_dir().join("cases.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// 2025-03-07T14:05:09, the instant the fixture script pinned `datetime.now()` to.
fn fixed_now(fixture: &Value) -> std::time::SystemTime {
    assert_eq!(fixture["fixed_now"], "2025-03-07T14:05:09");
    UNIX_EPOCH + Duration::from_secs(1_741_356_309)
}

fn template(fixture: &Value, name: &str) -> ChatTemplate {
    let t = &fixture["templates"][name];
    let source = std::fs::read_to_string(fixture_dir().join(t["file"].as_str().unwrap())).unwrap();
    ChatTemplate::new(&source, t["bos_token"].as_str(), t["eos_token"].as_str())
        .unwrap_or_else(|e| panic!("template {name} does not compile: {e}"))
}

/// The messages as transformers saw them: `None` values dropped.
fn messages(case: &Value) -> Vec<ChatMessage> {
    let raw = case["messages"].as_array().unwrap();
    raw.iter()
        .map(|m| {
            let msg: ChatMessage = serde_json::from_value(m.clone()).unwrap();
            // Every field of the fixture must survive the trip through ChatMessage.
            let mut want = m.as_object().unwrap().clone();
            want.retain(|_, v| !v.is_null());
            let got = serde_json::to_value(&msg).unwrap();
            assert_eq!(got, Value::Object(want), "message does not round-trip");
            msg
        })
        .collect()
}

fn options(case: &Value, now: std::time::SystemTime) -> RenderOptions {
    RenderOptions {
        add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
        tools: Some(case["tools"].clone()).filter(|t| !t.is_null()),
        extra: case["extra"].as_object().unwrap().clone(),
        now: Some(now),
    }
}

/// First differing position, with context, for a readable failure.
fn diff(want: &str, got: &str) -> String {
    let pos = want
        .char_indices()
        .zip(got.chars())
        .find(|((_, a), b)| a != b)
        .map(|((i, _), _)| i)
        .unwrap_or(want.len().min(got.len()));
    let ctx = |s: &str| {
        let near: String = s
            .char_indices()
            .filter(|(i, _)| i + 40 >= pos && *i < pos + 40)
            .map(|(_, c)| c)
            .collect();
        format!("{near:?}")
    };
    format!(
        "differ at byte {pos} (lengths {} vs {}):\n   want {}\n    got {}",
        want.len(),
        got.len(),
        ctx(want),
        ctx(got)
    )
}

#[test]
fn every_fixture_case_matches_transformers() {
    let fixture = load_cases();
    let now = fixed_now(&fixture);
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 100, "fixture has {} cases", cases.len());
    let mut failures = Vec::new();
    let (mut rendered, mut raised) = (0, 0);
    for case in cases {
        let name = case["template"].as_str().unwrap();
        let label = format!(
            "{name}/{} agp={} extra={}",
            case["conversation"].as_str().unwrap(),
            case["add_generation_prompt"],
            case["extra"]
        );
        let t = template(&fixture, name);
        let got = t.render(&messages(case), &options(case, now));
        match (case.get("expected"), case.get("error"), got) {
            (Some(want), _, Ok(got)) => {
                if want.as_str().unwrap() == got {
                    rendered += 1;
                } else {
                    failures.push(format!("{label}: {}", diff(want.as_str().unwrap(), &got)));
                }
            }
            (Some(_), _, Err(e)) => failures.push(format!("{label}: unexpected error {e}")),
            (None, Some(err), Ok(got)) => {
                failures.push(format!("{label}: expected error {err}, rendered {got:?}"))
            }
            (None, Some(err), Err(e)) => {
                if err["kind"] == "raise_exception" {
                    let msg = err["message"].as_str().unwrap();
                    match &e {
                        Error::Tokenizer { reason } if reason.ends_with(msg) => raised += 1,
                        _ => failures
                            .push(format!("{label}: want raise_exception({msg:?}), got {e}")),
                    }
                }
                // Other reference errors (a template reading a key the message lacks) only
                // need to fail here too.
            }
            (None, None, _) => panic!("{label}: case has neither expected nor error"),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert!(
        rendered >= 100 && raised >= 10,
        "rendered {rendered}, raised {raised}"
    );
}

#[test]
fn tool_use_template_is_picked_when_tools_are_given() {
    let t =
        ChatTemplate::with_named("plain", Some("tools:{{ tools | length }}"), None, None).unwrap();
    let mut opts = RenderOptions::default();
    assert_eq!(t.render(&[], &opts).unwrap(), "plain");
    opts.tools = Some(serde_json::json!([{"type": "function"}]));
    assert_eq!(t.render(&[], &opts).unwrap(), "tools:1");
}

#[test]
fn python_printing_and_tojson() {
    // Expected strings are what transformers' Jinja environment prints for the same template.
    let src = "{{ none }}|{{ true }}|{{ [1, 'a', none] }}|{{ x | tojson }}|{{ x | tojson(indent=2) }}|\
               {{ '  pad '.strip() }}|{{ 'a,b'.split(',') }}|{% for k, v in x.items() %}{{ k }}={{ v }};{% endfor %}|\
               {{ x.get('missing', 'dflt') }}|{% for i in [1,2,3] %}{% if i == 2 %}{% continue %}{% endif %}{{ i }}{% endfor %}";
    let t = ChatTemplate::new(src, None, None).unwrap();
    let mut opts = RenderOptions::default();
    opts.extra.insert(
        "x".into(),
        serde_json::json!({"z": "<b>&é\n", "a": [1.5, 1e-5, false], "m": {}}),
    );
    let got = t.render(&[], &opts).unwrap();
    let want = "None|True|[1, 'a', None]|{\"z\": \"<b>&é\\n\", \"a\": [1.5, 1e-05, false], \"m\": {}}|\
                {\n  \"z\": \"<b>&é\\n\",\n  \"a\": [\n    1.5,\n    1e-05,\n    false\n  ],\n  \"m\": {}\n}|\
                pad|['a', 'b']|z=<b>&é\n;a=[1.5, 1e-05, False];m={};|dflt|13";
    assert_eq!(got, want);
}

#[test]
fn broken_template_names_the_problem() {
    let e = ChatTemplate::new("{% for m in messages %}", None, None).unwrap_err();
    assert!(
        matches!(e, Error::InvalidConfig { ref field, .. } if field == "chat_template"),
        "{e}"
    );
}

#[test]
fn smollm2_gguf_template_renders_like_transformers() {
    let Some(path) = common::smollm2() else {
        return;
    };
    let model = cyb_format::open(&path).unwrap();
    let t = ChatTemplate::from_model_file(&model)
        .unwrap()
        .expect("SmolLM2 has a template");
    assert_eq!(t.bos_token(), Some("<|im_start|>"));
    assert_eq!(t.eos_token(), Some("<|im_end|>"));
    let fixture = load_cases();
    let now = fixed_now(&fixture);
    let mut checked = 0;
    for case in fixture["cases"].as_array().unwrap() {
        if case["template"] != "smollm2" {
            continue;
        }
        if let Some(want) = case["expected"].as_str() {
            assert_eq!(
                t.render(&messages(case), &options(case, now)).unwrap(),
                want
            );
            checked += 1;
        }
    }
    assert!(checked >= 10);
}

/// A minimal Hugging Face directory: config.json, a one-tensor safetensors file and the
/// given tokenizer_config.json.
fn hf_dir(name: &str, tokenizer_config: &Value) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cyb-chat-template-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"model_type": "llama"}"#).unwrap();
    let header = br#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
    let mut st = (header.len() as u64).to_le_bytes().to_vec();
    st.extend_from_slice(header);
    st.extend_from_slice(&1.0f32.to_le_bytes());
    std::fs::write(dir.join("model.safetensors"), st).unwrap();
    std::fs::write(
        dir.join("tokenizer_config.json"),
        tokenizer_config.to_string(),
    )
    .unwrap();
    dir
}

#[test]
fn hf_directory_templates() {
    let named = serde_json::json!({
        "bos_token": {"content": "<s>", "lstrip": false},
        "eos_token": "</s>",
        "chat_template": [
            {"name": "default", "template": "{{ bos_token }}D{{ eos_token }}"},
            {"name": "tool_use", "template": "{{ bos_token }}T"}
        ]
    });
    let dir = hf_dir("named", &named);
    let model = cyb_format::open(&dir).unwrap();
    let t = ChatTemplate::from_model_file(&model).unwrap().unwrap();
    let mut opts = RenderOptions::default();
    assert_eq!(t.render(&[], &opts).unwrap(), "<s>D</s>");
    opts.tools = Some(serde_json::json!([]));
    assert_eq!(t.render(&[], &opts).unwrap(), "<s>T");

    // chat_template.jinja beside tokenizer_config.json wins, as in transformers.
    std::fs::write(dir.join("chat_template.jinja"), "J{{ eos_token }}").unwrap();
    let model = cyb_format::open(&dir).unwrap();
    let t = ChatTemplate::from_model_file(&model).unwrap().unwrap();
    assert_eq!(t.render(&[], &RenderOptions::default()).unwrap(), "J</s>");
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = hf_dir("none", &serde_json::json!({"eos_token": "</s>"}));
    let model = cyb_format::open(&dir).unwrap();
    assert!(ChatTemplate::from_model_file(&model).unwrap().is_none());
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = hf_dir("bad", &serde_json::json!({"chat_template": "{% if %}"}));
    let model = cyb_format::open(&dir).unwrap();
    let e = ChatTemplate::from_model_file(&model).unwrap_err();
    assert!(e.to_string().contains("tokenizer_config.json"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn block_whitespace_like_transformers() {
    // Expected: transformers' _compile_jinja_template(...).render() of the same source.
    let src = "  {% if true %}\nx\n  {% endif %}\ny {{ 1.0 }} {{ 2 }} {{ [true, {\"k\": none}] | string }} {{ \"a\" ~ 1 }}";
    let t = ChatTemplate::new(src, None, None).unwrap();
    let got = t.render(&[], &RenderOptions::default()).unwrap();
    assert_eq!(got, "x\ny 1.0 2 [True, {'k': None}] a1");
}

/// The largest conversation the server accepts (a 2 MiB request body: messages, or a tools
/// list) renders within the render budget through every fixture template, so the budget that
/// stops hostile templates never refuses a real request.
#[test]
fn largest_requests_fit_the_render_budget() {
    let fixture = load_cases();
    let now = fixed_now(&fixture);
    let cases = fixture["cases"].as_array().unwrap();
    let names: Vec<&String> = fixture["templates"].as_object().unwrap().keys().collect();
    for name in names {
        let t = template(&fixture, name);
        // Tools as the fixture passes them to this template, where a case renders with tools.
        let tools = cases
            .iter()
            .find(|c| {
                c["template"] == name.as_str()
                    && !c["tools"].is_null()
                    && c.get("expected").is_some()
            })
            .map(|c| c["tools"].clone());
        let filler = "All work and no play makes Jack a dull boy. ".repeat(11);
        let mut msgs = Vec::new();
        while msgs.len() * filler.len() < 2 << 20 {
            msgs.push(ChatMessage::user(format!("{} {filler}", msgs.len())));
            msgs.push(ChatMessage::assistant(format!("{} {filler}", msgs.len())));
        }
        msgs.pop();
        let opts = RenderOptions {
            add_generation_prompt: true,
            tools: tools.clone(),
            now: Some(now),
            ..RenderOptions::default()
        };
        let start = std::time::Instant::now();
        let out = t
            .render(&msgs, &opts)
            .unwrap_or_else(|e| panic!("{name}: {} messages: {e}", msgs.len()));
        assert!(out.len() > 2 << 20, "{name}: {}", out.len());
        eprintln!(
            "{name}: {} messages, {} bytes, {:?}",
            msgs.len(),
            out.len(),
            start.elapsed()
        );
        if let Some(tools) = tools {
            let one = tools.as_array().unwrap()[0].clone();
            let size = serde_json::to_string(&one).unwrap().len();
            let many: Vec<Value> = (0..(2 << 20) / size).map(|_| one.clone()).collect();
            let hi = [ChatMessage::user("hi")];
            let without = t
                .render(
                    &hi,
                    &RenderOptions {
                        tools: None,
                        ..opts.clone()
                    },
                )
                .unwrap();
            let opts = RenderOptions {
                tools: Some(Value::Array(many)),
                ..opts
            };
            let out = t
                .render(&hi, &opts)
                .unwrap_or_else(|e| panic!("{name}: 2 MiB of tools: {e}"));
            // Templates that print tools print all of them.
            let printed = out.len() != without.len();
            assert!(!printed || out.len() > 1 << 20, "{name}: {}", out.len());
        }
    }
}

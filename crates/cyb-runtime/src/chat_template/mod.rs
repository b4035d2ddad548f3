//! Chat templates: a model's Jinja template turns a conversation into the prompt text the model
//! was trained on. The reference is Hugging Face transformers' `apply_chat_template(...,
//! tokenize=False)`; this renders the same text byte for byte with minijinja configured like
//! transformers' Jinja2 environment (trim_blocks, lstrip_blocks, loop controls, Python string
//! and dict methods, Python's `str()` when printing, its `tojson`, `raise_exception` and
//! `strftime_now`).

mod python;
mod source;

use cyb_tensor::{Error, Result};
use minijinja::value::Value;
use minijinja::{Environment, ErrorKind};
use serde::{Deserialize, Serialize};
use serde_json::Map;
use std::time::{SystemTime, UNIX_EPOCH};

pub use python::strftime;

/// One message of a conversation, in the OpenAI / transformers shape. Absent optional fields
/// are absent to the template too (transformers drops `None` values before rendering).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The model's reasoning before its answer (Qwen3, DeepSeek-R1 style templates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A message that carries images: its content as parts, in order. The template then sees
    /// `content` as the list `[{"type": "image"}, {"type": "text", "text": …}, …]`, as
    /// transformers passes a multimodal message (the images themselves go to
    /// [`Generator::generate_with_images`](crate::Generator::generate_with_images)).
    #[serde(skip)]
    pub parts: Option<Vec<ContentPart>>,
}

/// One part of a multimodal message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContentPart {
    Text(String),
    Image,
}

impl ChatMessage {
    /// A message of images (one placeholder part each, first) and then text.
    pub fn with_images(role: impl Into<String>, images: usize, text: impl Into<String>) -> Self {
        let text = text.into();
        let mut parts = vec![ContentPart::Image; images];
        parts.push(ContentPart::Text(text.clone()));
        ChatMessage {
            role: role.into(),
            content: Some(text),
            parts: Some(parts),
            ..ChatMessage::default()
        }
    }

    /// Image parts in this message.
    pub fn image_count(&self) -> usize {
        self.parts.as_ref().map_or(0, |p| {
            p.iter().filter(|x| **x == ContentPart::Image).count()
        })
    }

    /// A message with text content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: Some(content.into()),
            ..ChatMessage::default()
        }
    }

    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("system", content)
    }

    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("user", content)
    }

    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("assistant", content)
    }

    /// What the template sees: the message's fields in declaration order, plus `thinking`
    /// first when there is reasoning, as transformers aliases it for templates that read it.
    fn to_template_value(&self) -> serde_json::Value {
        let mut map = Map::new();
        if let Some(r) = &self.reasoning_content {
            map.insert("thinking".into(), r.clone().into());
        }
        if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(self) {
            map.extend(fields);
        }
        if let Some(parts) = &self.parts {
            let list: Vec<serde_json::Value> = parts
                .iter()
                .map(|p| match p {
                    ContentPart::Text(t) => serde_json::json!({"type": "text", "text": t}),
                    ContentPart::Image => serde_json::json!({"type": "image"}),
                })
                .collect();
            map.insert("content".into(), list.into());
        }
        serde_json::Value::Object(map)
    }
}

/// An assistant's call of a tool: `{id, type: "function", function: {name, arguments}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_string()
}

/// `arguments` is passed to the template as given: an object (what most templates expect and
/// transformers recommends) or the JSON string of the OpenAI API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: serde_json::Value,
}

/// What a render needs besides the messages.
#[derive(Clone, Debug, Default)]
pub struct RenderOptions {
    /// End with the header of an assistant turn, so the model writes the answer.
    pub add_generation_prompt: bool,
    /// Tool definitions (a JSON list of `{type: "function", function: {...}}`).
    pub tools: Option<serde_json::Value>,
    /// More template variables, e.g. `enable_thinking` (Qwen3) or `date_string` (Llama 3).
    pub extra: Map<String, serde_json::Value>,
    /// The instant `strftime_now` reads; `None` is now. Set it for reproducible prompts.
    pub now: Option<SystemTime>,
}

/// A compiled chat template, with the special-token strings it may print.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    has_tool_use: bool,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

const DEFAULT: &str = "default";
const TOOL_USE: &str = "tool_use";

impl ChatTemplate {
    /// Compiles one template. `bos_token`/`eos_token` are the strings the template sees as
    /// `bos_token`/`eos_token` (left undefined when `None`, as transformers does).
    pub fn new(
        source: &str,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<ChatTemplate> {
        ChatTemplate::with_named(source, None, bos_token, eos_token)
    }

    /// A default template plus an optional `tool_use` one, picked when tools are given (the
    /// named-templates form of tokenizer_config.json).
    pub fn with_named(
        default: &str,
        tool_use: Option<&str>,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<ChatTemplate> {
        let mut env = jinja_environment()?;
        env.add_template_owned(DEFAULT, translate_extension_tags(default))
            .map_err(compile_error)?;
        if let Some(t) = tool_use {
            env.add_template_owned(TOOL_USE, translate_extension_tags(t))
                .map_err(compile_error)?;
        }
        Ok(ChatTemplate {
            env,
            has_tool_use: tool_use.is_some(),
            bos_token: bos_token.map(str::to_string),
            eos_token: eos_token.map(str::to_string),
        })
    }

    /// The model's own template: GGUF `tokenizer.chat_template`, or a Hugging Face directory's
    /// `chat_template.jinja` / `tokenizer_config.json` `chat_template`. `Ok(None)` when the
    /// model has none (the caller then feeds the prompt raw).
    pub fn from_model_file(model: &cyb_format::ModelFile) -> Result<Option<ChatTemplate>> {
        source::from_model_file(model)
    }

    pub fn bos_token(&self) -> Option<&str> {
        self.bos_token.as_deref()
    }

    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }

    /// Renders the conversation into prompt text. A template that rejects the conversation
    /// through `raise_exception(msg)` gives [`Error::Tokenizer`] carrying `msg`.
    pub fn render(&self, messages: &[ChatMessage], opts: &RenderOptions) -> Result<String> {
        let name = if opts.tools.is_some() && self.has_tool_use {
            TOOL_USE
        } else {
            DEFAULT
        };
        let template = self.env.get_template(name).map_err(render_error)?;

        let mut ctx = Map::new();
        if let Some(b) = &self.bos_token {
            ctx.insert("bos_token".into(), b.clone().into());
        }
        if let Some(e) = &self.eos_token {
            ctx.insert("eos_token".into(), e.clone().into());
        }
        ctx.extend(opts.extra.clone());
        let messages: Vec<serde_json::Value> = messages
            .iter()
            .map(ChatMessage::to_template_value)
            .collect();
        ctx.insert("messages".into(), messages.into());
        ctx.insert(
            "tools".into(),
            opts.tools.clone().unwrap_or(serde_json::Value::Null),
        );
        ctx.insert("documents".into(), serde_json::Value::Null);
        ctx.insert(
            "add_generation_prompt".into(),
            opts.add_generation_prompt.into(),
        );

        let now = opts.now.unwrap_or_else(SystemTime::now);
        let unix_secs = match now.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
        };
        let mut ctx = Value::from(minijinja::value::Serde(&ctx));
        // The clock is per render, so strftime_now joins the context rather than the globals.
        ctx = minijinja::context! {
            strftime_now => Value::from_function(move |fmt: &str| python::strftime(fmt, unix_secs)),
            ..ctx
        };
        let mut out = Bounded::default();
        if let Err(e) = template.render_captured_to(ctx, &mut out) {
            if out.overflowed {
                return Err(Error::Tokenizer {
                    reason: format!(
                        "chat template output exceeds {MAX_RENDERED_BYTES} bytes; refused"
                    ),
                });
            }
            return Err(render_error(e));
        }
        String::from_utf8(out.text).map_err(|_| Error::Tokenizer {
            reason: "chat template rendered invalid UTF-8".into(),
        })
    }
}

/// The work one render may do (minijinja's fuel): one unit per instruction executed, and one
/// per 64 bytes of strings and list slots built (by `~`, `+`, filters, output), so a render
/// executes at most this many instructions and builds at most 64 times this many bytes of
/// values, whatever the template. The largest request the server takes (2 MiB of messages or
/// of tools) renders with a few hundred thousand; a template that loops for long or grows a
/// string by doubling is stopped within a fraction of a second and about
/// [`RENDER_DATA_BYTES`] of memory.
pub const RENDER_FUEL: u64 = 8_000_000;

/// The bytes of values [`RENDER_FUEL`] pays for.
pub const RENDER_DATA_BYTES: u64 = RENDER_FUEL * 64;

/// The most text one render may produce (bytes).
pub const MAX_RENDERED_BYTES: usize = 16 << 20;

/// A render's output, refusing to grow past [`MAX_RENDERED_BYTES`].
#[derive(Default)]
struct Bounded {
    text: Vec<u8>,
    overflowed: bool,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.text.len().saturating_add(buf.len()) > MAX_RENDERED_BYTES {
            self.overflowed = true;
            return Err(std::io::Error::other("chat template output too long"));
        }
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The environment transformers' `_compile_jinja_template` builds, in minijinja.
fn jinja_environment() -> Result<Environment<'static>> {
    let mut env = Environment::new();
    env.set_fuel(Some(RENDER_FUEL));
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(compile_error)?;
    env.set_syntax(syntax);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(|out, _state, value| {
        out.write_str(&python::py_str(value))
            .map_err(|_| minijinja::Error::new(ErrorKind::WriteFailure, "write failed"))
    });
    env.add_filter("tojson", python::tojson);
    env.add_filter("string", |v: Value| python::py_str(&v));
    env.add_function(
        "raise_exception",
        |msg: String| -> std::result::Result<Value, minijinja::Error> {
            Err(
                minijinja::Error::new(ErrorKind::InvalidOperation, msg.clone())
                    .with_source(Raised(msg)),
            )
        },
    );
    Ok(env)
}

/// Marks an error as the template's own `raise_exception(msg)`.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

fn compile_error(e: minijinja::Error) -> Error {
    Error::InvalidConfig {
        field: "chat_template".into(),
        reason: format!("the template does not compile: {e:#}"),
    }
}

fn render_error(e: minijinja::Error) -> Error {
    if e.kind() == ErrorKind::OutOfFuel {
        return Error::Tokenizer {
            reason: format!(
                "chat template exceeded its work budget ({RENDER_FUEL} instructions, or {} MiB \
                 of values built): a loop that runs too long, or a value that grows too large",
                RENDER_DATA_BYTES >> 20
            ),
        };
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        if let Some(Raised(msg)) = err.downcast_ref::<Raised>() {
            return Error::Tokenizer {
                reason: format!("chat template rejected the conversation: {msg}"),
            };
        }
        source = err.source();
    }
    Error::Tokenizer {
        reason: format!("chat template failed to render: {e:#}"),
    }
}

/// transformers' Jinja has one extension tag, `{% generation %}...{% endgeneration %}`, which
/// only marks assistant text for training masks and renders its body unchanged. minijinja has
/// no extension tags, so it becomes an always-true `if` with the same whitespace control.
fn translate_extension_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        // The closing `%}` after the opening `{%` (`{%}` is not a closed tag).
        let Some(end) = tag[2..].find("%}").map(|i| i + 2) else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (lead, body) = split_control(inner, true);
        let (body, trail) = split_control(body, false);
        match body.trim() {
            "generation" => out.push_str(&format!("{{%{lead} if true {trail}%}}")),
            "endgeneration" => out.push_str(&format!("{{%{lead} endif {trail}%}}")),
            _ => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Splits a leading (or trailing) `-`/`+` whitespace-control marker off a tag's inside.
fn split_control(s: &str, leading: bool) -> (&str, &str) {
    let marker = |c: char| c == '-' || c == '+';
    if leading {
        match s.chars().next() {
            Some(c) if marker(c) => (&s[..1], &s[1..]),
            _ => ("", s),
        }
    } else {
        match s.chars().last() {
            Some(c) if marker(c) => (&s[..s.len() - 1], &s[s.len() - 1..]),
            _ => (s, ""),
        }
    }
}

/// Context shift for a conversation that outgrows the context: drops the oldest turns of
/// `messages` until `fits` accepts what is left. A turn is a message after the leading
/// system/developer messages and everything up to the next user message, so the roles keep
/// alternating; the leading system messages and the last turn are never dropped. Returns how
/// many messages were dropped (`fits` may still refuse what is left).
pub fn drop_oldest_turns(
    messages: &mut Vec<ChatMessage>,
    mut fits: impl FnMut(&[ChatMessage]) -> Result<bool>,
) -> Result<usize> {
    let mut dropped = 0;
    while !fits(messages)? {
        let Some(first) = messages
            .iter()
            .position(|m| m.role != "system" && m.role != "developer")
        else {
            break;
        };
        let Some(next) = messages[first + 1..].iter().position(|m| m.role == "user") else {
            break;
        };
        let end = first + 1 + next;
        messages.drain(first..end);
        dropped += end - first;
    }
    Ok(dropped)
}

/// [`drop_oldest_turns`] until the prompt `encode` makes of the messages leaves room for the
/// answer in a context of `ctx` tokens: `max_tokens`, at most half the context (a quarter of
/// it when not given). Returns the last prompt encoded and how many messages were dropped (the
/// prompt may still not fit when one turn is longer than that).
pub fn fit_chat(
    messages: &mut Vec<ChatMessage>,
    ctx: usize,
    max_tokens: Option<usize>,
    mut encode: impl FnMut(&[ChatMessage]) -> Result<Vec<u32>>,
) -> Result<(Vec<u32>, usize)> {
    let room = max_tokens.unwrap_or(ctx / 4).min(ctx / 2);
    let mut prompt = Vec::new();
    let dropped = drop_oldest_turns(messages, |m| {
        prompt = encode(m)?;
        Ok(prompt.len() + room <= ctx)
    })?;
    Ok((prompt, dropped))
}

#[cfg(test)]
mod shift_tests {
    use super::*;

    fn conversation() -> Vec<ChatMessage> {
        let mut m = vec![ChatMessage::system("sys".to_string())];
        for i in 0..3 {
            m.push(ChatMessage::user(format!("q{i}")));
            m.push(ChatMessage::assistant(format!("a{i}")));
        }
        m.push(ChatMessage::user("last".to_string()));
        m
    }

    fn texts(m: &[ChatMessage]) -> Vec<String> {
        m.iter()
            .map(|m| m.content.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn oldest_turns_go_first_and_the_system_and_last_turn_stay() {
        let mut m = conversation();
        let n = drop_oldest_turns(&mut m, |m| Ok(m.len() <= 6)).unwrap();
        assert_eq!(n, 2);
        assert_eq!(texts(&m), ["sys", "q1", "a1", "q2", "a2", "last"]);
        // Nothing fits: everything but the system message and the last turn goes.
        let mut m = conversation();
        let n = drop_oldest_turns(&mut m, |_| Ok(false)).unwrap();
        assert_eq!(n, 6);
        assert_eq!(texts(&m), ["sys", "last"]);
        // Already fits: nothing is dropped.
        let mut m = conversation();
        assert_eq!(drop_oldest_turns(&mut m, |_| Ok(true)).unwrap(), 0);
        assert_eq!(m.len(), 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_render_their_body() {
        assert_eq!(
            translate_extension_tags("a{%- generation -%} b {%+ endgeneration %}c{% if x %}"),
            "a{%- if true -%} b {%+ endif %}c{% if x %}"
        );
        // An opening `{%` whose `%` also starts a `%}` (found by fuzzing): no tag, no panic.
        assert_eq!(translate_extension_tags("a{%}b"), "a{%}b");
        assert_eq!(
            translate_extension_tags("{%}{% generation %}"),
            "{%}{% generation %}"
        );
        assert!(ChatTemplate::new("hello {%} x", None, None).is_err());
        let t = ChatTemplate::new(
            "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}",
            None,
            None,
        )
        .unwrap();
        let out = t
            .render(&[ChatMessage::user("hi")], &RenderOptions::default())
            .unwrap();
        assert_eq!(out, "[hi]");
    }

    fn render_err(source: &str) -> String {
        let t = ChatTemplate::new(source, None, None).unwrap();
        let start = std::time::Instant::now();
        let e = t
            .render(&[ChatMessage::user("hi")], &RenderOptions::default())
            .unwrap_err();
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "{source}: {:?}",
            start.elapsed()
        );
        e.to_string()
    }

    #[test]
    fn hostile_templates_are_stopped() {
        let e = render_err(
            "{% for a in range(10000) %}{% for b in range(10000) %}{% for c in range(10000) %}\
             {% endfor %}{% endfor %}{% endfor %}",
        );
        assert!(e.contains("budget"), "{e}");
        let e = render_err("{{ 'a' * 100000000 }}");
        assert!(e.contains("exceeds"), "{e}");
        let e = render_err("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}");
        assert!(e.contains("exceeds"), "{e}");
        // minijinja itself refuses repetitions past 100 MB.
        let e = render_err("{{ 'ab' * 100000000 }}");
        assert!(e.contains("too large"), "{e}");
        // A string doubled 40 times (a terabyte) is stopped by the budget's byte count.
        let e = render_err(
            "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}\
             {% endfor %}{{ ns.s | length }}",
        );
        assert!(e.contains("budget"), "{e}");
    }

    #[test]
    fn long_conversations_fit_the_budget() {
        let t = ChatTemplate::new(
            "{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}{% if not loop.last %}\n\
             {% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}",
            None,
            None,
        )
        .unwrap();
        let messages: Vec<ChatMessage> = (0..20_000)
            .map(|i| ChatMessage::user(format!("message {i}")))
            .collect();
        let out = t.render(&messages, &RenderOptions::default()).unwrap();
        assert!(out.ends_with("message 19999"), "{}", &out[out.len() - 40..]);
    }
}

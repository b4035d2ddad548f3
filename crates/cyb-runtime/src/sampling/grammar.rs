//! Grammar-constrained decoding on llguidance: a JSON schema, "any JSON object", a regular
//! expression or a Lark grammar becomes a [`TokenConstraint`] that masks, before every draw,
//! the tokens that cannot continue a valid output, and ends generation once the output is
//! complete.
//!
//! llguidance works on the bytes of each token. [`GrammarCompiler::new`] rebuilds them from
//! the vocabulary's spelling: byte-level BPE spells bytes with GPT-2's printable alphabet
//! (`Ġ` is a space), SentencePiece spells a space `▁` and falls back to `<0xXX>` byte tokens;
//! special tokens (`<|im_end|>`) are marked special so a grammar never emits them as text.
//! A compiler is built once per tokenizer (it indexes the whole vocabulary); each
//! generation compiles its grammar into a fresh [`GrammarConstraint`].

use super::TokenConstraint;
use crate::Tokenizer;
use cyb_tensor::{Error, Result};
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, SimpleVob, TokEnv, TokRxInfo, TokTrie};
use llguidance::{JsonCompileOptions, Matcher, ParserFactory};
use serde_json::Value;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// What the output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum Grammar {
    /// A JSON value valid against this JSON schema (draft 2020-12 subset llguidance knows;
    /// only local `#/...` references).
    JsonSchema(Value),
    /// Any JSON object (OpenAI's `response_format: {"type": "json_object"}`).
    JsonObject,
    /// The whole output matches this regular expression (Rust `regex` syntax).
    Regex(String),
    /// A Lark grammar in llguidance's dialect (`start: ...`).
    Lark(String),
}

fn grammar_err(reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        op: "grammar".into(),
        reason: reason.into(),
    }
}

/// llguidance's stop message without the parser state it appends (`<state>…</state>`, token
/// and lexer counters), and its stop reasons in words.
fn matcher_error(msg: &str) -> String {
    let first = msg
        .split("<state>")
        .next()
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or_default()
        .trim();
    match first {
        "NoExtensionBias" | "NoExtension" => "the grammar admits no output at all (for a JSON \
                                              schema: a $ref cycle or constraints that nothing \
                                              satisfies)"
            .into(),
        "" => "the grammar stopped the output".into(),
        other => format!("the grammar stopped the output: {other}"),
    }
}

/// JSON is written with single spaces after `,` and `:` and no other whitespace: the way
/// models are trained to write it, and bounded, so a weak model cannot wander off into
/// endless newlines inside an object. A schema's own `x-guidance` options win.
fn json_options() -> JsonCompileOptions {
    JsonCompileOptions {
        item_separator: ", ".into(),
        key_separator: ": ".into(),
        whitespace_flexible: false,
        ..JsonCompileOptions::default()
    }
}

/// `schema` with this crate's JSON layout (see [`json_options`]) unless it sets its own
/// `x-guidance` options; for JSON schemas nested in Lark grammars (`%json {...}`).
pub fn with_json_layout(mut schema: Value) -> Result<Value> {
    let Some(obj) = schema.as_object_mut() else {
        return Err(grammar_err(format!(
            "a JSON schema must be an object, got {schema}"
        )));
    };
    if !obj.contains_key("x-guidance") {
        let opts = serde_json::to_value(json_options())
            .map_err(|e| grammar_err(format!("JSON options: {e}")))?;
        obj.insert("x-guidance".into(), opts);
    }
    Ok(schema)
}

impl Grammar {
    fn to_llguidance(&self) -> Result<TopLevelGrammar> {
        match self {
            Grammar::JsonSchema(s) => Ok(TopLevelGrammar::from_json_schema(with_json_layout(
                s.clone(),
            )?)),
            Grammar::JsonObject => Ok(TopLevelGrammar::from_json_schema(with_json_layout(
                serde_json::json!({"type": "object"}),
            )?)),
            Grammar::Regex(r) => Ok(TopLevelGrammar::from_regex(r)),
            Grammar::Lark(g) => Ok(TopLevelGrammar::from_lark(g.clone())),
        }
    }
}

/// The vocabulary indexed for llguidance; compiles grammars into constraints.
pub struct GrammarCompiler {
    factory: Arc<ParserFactory>,
    eos_ids: Vec<u32>,
    /// The id llguidance reports as "end": the first EOS, or a pseudo-token past the
    /// vocabulary when the model has none.
    trie_eos: u32,
}

impl std::fmt::Debug for GrammarCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarCompiler")
            .field("eos_ids", &self.eos_ids)
            .finish()
    }
}

impl GrammarCompiler {
    /// Indexes `tokenizer`'s vocabulary (tens of milliseconds for 50k tokens).
    pub fn new(tokenizer: &Tokenizer) -> Result<GrammarCompiler> {
        let mut words = token_bytes(tokenizer);
        let eos_ids = tokenizer.eos_ids().to_vec();
        let trie_eos = match eos_ids.first() {
            Some(&e) => e,
            None => {
                words.push(b"\xff<|cyb_end|>".to_vec());
                (words.len() - 1) as u32
            }
        };
        let info = TokRxInfo {
            vocab_size: words.len() as u32,
            tok_eos: trie_eos,
            tok_bos: tokenizer.bos_id(),
            tok_pad: None,
            tok_unk: None,
            tok_end_of_turn: None,
        };
        let built = catch_unwind(AssertUnwindSafe(|| {
            let trie = TokTrie::from(&info, &words);
            let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
            ParserFactory::new_simple(&env).map(|mut f| {
                f.quiet();
                f
            })
        }));
        let factory = match built {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => return Err(grammar_err(format!("indexing the vocabulary: {e}"))),
            Err(_) => return Err(grammar_err("indexing the vocabulary panicked")),
        };
        Ok(GrammarCompiler {
            factory: Arc::new(factory),
            eos_ids,
            trie_eos,
        })
    }

    /// A fresh constraint for one generation; a grammar that does not compile (bad schema,
    /// bad regex, Lark syntax error) is an `InvalidArgument` naming the problem.
    pub fn compile(&self, grammar: &Grammar) -> Result<GrammarConstraint> {
        let top = grammar.to_llguidance()?;
        let parser = catch_unwind(AssertUnwindSafe(|| self.factory.create_parser(top)))
            .map_err(|_| grammar_err("compiling the grammar panicked"))?
            .map_err(|e| grammar_err(format!("invalid grammar: {e}")))?;
        let mut constraint = GrammarConstraint {
            matcher: Matcher::new(Ok(parser)),
            eos_ids: self.eos_ids.clone(),
            trie_eos: self.trie_eos,
            next: None,
            finished: false,
        };
        constraint.prepare()?;
        Ok(constraint)
    }
}

/// One generation's grammar state.
pub struct GrammarConstraint {
    matcher: Matcher,
    eos_ids: Vec<u32>,
    trie_eos: u32,
    /// The allowed set for the next token, computed right after the last one was accepted
    /// (to know whether the output is complete).
    next: Option<SimpleVob>,
    finished: bool,
}

impl GrammarConstraint {
    /// Computes the next allowed set; the output is complete when only "end" remains.
    fn prepare(&mut self) -> Result<()> {
        if self.matcher.is_stopped() {
            if let Some(e) = self.matcher.get_error() {
                return Err(grammar_err(matcher_error(&e)));
            }
            self.finished = true;
            self.next = None;
            return Ok(());
        }
        let mask = guarded(|| self.matcher.compute_mask())?;
        let only_end = mask.num_set() == usize::from(mask.is_allowed(self.trie_eos));
        if only_end {
            self.finished = true;
        }
        self.next = Some(mask);
        Ok(())
    }

    /// True once the text so far is a complete match (generation may end here).
    pub fn is_accepting(&mut self) -> bool {
        self.finished || self.matcher.is_accepting().unwrap_or(false)
    }
}

fn guarded<T, E: std::fmt::Display>(f: impl FnOnce() -> std::result::Result<T, E>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(grammar_err(matcher_error(&e.to_string()))),
        Err(_) => Err(grammar_err("the grammar engine panicked")),
    }
}

impl TokenConstraint for GrammarConstraint {
    fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        if self.next.is_none() && !self.finished {
            self.prepare()?;
        }
        let end_ok = self.finished
            || self
                .next
                .as_ref()
                .is_some_and(|m| m.is_allowed(self.trie_eos));
        for (i, l) in logits.iter_mut().enumerate() {
            let id = i as u32;
            let allowed = if self.eos_ids.contains(&id) {
                end_ok
            } else {
                !self.finished && self.next.as_ref().is_some_and(|m| m.is_allowed(id))
            };
            if !allowed {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    fn accept(&mut self, token: u32) -> Result<()> {
        self.next = None;
        if self.eos_ids.contains(&token) || self.finished {
            self.finished = true;
            return Ok(());
        }
        let matcher = &mut self.matcher;
        guarded(|| matcher.consume_token(token))?;
        self.prepare()
    }

    fn is_finished(&self) -> bool {
        self.finished
    }
}

/// GPT-2's byte-level alphabet, character → byte.
fn byte_level_alphabet() -> std::collections::HashMap<char, u8> {
    cyb_format::byte_level_chars()
        .into_iter()
        .zip(0..=255u8)
        .collect()
}

/// `<0xAB>` → 0xAB.
fn byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2)
        .then(|| u8::from_str_radix(hex, 16).ok())
        .flatten()
}

/// The bytes each token stands for; special tokens get llguidance's special marker in front.
fn token_bytes(tokenizer: &Tokenizer) -> Vec<Vec<u8>> {
    let n = tokenizer.vocab_size();
    let texts: Vec<Option<String>> = (0..n as u32).map(|id| tokenizer.token_text(id)).collect();
    let byte_tokens = texts
        .iter()
        .flatten()
        .filter(|t| byte_token(t).is_some())
        .count();
    let sentencepiece = byte_tokens >= 128
        || texts
            .iter()
            .flatten()
            .filter(|t| t.contains('▁'))
            .take(8)
            .count()
            >= 8;
    let alphabet = byte_level_alphabet();
    texts
        .iter()
        .enumerate()
        .map(|(id, text)| {
            let Some(text) = text else { return Vec::new() };
            if is_special(tokenizer, id as u32) {
                let mut b = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                b.extend_from_slice(text.as_bytes());
                return b;
            }
            if sentencepiece {
                return match byte_token(text) {
                    Some(b) => vec![b],
                    None => text.replace('▁', " ").into_bytes(),
                };
            }
            // Byte-level; a token outside the alphabet is an added token written as text.
            text.chars()
                .map(|c| alphabet.get(&c).copied())
                .collect::<Option<Vec<u8>>>()
                .unwrap_or_else(|| text.as_bytes().to_vec())
        })
        .collect()
}

/// A special token is one that decoding drops when asked to skip special tokens.
fn is_special(tokenizer: &Tokenizer, id: u32) -> bool {
    let skipped = tokenizer.decode(&[id], true).unwrap_or_default();
    skipped.is_empty()
        && !tokenizer
            .decode(&[id], false)
            .unwrap_or_default()
            .is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_alphabet_is_a_bijection() {
        let m = byte_level_alphabet();
        assert_eq!(m.len(), 256);
        assert_eq!(m.get(&'Ġ'), Some(&b' '));
        assert_eq!(m.get(&'Ċ'), Some(&b'\n'));
        assert_eq!(m.get(&'a'), Some(&b'a'));
        let mut bytes: Vec<u8> = m.values().copied().collect();
        bytes.sort_unstable();
        bytes.dedup();
        assert_eq!(bytes.len(), 256);
    }

    #[test]
    fn byte_tokens_parse_only_two_hex_digits() {
        assert_eq!(byte_token("<0x0A>"), Some(10));
        assert_eq!(byte_token("<0xFF>"), Some(255));
        assert_eq!(byte_token("<0x0>"), None);
        assert_eq!(byte_token("<0xZZ>"), None);
        assert_eq!(byte_token("0x0A"), None);
    }
}

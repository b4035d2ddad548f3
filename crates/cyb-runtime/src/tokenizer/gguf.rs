//! A tokenizer from GGUF metadata (llama.cpp's `tokenizer.ggml.*` keys).
//!
//! The metadata is turned into the `tokenizer.json` Hugging Face would use for the same
//! vocabulary, then loaded by the `tokenizers` crate:
//! - `gpt2`: byte-level BPE from `tokens` + `merges`, split by the `pre` type's regex;
//! - `llama`: SentencePiece BPE. The file has scores, not merges; a merge exists for every token
//!   that is the concatenation of two tokens, ranked by the merged token's score (what
//!   SentencePiece's BPE does, and how transformers rebuilds merges), with `<0xXX>` byte fallback
//!   and `▁` for spaces.
//!
//! Control (type 3) tokens become special tokens and user-defined (type 4) ones added tokens, so
//! both match whole in the text.

use super::{pre, tok_err, Tokenizer};
use cyb_format::{GgufFile, MetaArray, MetaValue};
use cyb_tensor::Result;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

const TOKENS: &str = "tokenizer.ggml.tokens";
const MERGES: &str = "tokenizer.ggml.merges";
const SCORES: &str = "tokenizer.ggml.scores";
const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;
const UNKNOWN: i64 = 2;

/// Control tokens that end a turn in common chat formats; llama.cpp stops on them too, since
/// many files name only one of them as eos.
const END_OF_GENERATION: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "<|eom_id|>",
];

struct Meta<'a> {
    g: &'a GgufFile,
}

impl Meta<'_> {
    fn err(&self, key: &str, what: impl std::fmt::Display) -> cyb_tensor::Error {
        tok_err(format!("{}: {key}: {what}", self.g.path().display()))
    }

    fn array(&self, key: &str) -> Result<Option<&MetaArray>> {
        match self.g.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_array()
                .map(Some)
                .ok_or_else(|| self.err(key, format!("is a {}, expected an array", v.type_name()))),
        }
    }

    fn strings(&self, key: &str) -> Result<Option<Vec<&str>>> {
        let Some(a) = self.array(key)? else {
            return Ok(None);
        };
        let items = a.as_strs().ok_or_else(|| {
            self.err(
                key,
                format!("holds {} items, expected strings", a.item_type_name()),
            )
        })?;
        Ok(Some(items.iter().map(String::as_str).collect()))
    }

    fn numbers(&self, key: &str, n: usize) -> Result<Option<Vec<f64>>> {
        let Some(a) = self.array(key)? else {
            return Ok(None);
        };
        if a.len() != n {
            return Err(self.err(key, format!("has {} items for {n} tokens", a.len())));
        }
        a.to_f64s().map(Some).ok_or_else(|| {
            self.err(
                key,
                format!("holds {} items, expected numbers", a.item_type_name()),
            )
        })
    }

    fn id(&self, key: &str, n_vocab: usize) -> Result<Option<u32>> {
        let Some(v) = self.g.get(key) else {
            return Ok(None);
        };
        match v.as_u64() {
            Some(id) if (id as usize) < n_vocab => Ok(u32::try_from(id).ok()),
            // llama.cpp writes -1 (as u32::MAX or i32 -1) for "no such token".
            _ if matches!(v, MetaValue::I32(-1) | MetaValue::I64(-1))
                || v.as_u64() == Some(u64::from(u32::MAX)) =>
            {
                Ok(None)
            }
            _ => Err(self.err(
                key,
                format!(
                    "{} is not a token id of the vocabulary of {n_vocab}",
                    v.summary()
                ),
            )),
        }
    }

    fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.g.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.err(key, format!("is a {}, expected a bool", v.type_name()))),
        }
    }

    fn str(&self, key: &str) -> Result<Option<&str>> {
        match self.g.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.err(key, format!("is a {}, expected a string", v.type_name()))),
        }
    }
}

pub(super) fn from_gguf(g: &GgufFile) -> Result<Tokenizer> {
    let m = Meta { g };
    let model = m
        .str("tokenizer.ggml.model")?
        .ok_or_else(|| m.err("tokenizer.ggml.model", "missing: the file has no tokenizer"))?;
    let tokens = m.strings(TOKENS)?.ok_or_else(|| m.err(TOKENS, "missing"))?;
    let n = tokens.len();
    if n == 0 || u32::try_from(n).is_err() {
        return Err(m.err(TOKENS, format!("{n} tokens")));
    }
    let types: Vec<i64> = match m.numbers(TOKEN_TYPE, n)? {
        Some(t) => t.into_iter().map(|t| t as i64).collect(),
        None => vec![1; n],
    };
    let bos = m.id("tokenizer.ggml.bos_token_id", n)?;
    let eos = m.id("tokenizer.ggml.eos_token_id", n)?;
    let unk = m.id("tokenizer.ggml.unknown_token_id", n)?;
    let mut eos_ids: Vec<u32> = eos.into_iter().collect();
    for key in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
        eos_ids.extend(m.id(key, n)?);
    }
    for (i, (t, ty)) in tokens.iter().zip(&types).enumerate() {
        if *ty == CONTROL && END_OF_GENERATION.contains(t) {
            eos_ids.extend(u32::try_from(i).ok());
        }
    }

    let (body, default_add_bos) = match model {
        "gpt2" => byte_level(&m, &tokens)?,
        "llama" => (sentencepiece(&m, &tokens, unk)?, true),
        "bert" => (wordpiece(&tokens, &types, unk), true),
        other => {
            return Err(m.err(
                "tokenizer.ggml.model",
                format!("tokenizer type {other:?} is not supported (supported: gpt2, llama, bert)"),
            ))
        }
    };
    let add_bos = m
        .bool("tokenizer.ggml.add_bos_token")?
        .unwrap_or(default_add_bos)
        && bos.is_some();
    let add_eos = m.bool("tokenizer.ggml.add_eos_token")?.unwrap_or(false) && eos.is_some();

    let mut doc = body;
    doc["added_tokens"] = added_tokens(&tokens, &types, model == "llama");
    doc["post_processor"] = if model == "bert" {
        // [CLS] A [SEP] (B [SEP]) with token types 0/1, as BertTokenizer does; llama.cpp
        // stores [CLS] as bos and [SEP] as the separator (or eos).
        let sep = m.id("tokenizer.ggml.seperator_token_id", n)?.or(eos);
        bert_post_processor(&tokens, bos.filter(|_| add_bos), sep)
    } else {
        post_processor(&tokens, bos.filter(|_| add_bos), eos.filter(|_| add_eos))
    };
    let inner: tokenizers::Tokenizer = serde_json::from_value(doc).map_err(|e| {
        tok_err(format!(
            "{}: building the tokenizer from tokenizer.ggml.* failed: {e}",
            g.path().display()
        ))
    })?;
    Tokenizer::new(inner, bos, eos_ids, add_bos, n)
}

/// GPT-2's byte ↔ printable-character table: a token is spelled with one character per byte.
fn byte_alphabet() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for (b, slot) in table.iter_mut().enumerate() {
        let printable = matches!(b, 33..=126 | 161..=172 | 174..=255);
        let code = if printable {
            b as u32
        } else {
            let c = next;
            next += 1;
            c
        };
        *slot = char::from_u32(code).unwrap_or('\0');
    }
    table
}

fn byte_level(m: &Meta, tokens: &[&str]) -> Result<(Value, bool)> {
    let merges = m
        .strings(MERGES)?
        .ok_or_else(|| m.err(MERGES, "missing (a gpt2 tokenizer needs its merges)"))?;
    let pre_name = m.str("tokenizer.ggml.pre")?.unwrap_or("default");
    let (pre_tokenizer, ignore_merges) =
        pre::byte_level_pre_tokenizer(pre_name).ok_or_else(|| {
            m.err(
                "tokenizer.ggml.pre",
                format!(
                    "pre-tokenizer {pre_name:?} is not supported (supported: {})",
                    pre::supported().join(", ")
                ),
            )
        })?;
    // Tokens outside the byte alphabet (some files store added tokens as plain text) are
    // respelled byte by byte, so the BPE model sees one spelling.
    let alphabet = byte_alphabet();
    let in_alphabet: std::collections::HashSet<char> = alphabet.iter().copied().collect();
    let spelled: Vec<String> = tokens
        .iter()
        .map(|t| {
            if t.chars().all(|c| in_alphabet.contains(&c)) {
                (*t).to_string()
            } else {
                t.bytes().map(|b| alphabet[usize::from(b)]).collect()
            }
        })
        .collect();
    let mut pairs = Vec::with_capacity(merges.len());
    for (i, merge) in merges.iter().enumerate() {
        let Some((a, b)) = merge.split_once(' ') else {
            return Err(m.err(MERGES, format!("item {i} {merge:?} is not two tokens")));
        };
        pairs.push(json!([a, b]));
    }
    let llama3_style = pre_name.starts_with("llama") || ignore_merges;
    let model = bpe_model(vocab_map(&spelled), pairs, None, false, ignore_merges);
    let doc = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                    "use_regex": true},
        "model": model,
    });
    Ok((doc, llama3_style))
}

fn sentencepiece(m: &Meta, tokens: &[&str], unk: Option<u32>) -> Result<Value> {
    let scores = m
        .numbers(SCORES, tokens.len())?
        .ok_or_else(|| m.err(SCORES, "missing (a llama tokenizer needs its scores)"))?;
    let add_space_prefix = m.bool("tokenizer.ggml.add_space_prefix")?.unwrap_or(true);
    let arch = m.str("general.architecture")?.unwrap_or_default();
    let gemma = matches!(arch, "gemma" | "gemma2" | "gemma3");
    let replace = |from: &str, to: &str| json!({"type": "Replace", "pattern": {"String": from}, "content": to});
    let mut decoders = vec![
        replace("\u{2581}", " "),
        json!({"type": "ByteFallback"}),
        json!({"type": "Fuse"}),
    ];
    let strip = json!({"type": "Strip", "content": " ", "start": 1, "stop": 0});
    // Variants as transformers rebuilds them from GGUF: Gemma spells space runs with real spaces
    // in the file and its merge order is the token order, not the scores; Phi-3 prepends its
    // space in a normalizer (so "  hi" keeps one more ▁ than with Metaspace).
    let (owned, scores, normalizer, pre_tokenizer): (Vec<String>, Vec<f64>, Value, Value) = if gemma
    {
        let respelled = tokens
            .iter()
            .map(|t| {
                if t.contains(' ') && t.chars().all(char::is_whitespace) {
                    "\u{2581}".repeat(t.chars().count())
                } else {
                    (*t).to_string()
                }
            })
            .collect();
        let by_position = (0..tokens.len()).map(|i| -(i as f64)).collect();
        let split = json!({"type": "Split", "pattern": {"String": " "},
                           "behavior": "MergedWithPrevious", "invert": false});
        (respelled, by_position, replace(" ", "\u{2581}"), split)
    } else if arch == "phi3" {
        decoders.push(strip);
        let normalizer = json!({"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u{2581}"}, replace(" ", "\u{2581}")]});
        (
            tokens.iter().map(|t| (*t).to_string()).collect(),
            scores,
            normalizer,
            Value::Null,
        )
    } else {
        if add_space_prefix {
            decoders.push(strip);
        }
        let metaspace = json!({"type": "Metaspace", "replacement": "\u{2581}",
                               "prepend_scheme": if add_space_prefix { "first" } else { "never" },
                               "split": false});
        (
            tokens.iter().map(|t| (*t).to_string()).collect(),
            scores,
            Value::Null,
            metaspace,
        )
    };
    let merges = merges_from_scores(&owned, &scores);
    let unk_token = unk.and_then(|u| owned.get(u as usize)).cloned();
    let model = bpe_model(vocab_map(&owned), merges, unk_token, true, false);
    Ok(json!({
        "version": "1.0", "truncation": null, "padding": null,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": model,
    }))
}

/// WordPiece from llama.cpp's "phantom space" spelling of a BERT vocabulary, undone: control
/// tokens are kept, a leading `▁` marks a word start (dropped), anything else is a
/// continuation (`##` restored). Normalized and split as BertTokenizer does (lowercasing:
/// llama.cpp's WordPiece tokenizer always lowercases).
fn wordpiece(tokens: &[&str], types: &[i64], unk: Option<u32>) -> Value {
    let spelled: Vec<String> = tokens
        .iter()
        .zip(types)
        .map(|(t, &ty)| {
            if ty == CONTROL {
                (*t).to_string()
            } else if let Some(word) = t.strip_prefix('\u{2581}') {
                word.to_string()
            } else {
                format!("##{t}")
            }
        })
        .collect();
    let unk = unk
        .and_then(|u| spelled.get(u as usize))
        .cloned()
        .unwrap_or_else(|| "[UNK]".into());
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "normalizer": {"type": "BertNormalizer", "clean_text": true,
                       "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": unk, "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab_map(&spelled)},
    })
}

fn bert_post_processor(tokens: &[&str], cls: Option<u32>, sep: Option<u32>) -> Value {
    let mut specials = Map::new();
    let mut piece = |id: Option<u32>, type_id: u32| -> Option<Value> {
        let id = id?;
        let t = tokens.get(id as usize).copied().unwrap_or_default();
        specials.insert(t.to_string(), json!({"id": t, "ids": [id], "tokens": [t]}));
        Some(json!({"SpecialToken": {"id": t, "type_id": type_id}}))
    };
    let mut single = Vec::new();
    single.extend(piece(cls, 0));
    single.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
    single.extend(piece(sep, 0));
    let mut pair = single.clone();
    pair.push(json!({"Sequence": {"id": "B", "type_id": 1}}));
    pair.extend(piece(sep, 1));
    json!({"type": "TemplateProcessing", "single": single, "pair": pair,
           "special_tokens": specials})
}

/// Token → id, the first id winning when a file repeats a token.
fn vocab_map(tokens: &[String]) -> Map<String, Value> {
    let mut vocab = Map::new();
    for (i, t) in tokens.iter().enumerate() {
        if !vocab.contains_key(t) {
            vocab.insert(t.clone(), json!(i));
        }
    }
    vocab
}

fn bpe_model(
    vocab: Map<String, Value>,
    merges: Vec<Value>,
    unk_token: Option<String>,
    byte_fallback: bool,
    ignore_merges: bool,
) -> Value {
    json!({
        "type": "BPE", "dropout": null, "unk_token": unk_token,
        "continuing_subword_prefix": null, "end_of_word_suffix": null,
        "fuse_unk": byte_fallback, "byte_fallback": byte_fallback,
        "ignore_merges": ignore_merges,
        "vocab": vocab, "merges": merges,
    })
}

/// Every split of a token into two tokens is a merge, ranked by the merged token's score, then
/// longer left and right parts first; ties keep token order, then the parts' id order (the order
/// transformers' `generate_merges` gives, so ids agree even on ties).
fn merges_from_scores(tokens: &[String], scores: &[f64]) -> Vec<Value> {
    let ids: HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    let mut merges: Vec<(f64, usize, usize, &str, &str)> = Vec::new();
    for (token, &score) in tokens.iter().zip(scores) {
        let mut local = Vec::new();
        for (cut, _) in token.char_indices().skip(1) {
            let (l, r) = token.split_at(cut);
            if let (Some(&il), Some(&ir)) = (ids.get(l), ids.get(r)) {
                local.push((il, ir, l, r));
            }
        }
        local.sort_by_key(|&(il, ir, _, _)| (il, ir));
        merges.extend(
            local
                .into_iter()
                .map(|(_, _, l, r)| (score, l.chars().count(), r.chars().count(), l, r)),
        );
    }
    merges.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)));
    merges
        .into_iter()
        .map(|(_, _, _, l, r)| json!([l, r]))
        .collect()
}

fn added_tokens(tokens: &[&str], types: &[i64], sentencepiece: bool) -> Value {
    let mut out = Vec::new();
    for (i, (t, &ty)) in tokens.iter().zip(types).enumerate() {
        let special = ty == CONTROL || (sentencepiece && ty == UNKNOWN);
        if special || ty == USER_DEFINED {
            out.push(json!({
                "id": i, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": special,
            }));
        }
    }
    Value::Array(out)
}

fn post_processor(tokens: &[&str], bos: Option<u32>, eos: Option<u32>) -> Value {
    let text = |id: u32| tokens.get(id as usize).copied().unwrap_or_default();
    let mut specials = Map::new();
    let mut piece = |id: Option<u32>, type_id: u32| -> Option<Value> {
        let id = id?;
        let t = text(id);
        specials.insert(t.to_string(), json!({"id": t, "ids": [id], "tokens": [t]}));
        Some(json!({"SpecialToken": {"id": t, "type_id": type_id}}))
    };
    let mut single = Vec::new();
    let mut pair = Vec::new();
    single.extend(piece(bos, 0));
    single.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
    single.extend(piece(eos, 0));
    pair.extend(single.iter().cloned());
    pair.extend(piece(bos, 1));
    pair.push(json!({"Sequence": {"id": "B", "type_id": 1}}));
    pair.extend(piece(eos, 1));
    json!({"type": "TemplateProcessing", "single": single, "pair": pair,
           "special_tokens": specials})
}

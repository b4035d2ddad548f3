//! How a byte-level BPE vocabulary cuts text into words before merging, by llama.cpp's
//! `tokenizer.ggml.pre` name. The regexes are the ones in the models' own tokenizer.json files
//! (GPT-2, Llama 3, Qwen2, Mistral's Tekken, GPT-4o); llama.cpp groups its pre types the same way.

use serde_json::{json, Value};

/// GPT-2's split, built into the `ByteLevel` pre-tokenizer (`use_regex: true`).
const GPT2: &[&str] = &["default", "gpt2", "gpt-2", "mpt", "olmo", "jais", "phi-2"];
/// GPT-2's split after cutting every digit apart (SmolLM, StarCoder).
const DIGITS_THEN_GPT2: &[&str] = &[
    "smollm",
    "starcoder",
    "refact",
    "command-r",
    "codeshell",
    "exaone",
    "minerva-7b",
];
const LLAMA3_NAMES: &[&str] = &[
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "pixtral",
    "dbrx",
    "smaug-bpe",
];
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_NAMES: &[&str] = &["qwen2", "deepseek-r1-qwen", "megrez"];
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O_NAMES: &[&str] = &["gpt-4o", "llama4"];
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenizer JSON for `pre`, and whether BPE skips merging words already in the
/// vocabulary (Llama 3's `ignore_merges`). `None` for a pre type not implemented here.
pub(super) fn byte_level_pre_tokenizer(pre: &str) -> Option<(Value, bool)> {
    let byte_level = |use_regex: bool| {
        json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
               "use_regex": use_regex})
    };
    let split_then_bytes = |regex: &str| {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated",
             "invert": false},
            byte_level(false),
        ]})
    };
    if GPT2.contains(&pre) {
        return Some((byte_level(true), false));
    }
    if DIGITS_THEN_GPT2.contains(&pre) {
        let seq = json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            byte_level(true),
        ]});
        return Some((seq, false));
    }
    if LLAMA3_NAMES.contains(&pre) {
        return Some((split_then_bytes(LLAMA3), true));
    }
    if QWEN2_NAMES.contains(&pre) {
        return Some((split_then_bytes(QWEN2), false));
    }
    if pre == "tekken" {
        return Some((split_then_bytes(TEKKEN), false));
    }
    if GPT4O_NAMES.contains(&pre) {
        return Some((split_then_bytes(GPT4O), false));
    }
    None
}

/// Every pre type [`byte_level_pre_tokenizer`] knows, for error messages.
pub(super) fn supported() -> Vec<&'static str> {
    let mut all: Vec<&str> = [
        GPT2,
        DIGITS_THEN_GPT2,
        LLAMA3_NAMES,
        QWEN2_NAMES,
        GPT4O_NAMES,
    ]
    .concat();
    all.push("tekken");
    all
}

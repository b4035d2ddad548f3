//! The tokenizer of a whisper.cpp ggml file, as the `tokenizer.json` of the Hugging Face
//! Whisper model it came from.
//!
//! The file stores the text tokens' bytes in id order (GPT-2's byte-level BPE vocabulary, or
//! openai-whisper's multilingual one) but no merge list. The vocabulary is tiktoken's: a byte
//! string's rank is its id, and encoding merges the adjacent pair whose concatenation has the
//! lowest rank. A BPE merge list with that behaviour lists, for every token, each split into
//! two lower-ranked tokens, ranked by the token's id; `tokenizers` then encodes as tiktoken
//! (and as the checkpoints' own merges.txt) does. The special tokens are not in the file:
//! their ids follow from `n_vocab` as whisper.cpp computes them.

use super::GgmlWhisperFile;
use super::LANGUAGES as LANGUAGE_CODES;
use cyb_tensor::Result;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::path::PathBuf;

/// Ids of Whisper's special tokens for a vocabulary of `n_vocab` ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Specials {
    pub eot: usize,
    pub sot: usize,
    pub languages: usize,
    pub translate: usize,
}

impl Specials {
    /// whisper.cpp's rule: English-only vocabularies have 51864 ids, multilingual ones 51865
    /// (99 languages) or more (large-v3: 100). `None` for a vocabulary too small to be
    /// Whisper's (a test model's).
    pub(crate) fn of(n_vocab: usize) -> Option<Specials> {
        if n_vocab < 51864 {
            return None;
        }
        let multilingual = n_vocab >= 51865;
        let languages = n_vocab - 51765 - usize::from(multilingual);
        if languages > LANGUAGE_CODES.len() {
            return None;
        }
        let m = usize::from(multilingual);
        Some(Specials {
            eot: 50256 + m,
            sot: 50257 + m,
            languages,
            // 50357 with 99 languages on the English-only layout; shifted by each language
            // more (a multilingual vocabulary's extra <|endoftext|> is its 99th's shift).
            translate: 50357 + (languages + m - 99),
        })
    }

    /// `(id, name)` of every special token before the timestamps.
    fn names(&self) -> Vec<(usize, String)> {
        let mut v = vec![
            (self.eot, "<|endoftext|>".to_string()),
            (self.sot, "<|startoftranscript|>".to_string()),
        ];
        for (i, code) in LANGUAGE_CODES.iter().take(self.languages).enumerate() {
            v.push((self.sot + 1 + i, format!("<|{code}|>")));
        }
        let t = self.translate;
        for (k, name) in [
            "<|translate|>",
            "<|transcribe|>",
            "<|startoflm|>",
            "<|startofprev|>",
            "<|nocaptions|>",
            "<|notimestamps|>",
        ]
        .iter()
        .enumerate()
        {
            v.push((t + k, (*name).to_string()));
        }
        v
    }
}

/// The tokenizer.json text for `file`, `None` when its vocabulary is not Whisper's.
pub(crate) fn tokenizer_json(file: &GgmlWhisperFile) -> Option<String> {
    let specials = Specials::of(file.hparams.n_vocab)?;
    let chars = crate::byte_level_chars();
    let mut vocab: Map<String, Value> = Map::new();
    let mut rank: HashMap<String, usize> = HashMap::new();
    let mut tokens: Vec<(usize, String)> = Vec::new();
    for (id, word) in file.words().enumerate().take(specials.eot) {
        let s: String = word.iter().map(|&b| chars[usize::from(b)]).collect();
        if rank.contains_key(&s) {
            continue;
        }
        rank.insert(s.clone(), id);
        vocab.insert(s.clone(), id.into());
        tokens.push((id, s));
    }
    let mut merges = Vec::new();
    for (id, s) in &tokens {
        for (k, _) in s.char_indices().skip(1) {
            let (a, b) = s.split_at(k);
            let lower = |t: &str| rank.get(t).is_some_and(|r| r < id);
            if lower(a) && lower(b) {
                merges.push(Value::String(format!("{a} {b}")));
            }
        }
    }
    let added: Vec<Value> = specials
        .names()
        .into_iter()
        .map(|(id, content)| {
            json!({
                "id": id, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true
            })
        })
        .collect();
    let t = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {
            "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true
        },
        "post_processor": null,
        "decoder": {
            "type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true
        },
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
            "vocab": vocab, "merges": merges
        }
    });
    Some(t.to_string())
}

/// `tokenizer_json(file)` written to the cache of generated tokenizers (named by its hash),
/// and its path.
pub(crate) fn materialize(file: &GgmlWhisperFile) -> Result<Option<PathBuf>> {
    match tokenizer_json(file) {
        Some(text) => {
            let key = blake3::hash(text.as_bytes()).to_hex().to_string();
            crate::hf::cache_tokenizer_json(&key, text.as_bytes(), &file.path).map(Some)
        }
        None => Ok(None),
    }
}

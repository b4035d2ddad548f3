//! A Hugging Face directory's tokenizer: `tokenizer.json` for the text ↔ ids mapping,
//! `tokenizer_config.json`, `config.json` and `generation_config.json` for BOS and the ids that
//! end generation.

use super::{probes_add_bos, tok_err, Tokenizer};
use cyb_format::HfModel;
use cyb_tensor::Result;
use serde_json::Value;
use std::path::Path;

pub(super) fn from_hf_dir(h: &HfModel) -> Result<Tokenizer> {
    let Some(path) = h.tokenizer_json.as_deref() else {
        return Err(tok_err(format!(
            "{}: no tokenizer.json in the model directory (only tokenizer.json is supported)",
            h.dir().display()
        )));
    };
    let inner = load(path)?;
    let tc = h.tokenizer_config.as_ref();
    let config = Some(h.config_json());
    let gen = h.generation_config.as_ref();

    let named = |key: &str| {
        tc.and_then(|c| c.get(key))
            .and_then(token_name)
            .and_then(|n| inner.token_to_id(n))
    };
    let bos_id = named("bos_token")
        .or_else(|| config.and_then(|c| id_list(c.get("bos_token_id")).first().copied()))
        .or_else(|| gen.and_then(|c| id_list(c.get("bos_token_id")).first().copied()));
    // generation_config.json is what transformers' generate() stops on; the others add the
    // eos of older files that have none.
    let mut eos_ids = gen.map_or_else(Vec::new, |c| id_list(c.get("eos_token_id")));
    eos_ids.extend(config.map_or_else(Vec::new, |c| id_list(c.get("eos_token_id"))));
    eos_ids.extend(named("eos_token"));
    let add_bos = probes_add_bos(&inner, bos_id);
    let vocab_size = vocab_size(&inner);
    Tokenizer::new(inner, bos_id, eos_ids, add_bos, vocab_size)
}

pub(super) fn from_tokenizer_json(path: &Path) -> Result<Tokenizer> {
    let inner = load(path)?;
    let find = |names: &[&str]| names.iter().find_map(|n| inner.token_to_id(n));
    let bos_id = find(&["<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>"]);
    let eos_ids: Vec<u32> = [
        "</s>",
        "<|endoftext|>",
        "<|end_of_text|>",
        "<|eot_id|>",
        "<|im_end|>",
        "<eos>",
        "<end_of_turn>",
    ]
    .iter()
    .filter_map(|n| inner.token_to_id(n))
    .collect();
    let add_bos = probes_add_bos(&inner, bos_id);
    let vocab_size = vocab_size(&inner);
    Tokenizer::new(inner, bos_id, eos_ids, add_bos, vocab_size)
}

fn load(path: &Path) -> Result<tokenizers::Tokenizer> {
    // The tokenizers library panics on some malformed files (an `expect` in its decoder
    // deserializer, for one); a hostile tokenizer.json must be an error like any other.
    let parsed = super::guarded("loading", || tokenizers::Tokenizer::from_file(path))
        .map_err(|e| tok_err(format!("{}: {e}", path.display())))?;
    let mut t = parsed.map_err(|e| tok_err(format!("{}: cannot load: {e}", path.display())))?;
    // Some files (sentence-transformers exports) pin padding and truncation to a fixed length;
    // `encode` must return the text's own tokens, so callers pad and truncate explicitly.
    t.with_padding(None);
    t.with_truncation(None)
        .map_err(|e| tok_err(format!("{}: {e}", path.display())))?;
    Ok(t)
}

/// Ids may be sparse (added tokens past the model's vocabulary), so size is the largest id + 1.
fn vocab_size(inner: &tokenizers::Tokenizer) -> usize {
    inner
        .get_vocab(true)
        .values()
        .max()
        .map_or(0, |&m| m as usize + 1)
}

/// `"<s>"` or `{"content": "<s>", ...}` as tokenizer_config.json writes special tokens.
fn token_name(v: &Value) -> Option<&str> {
    v.as_str()
        .or_else(|| v.get("content").and_then(Value::as_str))
}

/// An id or a list of ids (`eos_token_id` is either).
fn id_list(v: Option<&Value>) -> Vec<u32> {
    let one = |v: &Value| v.as_u64().and_then(|i| u32::try_from(i).ok());
    match v {
        Some(Value::Array(a)) => a.iter().filter_map(one).collect(),
        Some(v) => one(v).into_iter().collect(),
        None => Vec::new(),
    }
}

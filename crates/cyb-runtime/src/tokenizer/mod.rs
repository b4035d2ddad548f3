//! Text ↔ token ids, on the Hugging Face `tokenizers` crate.
//!
//! A Hugging Face directory brings its `tokenizer.json`; a GGUF file brings only metadata
//! (`tokenizer.ggml.*`), from which [`gguf`] writes the equivalent `tokenizer.json` so both
//! paths run the same code. Special tokens written in the text (`<|im_start|>`) are matched
//! whole, as Hugging Face and llama.cpp do.

mod gguf;
mod hf_dir;
mod pre;
mod stream;

pub use stream::IncrementalDecoder;

use cyb_format::ModelFile;
use cyb_tensor::{Error, Result};

/// A loaded tokenizer with the ids generation needs (BOS, end-of-generation ids).
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    bos_id: Option<u32>,
    eos_ids: Vec<u32>,
    add_bos: bool,
    vocab_size: usize,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("bos_id", &self.bos_id)
            .field("eos_ids", &self.eos_ids)
            .field("add_bos", &self.add_bos)
            .finish()
    }
}

/// `f`, a call into the tokenizers library, with a panic inside it (some malformed
/// tokenizer.json files make it panic, e.g. a post-processor template naming a special token
/// the file does not define) turned into an error.
pub(crate) fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        let why = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        tok_err(format!(
            "{what} failed inside the tokenizers library ({why}); the tokenizer file is malformed"
        ))
    })
}

pub(crate) fn tok_err(reason: impl Into<String>) -> Error {
    Error::Tokenizer {
        reason: reason.into(),
    }
}

impl Tokenizer {
    /// The tokenizer of a model: `tokenizer.json` (+ `tokenizer_config.json`,
    /// `generation_config.json`) for a Hugging Face directory, `tokenizer.ggml.*` for GGUF.
    pub fn from_model_file(model: &ModelFile) -> Result<Tokenizer> {
        match model {
            ModelFile::Gguf(g) => gguf::from_gguf(g),
            ModelFile::HuggingFace(h) => hf_dir::from_hf_dir(h),
        }
    }

    /// A standalone `tokenizer.json`; BOS/EOS are guessed from its special tokens' names.
    pub fn from_tokenizer_json(path: &std::path::Path) -> Result<Tokenizer> {
        hf_dir::from_tokenizer_json(path)
    }

    /// Wraps a built `tokenizers::Tokenizer`; ids are checked against the vocabulary.
    pub(crate) fn new(
        inner: tokenizers::Tokenizer,
        bos_id: Option<u32>,
        mut eos_ids: Vec<u32>,
        add_bos: bool,
        vocab_size: usize,
    ) -> Result<Tokenizer> {
        let fits = |id: u32| (id as usize) < vocab_size;
        if let Some(b) = bos_id.filter(|&b| !fits(b)) {
            return Err(tok_err(format!(
                "bos id {b} is outside the vocabulary of {vocab_size}"
            )));
        }
        if let Some(e) = eos_ids.iter().find(|&&e| !fits(e)) {
            return Err(tok_err(format!(
                "eos id {e} is outside the vocabulary of {vocab_size}"
            )));
        }
        let mut seen = std::collections::HashSet::new();
        eos_ids.retain(|e| seen.insert(*e));
        Ok(Tokenizer {
            inner,
            bos_id,
            eos_ids,
            add_bos,
            vocab_size,
        })
    }

    /// Token ids of `text`. With `add_special_tokens`, the model's BOS (and whatever else its
    /// post-processor adds) is included, as Hugging Face's `encode` does.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc = guarded("encode", || self.inner.encode(text, add_special_tokens))?
            .map_err(|e| tok_err(format!("encode failed: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text pair `(a, b)` with the model's special tokens (`[CLS] a [SEP] b [SEP]` for
    /// BERT), as Hugging Face's tokenizer encodes it: ids, token types (0 then 1 for BERT, all
    /// 0 for RoBERTa), and which text each token came from (`None` for special tokens).
    pub fn encode_pair(&self, a: &str, b: &str) -> Result<PairEncoding> {
        let enc = guarded("encode", || self.inner.encode((a, b), true))?
            .map_err(|e| tok_err(format!("encode failed: {e}")))?;
        Ok(PairEncoding {
            ids: enc.get_ids().to_vec(),
            type_ids: enc.get_type_ids().to_vec(),
            sequence: enc.get_sequence_ids(),
        })
    }

    /// The text of `ids`. Ids outside the vocabulary are an error, not silently dropped.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.check_ids(ids)?;
        guarded("decode", || self.inner.decode(ids, skip_special_tokens))?
            .map_err(|e| tok_err(format!("decode failed: {e}")))
    }

    /// A streaming detokenizer: push ids one by one, get text as soon as it is complete.
    pub fn incremental_decoder(&self, skip_special_tokens: bool) -> IncrementalDecoder<'_> {
        IncrementalDecoder::new(self, skip_special_tokens)
    }

    /// The beginning-of-sequence id, if the model has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos_id
    }

    /// Every id that ends generation (eos, end-of-turn, end-of-message), without repeats.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// True when `encode(text, true)` puts BOS in front.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Number of ids, including added and special tokens.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The token's text as the vocabulary spells it (`Ġhello`, `▁the`, `<0x0A>`), or `None`
    /// outside the vocabulary.
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The id of a token spelled exactly `token` in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub(crate) fn check_ids(&self, ids: &[u32]) -> Result<()> {
        match ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            Some(id) => Err(tok_err(format!(
                "token id {id} is outside the vocabulary of {}",
                self.vocab_size
            ))),
            None => Ok(()),
        }
    }
}

/// Whether the tokenizer's post-processor puts `bos` in front of encoded text.
/// A text pair's tokens: see [`Tokenizer::encode_pair`].
#[derive(Clone, Debug, PartialEq)]
pub struct PairEncoding {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
    pub sequence: Vec<Option<usize>>,
}

pub(crate) fn probes_add_bos(inner: &tokenizers::Tokenizer, bos: Option<u32>) -> bool {
    let Some(bos) = bos else { return false };
    let first = |special: bool| {
        let enc = guarded("encode", || inner.encode("a", special))
            .ok()?
            .ok()?;
        Some(enc.get_ids().first().copied())
    };
    matches!((first(true), first(false)), (Some(Some(w)), Some(o)) if w == bos && o != Some(bos))
}

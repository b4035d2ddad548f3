//! Streaming detokenization: text is released only once it can no longer change.
//!
//! Decoding ids one at a time is wrong in two ways: a UTF-8 character may span several byte
//! tokens (byte-level BPE, `<0xXX>` fallback), and SentencePiece drops the space of the first
//! token of a decode, so each token alone would lose its leading space. Instead each push
//! decodes a short window (a few already-released tokens plus the new ones) and releases what
//! the window adds beyond its already-released part, holding back while it ends in an
//! incomplete character (U+FFFD).

use super::Tokenizer;
use cyb_tensor::Result;

/// Push ids, get newly completed text. Concatenating every [`push`](Self::push) result and
/// [`finish`](Self::finish) gives the same text as [`Tokenizer::decode`] of all ids.
pub struct IncrementalDecoder<'t> {
    tokenizer: &'t Tokenizer,
    skip_special_tokens: bool,
    ids: Vec<u32>,
    /// Start of the decode window: released tokens kept as left context.
    prefix: usize,
    /// End of the released tokens.
    read: usize,
}

impl<'t> IncrementalDecoder<'t> {
    pub(super) fn new(tokenizer: &'t Tokenizer, skip_special_tokens: bool) -> Self {
        IncrementalDecoder {
            tokenizer,
            skip_special_tokens,
            ids: Vec::new(),
            prefix: 0,
            read: 0,
        }
    }

    /// Adds one id; returns the text it completes (often empty mid-character).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.tokenizer.check_ids(&[id])?;
        self.ids.push(id);
        let window = self.ids.get(self.prefix..).unwrap_or_default();
        let released = self.ids.get(self.prefix..self.read).unwrap_or_default();
        let before = self.decode(released)?;
        let after = self.decode(window)?;
        if after.len() <= before.len() || after.ends_with('\u{FFFD}') {
            return Ok(String::new());
        }
        let Some(new) = after.get(before.len()..) else {
            // The window's text does not extend the released text at a character boundary
            // (a decoder rewrote earlier text): wait for more tokens.
            return Ok(String::new());
        };
        let new = new.to_string();
        self.prefix = self.read;
        self.read = self.ids.len();
        Ok(new)
    }

    /// The text still held back (an incomplete character at the end of generation).
    pub fn finish(&mut self) -> Result<String> {
        let window = self.ids.get(self.prefix..).unwrap_or_default();
        let released = self.ids.get(self.prefix..self.read).unwrap_or_default();
        let before = self.decode(released)?;
        let after = self.decode(window)?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        Ok(after.get(before.len()..).unwrap_or_default().to_string())
    }

    /// All ids pushed so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    fn decode(&self, ids: &[u32]) -> Result<String> {
        if ids.is_empty() {
            return Ok(String::new());
        }
        self.tokenizer.decode(ids, self.skip_special_tokens)
    }
}

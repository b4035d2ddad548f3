//! `Model::fill_mask`: the most likely tokens at each mask token of a text, from a masked-LM
//! encoder (`*ForMaskedLM`), as transformers' fill-mask pipeline computes them: a softmax over
//! the whole vocabulary at the mask's position, the `top_k` best with the token's text and the
//! text with that token in place of the mask (padding ids dropped; special tokens skipped when
//! the text has one mask, kept when it has several so the other masks stay visible).

use crate::embed::{softmax, EmbedInput};
use crate::{Model, Tokenizer};
use cyb_format::ModelFile;
use cyb_models::BertHead;
use cyb_tensor::{Error, Result};
use serde_json::Value;

const WHAT: &str = "fill-mask";

/// One candidate for a mask token.
#[derive(Clone, Debug, PartialEq)]
pub struct MaskFill {
    pub token_id: u32,
    /// The token decoded on its own (`sun`, `##s`; empty for an id the tokenizer lacks).
    pub token_str: String,
    /// Softmax probability over the vocabulary.
    pub score: f32,
    /// The text with this token in place of the mask.
    pub sequence: String,
}

/// The mask and padding tokens of an encoder's tokenizer.
#[derive(Clone, Debug, Default)]
pub(crate) struct MaskTokens {
    /// The mask token's text (`[MASK]`, `<mask>`) and id.
    pub mask: Option<(String, u32)>,
    pub pad: Option<u32>,
}

/// `"[MASK]"` or `{"content": "[MASK]", ...}` as tokenizer configs write special tokens.
fn token_name(v: &Value) -> Option<&str> {
    v.as_str()
        .or_else(|| v.get("content").and_then(Value::as_str))
}

/// Reads the mask and padding tokens as transformers' tokenizer knows them:
/// `tokenizer_config.json`, then `special_tokens_map.json` (Hugging Face), or
/// `tokenizer.ggml.{mask,padding}_token_id` (GGUF); the usual spellings otherwise.
pub(crate) fn mask_tokens(file: &ModelFile, tokenizer: &Tokenizer) -> MaskTokens {
    let (config, map) = match file {
        ModelFile::HuggingFace(h) => (
            h.tokenizer_config.as_ref(),
            std::fs::read_to_string(h.dir().join("special_tokens_map.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok()),
        ),
        ModelFile::Gguf(_) => (None, None),
    };
    let named = |key: &str| -> Option<(String, u32)> {
        let name = [config, map.as_ref()]
            .into_iter()
            .flatten()
            .find_map(|c| c.get(key).and_then(token_name).map(String::from))?;
        tokenizer.token_id(&name).map(|id| (name, id))
    };
    let gguf_id = |key: &str| -> Option<(String, u32)> {
        let ModelFile::Gguf(g) = file else {
            return None;
        };
        let id = g
            .get(key)
            .and_then(cyb_format::MetaValue::as_u64)
            .and_then(|i| u32::try_from(i).ok())?;
        tokenizer.token_text(id).map(|t| (t, id))
    };
    let guess = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| tokenizer.token_id(n).map(|id| (n.to_string(), id)))
    };
    let mask = named("mask_token")
        .or_else(|| gguf_id("tokenizer.ggml.mask_token_id"))
        .or_else(|| guess(&["[MASK]", "<mask>"]));
    let pad = named("pad_token")
        .or_else(|| gguf_id("tokenizer.ggml.padding_token_id"))
        .or_else(|| guess(&["[PAD]", "<pad>"]))
        .map(|(_, id)| id);
    MaskTokens { mask, pad }
}

impl Model {
    /// The mask token fill-mask looks for in the text (`[MASK]`, `<mask>`), if the encoder's
    /// tokenizer has one.
    pub fn mask_token(&self) -> Option<&str> {
        self.encoder()
            .and_then(|e| e.mask.mask.as_ref())
            .map(|(t, _)| t.as_str())
    }

    /// The `top_k` most likely tokens at each mask token of `text`, best first; one list per
    /// mask, in text order (see the module comment).
    pub fn fill_mask(&self, text: &str, top_k: usize) -> Result<Vec<Vec<MaskFill>>> {
        let enc = self.encoder_or_err(WHAT)?;
        let config = enc.net.config();
        if config.head != BertHead::MaskedLm {
            return Err(Error::invalid(
                WHAT,
                format!(
                    "{} has no masked-LM head: fill-mask needs a model saved as *ForMaskedLM",
                    self.path().display()
                ),
            ));
        }
        let Some((mask_text, mask_id)) = enc.mask.mask.clone() else {
            return Err(Error::invalid(
                WHAT,
                format!(
                    "the tokenizer of {} has no mask token",
                    self.path().display()
                ),
            ));
        };
        if top_k == 0 {
            return Err(Error::invalid(WHAT, "top_k must be at least 1"));
        }
        let inputs = [EmbedInput::Text(text.to_string())];
        let ids = self
            .token_sequences(enc, &inputs, false, WHAT)?
            .pop()
            .ok_or_else(|| Error::invalid(WHAT, "no result"))?;
        let masks: Vec<usize> = (0..ids.len()).filter(|&i| ids[i] == mask_id).collect();
        if masks.is_empty() {
            return Err(Error::invalid(
                WHAT,
                format!("the text has no mask token: write {mask_text} where a word is missing"),
            ));
        }
        let vocab = config.vocab_size;
        // The head runs on the mask rows only.
        let logits = enc.net.masked_lm_logits_at(&ids, &masks)?;
        let single = masks.len() == 1;
        masks
            .iter()
            .enumerate()
            .map(|(i, &pos)| {
                let row = logits.get(i * vocab..(i + 1) * vocab).ok_or_else(|| {
                    Error::invalid(
                        WHAT,
                        format!(
                            "the masked-LM head gave {} logits for {} masks and a \
                                 {vocab}-token vocabulary",
                            logits.len(),
                            masks.len()
                        ),
                    )
                })?;
                let probs = softmax(row);
                let mut order: Vec<usize> = (0..probs.len()).collect();
                order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
                order
                    .into_iter()
                    .take(top_k)
                    .map(|best| {
                        let token_id = u32::try_from(best)
                            .map_err(|_| Error::invalid(WHAT, "vocabulary too large"))?;
                        let mut filled = ids.clone();
                        filled[pos] = token_id;
                        filled.retain(|&t| Some(t) != enc.mask.pad);
                        Ok(MaskFill {
                            token_id,
                            token_str: self.decode_known(&[token_id], false)?,
                            score: probs[best],
                            sequence: self.decode_known(&filled, single)?,
                        })
                    })
                    .collect()
            })
            .collect()
    }

    /// Decodes `ids`, leaving out ids past the tokenizer's vocabulary (a model's padded
    /// embedding rows), which transformers' decode also turns into nothing.
    fn decode_known(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        let n = self.tokenizer().vocab_size();
        let known: Vec<u32> = ids.iter().copied().filter(|&t| (t as usize) < n).collect();
        self.tokenizer().decode(&known, skip_special_tokens)
    }
}

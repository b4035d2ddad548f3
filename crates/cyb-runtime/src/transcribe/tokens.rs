//! Whisper's special tokens, found by name in the model's tokenizer: the start of transcript,
//! languages, tasks, timestamps, and the ids a decoder must never produce.

use crate::Tokenizer;
use cyb_tensor::{Error, Result};

/// Seconds per timestamp token (`<|0.00|>`, `<|0.02|>`, …).
pub const TIME_PRECISION: f64 = 0.02;

/// The language codes of multilingual Whisper, in token order (`<|en|>` is the first language
/// token, `<|yue|>` the 100th, which only large-v3's vocabulary has).
pub use cyb_format::whisper_ggml::LANGUAGES;

/// The ids of the special tokens of one Whisper vocabulary.
#[derive(Clone, Debug)]
pub struct SpecialTokens {
    pub eot: u32,
    pub sot: u32,
    pub sot_prev: u32,
    pub sot_lm: Option<u32>,
    pub no_speech: Option<u32>,
    pub no_timestamps: u32,
    /// `<|0.00|>`; every id from here up to the vocabulary's end is a timestamp.
    pub timestamp_begin: u32,
    pub transcribe: Option<u32>,
    pub translate: Option<u32>,
    /// `(code, id)` of each language token, for multilingual models.
    pub languages: Vec<(&'static str, u32)>,
    /// True for multilingual checkpoints (a language and a task follow the start token).
    pub multilingual: bool,
}

impl SpecialTokens {
    /// Finds the special tokens in `tok`; `vocab_size` is the model's (timestamps fill the ids
    /// after `<|notimestamps|>` up to it even where tokenizer.json does not list them).
    pub fn find(tok: &Tokenizer, vocab_size: usize) -> Result<SpecialTokens> {
        let need = |name: &str| {
            tok.token_id(name).ok_or_else(|| Error::Tokenizer {
                reason: format!("the tokenizer has no {name} token: not a Whisper tokenizer"),
            })
        };
        let eot = need("<|endoftext|>")?;
        let no_timestamps = need("<|notimestamps|>")?;
        // Multilingual vocabularies have 51865 ids (51866 with large-v3's extra language);
        // English-only ones 51864. The language tokens exist in both tokenizers.
        let multilingual = vocab_size >= 51865;
        let languages = if multilingual {
            LANGUAGES
                .iter()
                .filter_map(|&code| Some((code, tok.token_id(&format!("<|{code}|>"))?)))
                .filter(|&(_, id)| (id as usize) < vocab_size)
                .collect()
        } else {
            Vec::new()
        };
        let no_speech = tok
            .token_id("<|nospeech|>")
            .or_else(|| tok.token_id("<|nocaptions|>"));
        let t = SpecialTokens {
            eot,
            sot: need("<|startoftranscript|>")?,
            sot_prev: need("<|startofprev|>")?,
            sot_lm: tok.token_id("<|startoflm|>"),
            no_speech,
            no_timestamps,
            timestamp_begin: no_timestamps + 1,
            transcribe: tok.token_id("<|transcribe|>"),
            translate: tok.token_id("<|translate|>"),
            languages,
            multilingual,
        };
        if t.timestamp_begin as usize >= vocab_size {
            return Err(Error::Tokenizer {
                reason: format!(
                    "<|notimestamps|> is id {no_timestamps}, leaving no timestamp ids below the \
                     model's vocabulary of {vocab_size}"
                ),
            });
        }
        Ok(t)
    }

    /// The id of language `code` (`"en"`, `"de"`, …), an error naming the known ones if absent.
    pub fn language(&self, code: &str) -> Result<u32> {
        let code = code.to_ascii_lowercase();
        self.languages
            .iter()
            .find(|(c, _)| *c == code)
            .map(|&(_, id)| id)
            .ok_or_else(|| Error::InvalidArgument {
                op: "language".into(),
                reason: if self.multilingual {
                    format!(
                        "{code:?} is not a language of this model (one of {})",
                        self.languages
                            .iter()
                            .map(|(c, _)| *c)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                } else {
                    format!("{code:?}: this English-only model transcribes \"en\" only")
                },
            })
    }

    pub fn is_timestamp(&self, id: u32) -> bool {
        id >= self.timestamp_begin
    }
}

/// The tokens of non-speech symbols (brackets, music notes, speaker-dash forms, …) that
/// Whisper must not print: each symbol alone or after a space when it is one token (the music
/// symbols even when they are several), plus the tokens of `" -"` and `" '"`. Sorted, unique.
pub fn non_speech_tokens(tok: &Tokenizer) -> Result<Vec<u32>> {
    let mut symbols: Vec<String> = "\"#()*+/:;<=>@[\\]^_`{|}~「」『』"
        .chars()
        .map(String::from)
        .collect();
    symbols.extend(
        "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪"
            .split(' ')
            .map(String::from),
    );
    let misc: Vec<String> = "♩♪♫♬♭♮♯".chars().map(String::from).collect();
    let mut out = Vec::new();
    for s in [" -", " '"] {
        if let Some(&t) = tok.encode(s, false)?.first() {
            out.push(t);
        }
    }
    for (s, is_misc) in symbols
        .iter()
        .map(|s| (s, false))
        .chain(misc.iter().map(|s| (s, true)))
    {
        for text in [s.clone(), format!(" {s}")] {
            let ids = tok.encode(&text, false)?;
            if ids.len() == 1 || (is_misc && !ids.is_empty()) {
                out.push(ids[0]);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

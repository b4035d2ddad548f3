//! Encoders: `Model::embed` (one vector per text, pooled and normalized as the checkpoint's
//! sentence-transformers settings say unless the caller overrides them) and
//! `Model::classify` (label scores from a sequence-classification head: softmax, sigmoid or
//! the raw value, by transformers' text-classification pipeline's rule, see
//! [`ScoreFunction`]).
//!
//! Texts are tokenized with the model's special tokens, sorted by length and run in padded
//! batches (the attention mask makes padding invisible, so batching never changes a vector);
//! results come back in input order. A text longer than the model takes is refused unless
//! truncation was asked for; an empty text is refused.

use crate::embed_load::SentenceSettings;
use crate::{Model, Tokenizer};
use cyb_models::{
    BertConfig, BertModel, DebertaModel, EncoderOutput, JinaBertModel, ModernBertModel, Pooling,
};
use cyb_tensor::{Error, Result};

/// Texts per forward pass.
const BATCH: usize = 32;

/// The network of an encoder: the post-LN BertStyle block, ModernBERT's, DeBERTa-v2's or
/// Jina-v2's.
pub(crate) enum EncoderNet {
    Bert(Box<BertModel>),
    Modern(Box<ModernBertModel>),
    Deberta(Box<DebertaModel>),
    Jina(Box<JinaBertModel>),
}

impl EncoderNet {
    pub(crate) fn config(&self) -> &BertConfig {
        match self {
            EncoderNet::Bert(m) => m.config(),
            EncoderNet::Modern(m) => m.config(),
            EncoderNet::Deberta(m) => m.config(),
            EncoderNet::Jina(m) => m.config(),
        }
    }

    fn hidden_states(&self, seqs: &[Vec<u32>]) -> Result<EncoderOutput> {
        match self {
            EncoderNet::Bert(m) => m.hidden_states(seqs),
            EncoderNet::Modern(m) => m.hidden_states(seqs),
            EncoderNet::Deberta(m) => m.hidden_states(seqs),
            EncoderNet::Jina(m) => m.hidden_states(seqs),
        }
    }

    /// Vocabulary logits, `[positions.len(), vocab]`, of the tokens at `positions` of one
    /// sequence, from a `*ForMaskedLM` checkpoint.
    pub(crate) fn masked_lm_logits_at(&self, seq: &[u32], positions: &[usize]) -> Result<Vec<f32>> {
        match self {
            EncoderNet::Bert(m) => m.masked_lm_logits_at(seq, positions),
            EncoderNet::Deberta(m) => m.masked_lm_logits_at(seq, positions),
            EncoderNet::Modern(m) => m.masked_lm_logits_at(seq, positions),
            EncoderNet::Jina(_) => Err(Error::invalid(
                "fill-mask",
                "Jina-v2 checkpoints carry no masked-LM head (jinaai saves the embedding \
                 models under JinaBertForMaskedLM without one)",
            )),
        }
    }

    fn token_logits(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        match self {
            EncoderNet::Bert(m) => m.token_logits(seqs),
            EncoderNet::Deberta(m) => m.token_logits(seqs),
            EncoderNet::Modern(m) => m.token_logits(seqs),
            EncoderNet::Jina(m) => m.token_logits(seqs),
        }
    }

    pub(crate) fn sequence_logits(
        &self,
        seqs: &[Vec<u32>],
        types: Option<&[Vec<u32>]>,
    ) -> Result<Vec<Vec<f32>>> {
        match self {
            EncoderNet::Bert(m) => m.sequence_logits_typed(seqs, types),
            EncoderNet::Deberta(m) => m.sequence_logits_typed(seqs, types),
            // ModernBERT has no token types: a pair is told apart by its separator alone.
            EncoderNet::Modern(m) => m.sequence_logits(seqs),
            EncoderNet::Jina(m) => m.sequence_logits_typed(seqs, types),
        }
    }
}

/// The encoder half of a [`Model`].
pub(crate) struct Encoder {
    pub(crate) net: EncoderNet,
    settings: SentenceSettings,
    /// The longest token sequence accepted (special tokens included).
    pub(crate) max_tokens: usize,
    /// Special tokens the tokenizer appends after the text (`[SEP]`, `</s>`), kept when
    /// truncating.
    suffix_specials: usize,
    /// How classification logits become scores.
    pub(crate) score_function: ScoreFunction,
    /// The tokenizer's mask and padding tokens (fill-mask).
    pub(crate) mask: crate::fill_mask::MaskTokens,
}

impl Encoder {
    pub(crate) fn new(
        net: EncoderNet,
        tokenizer: &Tokenizer,
        settings: SentenceSettings,
    ) -> Result<Encoder> {
        let limit = net.config().max_tokens();
        let max_tokens = settings.max_seq_length.map_or(limit, |m| m.min(limit));
        let with = tokenizer.encode("a", true)?;
        let without = tokenizer.encode("a", false)?;
        let suffix_specials = (0..with.len())
            .find(|&i| !without.is_empty() && with[i..].starts_with(&without))
            .map_or(0, |i| with.len() - i - without.len());
        Ok(Encoder {
            net,
            settings,
            max_tokens,
            suffix_specials,
            score_function: ScoreFunction::Softmax,
            mask: Default::default(),
        })
    }
}

/// One input to [`Model::embed_with`]: text, or token ids used as given (no special tokens
/// added).
#[derive(Clone, Debug, PartialEq)]
pub enum EmbedInput {
    Text(String),
    Tokens(Vec<u32>),
}

/// Choices of [`Model::embed_with`]; `None` keeps the model's own setting.
#[derive(Clone, Debug, Default)]
pub struct EmbedOptions {
    pub pooling: Option<Pooling>,
    pub normalize: Option<bool>,
    /// Cut inputs longer than the model takes (keeping the closing special token) instead of
    /// refusing them.
    pub truncate: bool,
}

/// Vectors in input order and the number of tokens they were computed from.
#[derive(Clone, Debug, PartialEq)]
pub struct Embeddings {
    pub vectors: Vec<Vec<f32>>,
    pub tokens: usize,
}

/// One token of a text and its most likely class (token classification, e.g. NER).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLabel {
    /// The token as the vocabulary spells it (`[CLS]`, `cat`, `##s`).
    pub token: String,
    pub label: String,
    pub score: f32,
}

/// Choices of [`Model::classify_with`] and [`Model::classify_pair_with`].
#[derive(Clone, Debug, Default)]
pub struct ClassifyOptions {
    /// Cut inputs longer than the model takes instead of refusing them.
    pub truncate: bool,
    /// How logits become scores (transformers' `function_to_apply`); `None` keeps the model's
    /// [`score_function`](Model::score_function).
    pub function: Option<ScoreFunction>,
}

/// One class and its score (a probability, or the raw value of a regression head).
#[derive(Clone, Debug, PartialEq)]
pub struct LabelScore {
    pub label: String,
    pub score: f32,
}

impl Model {
    pub(crate) fn encoder_or_err(&self, what: &str) -> Result<&Encoder> {
        self.encoder().ok_or_else(|| {
            Error::invalid(
                what,
                format!(
                    "{} is a text generator ({}), not an encoder: {what} needs a BERT-style \
                     model",
                    self.path().display(),
                    self.config().architecture
                ),
            )
        })
    }

    /// The model's pooling, whether it normalizes, and the longest input in tokens; `None`
    /// for a text generator.
    pub fn embedding_defaults(&self) -> Option<(Pooling, bool, usize)> {
        self.encoder()
            .map(|e| (e.settings.pooling, e.settings.normalize, e.max_tokens))
    }

    /// Length of the vectors [`embed`](Model::embed) returns (0 for a text generator).
    pub fn embedding_size(&self) -> usize {
        self.encoder().map_or(0, |e| e.net.config().hidden_size)
    }

    /// One vector per text, in order, with the model's pooling and normalization.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let inputs: Vec<EmbedInput> = texts
            .iter()
            .map(|t| EmbedInput::Text(t.to_string()))
            .collect();
        Ok(self.embed_with(&inputs, &EmbedOptions::default())?.vectors)
    }

    /// One vector per input, in order.
    pub fn embed_with(&self, inputs: &[EmbedInput], opts: &EmbedOptions) -> Result<Embeddings> {
        let enc = self.encoder_or_err("embed")?;
        let seqs = self.token_sequences(enc, inputs, opts.truncate, "embed")?;
        let pooling = opts.pooling.unwrap_or(enc.settings.pooling);
        let normalize = opts.normalize.unwrap_or(enc.settings.normalize);
        let tokens = seqs.iter().map(Vec::len).sum();
        let mut vectors = vec![Vec::new(); seqs.len()];
        for chunk in by_length(&seqs).chunks(BATCH) {
            let batch: Vec<Vec<u32>> = chunk.iter().map(|&i| seqs[i].clone()).collect();
            let out = enc.net.hidden_states(&batch)?;
            for (&i, v) in chunk.iter().zip(out.pool(pooling, normalize)) {
                vectors[i] = v;
            }
        }
        Ok(Embeddings { vectors, tokens })
    }

    /// Class scores of `text`, best first, named by the checkpoint's `id2label`: softmax of
    /// the sequence-classification logits, or sigmoid / the raw logit as
    /// [`score_function`](Model::score_function) says.
    pub fn classify(&self, text: &str) -> Result<Vec<LabelScore>> {
        let mut all = self.classify_batch(&[text], false)?;
        all.pop()
            .ok_or_else(|| Error::invalid("classify", "no result"))
    }

    /// [`classify`](Model::classify) for several texts, in order.
    pub fn classify_batch(&self, texts: &[&str], truncate: bool) -> Result<Vec<Vec<LabelScore>>> {
        let opts = ClassifyOptions {
            truncate,
            function: None,
        };
        self.classify_with(texts, &opts)
    }

    /// [`classify`](Model::classify) for several texts, in order, with a choice of truncation
    /// and score function.
    pub fn classify_with(
        &self,
        texts: &[&str],
        opts: &ClassifyOptions,
    ) -> Result<Vec<Vec<LabelScore>>> {
        let enc = self.encoder_or_err("classify")?;
        let function = opts.function.unwrap_or(enc.score_function);
        let truncate = opts.truncate;
        let inputs: Vec<EmbedInput> = texts
            .iter()
            .map(|t| EmbedInput::Text(t.to_string()))
            .collect();
        let seqs = self.token_sequences(enc, &inputs, truncate, "classify")?;
        let labels = &enc.net.config().labels;
        let mut out = vec![Vec::new(); seqs.len()];
        for chunk in by_length(&seqs).chunks(BATCH) {
            let batch: Vec<Vec<u32>> = chunk.iter().map(|&i| seqs[i].clone()).collect();
            let logits = enc.net.sequence_logits(&batch, None)?;
            for (&i, l) in chunk.iter().zip(logits) {
                out[i] = ranked_labels(&l, labels, function);
            }
        }
        Ok(out)
    }

    /// How [`classify`](Model::classify) turns logits into scores (`None` for a text
    /// generator).
    pub fn score_function(&self) -> Option<ScoreFunction> {
        self.encoder().map(|e| e.score_function)
    }

    /// The class names (`id2label`) of the model's sequence- or token-classification head;
    /// empty without one.
    pub fn class_labels(&self) -> &[String] {
        self.encoder()
            .map_or(&[], |e| e.net.config().labels.as_slice())
    }

    /// True when the model has a token-classification head (use
    /// [`classify_tokens`](Model::classify_tokens) rather than [`classify`](Model::classify)).
    pub fn has_token_classifier(&self) -> bool {
        self.encoder()
            .is_some_and(|e| e.net.config().head == cyb_models::BertHead::TokenClassification)
    }

    /// The most likely class of every token of `text` (special tokens included), with its
    /// softmax probability.
    pub fn classify_tokens(&self, text: &str, truncate: bool) -> Result<Vec<TokenLabel>> {
        let enc = self.encoder_or_err("classify")?;
        let inputs = [EmbedInput::Text(text.to_string())];
        let seqs = self.token_sequences(enc, &inputs, truncate, "classify")?;
        let labels = &enc.net.config().labels;
        let logits = enc.net.token_logits(&seqs)?;
        let (ids, rows) = match (seqs.first(), logits.first()) {
            (Some(i), Some(r)) => (i, r),
            _ => return Err(Error::invalid("classify", "no result")),
        };
        Ok(ids
            .iter()
            .zip(rows.chunks_exact(labels.len().max(1)))
            .map(|(&id, row)| {
                let p = softmax(row);
                let best = (0..p.len())
                    .max_by(|&a, &b| p[a].total_cmp(&p[b]))
                    .unwrap_or(0);
                TokenLabel {
                    token: self.tokenizer().token_text(id).unwrap_or_default(),
                    label: labels.get(best).cloned().unwrap_or_default(),
                    score: p.get(best).copied().unwrap_or(0.0),
                }
            })
            .collect())
    }

    pub(crate) fn token_sequences(
        &self,
        enc: &Encoder,
        inputs: &[EmbedInput],
        truncate: bool,
        what: &str,
    ) -> Result<Vec<Vec<u32>>> {
        if inputs.is_empty() {
            return Err(Error::invalid(what, "no input given"));
        }
        let max = enc.max_tokens;
        inputs
            .iter()
            .enumerate()
            .map(|(i, input)| {
                let mut ids = match input {
                    EmbedInput::Text(t) if t.trim().is_empty() => {
                        return Err(Error::invalid(what, format!("input {i} is empty")));
                    }
                    EmbedInput::Text(t) => {
                        // Bounded before tokenizing: no token spans more than
                        // MAX_BYTES_PER_TOKEN bytes here, so a longer text cannot fit.
                        let limit = max.saturating_mul(MAX_BYTES_PER_TOKEN);
                        let t = if t.len() <= limit {
                            t.as_str()
                        } else if truncate {
                            let mut cut = limit;
                            while !t.is_char_boundary(cut) {
                                cut -= 1;
                            }
                            &t[..cut]
                        } else {
                            return Err(Error::invalid(
                                what,
                                format!(
                                    "input {i} is {} bytes long, more than this model's {max} \
                                     tokens can hold (ask for truncation to cut it: \
                                     --truncate, \"truncate\": true)",
                                    t.len()
                                ),
                            ));
                        };
                        self.tokenizer().encode(t, true)?
                    }
                    EmbedInput::Tokens(ids) if ids.is_empty() => {
                        return Err(Error::invalid(what, format!("input {i} has no tokens")));
                    }
                    EmbedInput::Tokens(ids) => {
                        self.tokenizer().check_ids(ids)?;
                        ids.clone()
                    }
                };
                if ids.len() > max {
                    if !truncate {
                        return Err(Error::invalid(
                            what,
                            format!(
                                "input {i} is {} tokens long; this model takes at most {max} \
                                 (ask for truncation to cut it: --truncate, \"truncate\": true)",
                                ids.len()
                            ),
                        ));
                    }
                    let keep = enc.suffix_specials.min(max.saturating_sub(1));
                    let tail = ids.split_off(ids.len() - keep);
                    ids.truncate(max - keep);
                    ids.extend(tail);
                }
                Ok(ids)
            })
            .collect()
    }
}

/// The most text one token is counted to cover when bounding an input before tokenizing it.
const MAX_BYTES_PER_TOKEN: usize = 1024;

/// Indices of `seqs` from shortest to longest, so each batch pads little.
pub(crate) fn by_length(seqs: &[Vec<u32>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..seqs.len()).collect();
    order.sort_by_key(|&i| seqs[i].len());
    order
}

pub(crate) fn softmax(x: &[f32]) -> Vec<f32> {
    crate::sampling::softmax(x)
        .into_iter()
        .map(|p| p as f32)
        .collect()
}

/// How sequence-classification logits become scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoreFunction {
    /// One probability distribution over the labels (single-label classifiers).
    Softmax,
    /// An independent probability per label (one-logit rerankers, multi-label classifiers).
    Sigmoid,
    /// The logits as they are (regression heads, e.g. similarity scores).
    Identity,
}

impl ScoreFunction {
    /// `softmax`, `sigmoid` or `none` (transformers' `function_to_apply` names).
    pub fn parse(name: &str) -> Result<ScoreFunction> {
        match name.to_ascii_lowercase().as_str() {
            "softmax" => Ok(ScoreFunction::Softmax),
            "sigmoid" => Ok(ScoreFunction::Sigmoid),
            "none" | "identity" => Ok(ScoreFunction::Identity),
            other => Err(Error::invalid(
                "classify",
                format!("score function {other:?}: use softmax, sigmoid or none"),
            )),
        }
    }

    /// transformers' text-classification pipeline's default: `problem_type` "regression" →
    /// identity; "multi_label_classification" or a single label → sigmoid; otherwise softmax.
    pub fn for_head(problem_type: Option<&str>, num_labels: usize) -> ScoreFunction {
        match problem_type {
            Some("regression") => ScoreFunction::Identity,
            Some("multi_label_classification") => ScoreFunction::Sigmoid,
            _ if num_labels == 1 => ScoreFunction::Sigmoid,
            _ => ScoreFunction::Softmax,
        }
    }

    pub fn apply(self, logits: &[f32]) -> Vec<f32> {
        match self {
            ScoreFunction::Softmax => softmax(logits),
            ScoreFunction::Sigmoid => logits.iter().map(|&x| 1.0 / (1.0 + (-x).exp())).collect(),
            ScoreFunction::Identity => logits.to_vec(),
        }
    }
}

/// The labels with their scores from `logits`, best first.
pub(crate) fn ranked_labels(
    logits: &[f32],
    labels: &[String],
    function: ScoreFunction,
) -> Vec<LabelScore> {
    let mut scores: Vec<LabelScore> = function
        .apply(logits)
        .into_iter()
        .zip(labels)
        .map(|(score, label)| LabelScore {
            label: label.clone(),
            score,
        })
        .collect();
    scores.sort_by(|a, b| b.score.total_cmp(&a.score));
    scores
}

#[cfg(test)]
mod tests {
    use super::ScoreFunction::{self, Identity, Sigmoid, Softmax};

    /// The order of transformers 5.24's TextClassificationPipeline.postprocess: regression
    /// first, then multi-label or one label, then softmax (a single-label problem_type with
    /// one label still gets the sigmoid).
    #[test]
    fn score_function_follows_the_pipeline_rule() {
        let rule = ScoreFunction::for_head;
        assert_eq!(rule(Some("regression"), 1), Identity);
        assert_eq!(rule(Some("regression"), 3), Identity);
        assert_eq!(rule(Some("multi_label_classification"), 3), Sigmoid);
        assert_eq!(rule(Some("single_label_classification"), 1), Sigmoid);
        assert_eq!(rule(Some("single_label_classification"), 2), Softmax);
        assert_eq!(rule(None, 1), Sigmoid);
        assert_eq!(rule(None, 3), Softmax);
    }
}

//! Text pairs on a sequence-classification encoder: `Model::classify_pair` (NLI, paraphrase,
//! cross-encoder rerankers) and zero-shot classification with an NLI model, as transformers'
//! zero-shot pipeline does it: each candidate label becomes the hypothesis
//! `template.replace("{}", label)` paired with the text; the logit of the label whose name
//! starts with "entail" is softmaxed over the candidates (single label), or for each
//! candidate against the contradiction logit (multi-label, or one candidate). The text is
//! truncated, never the hypothesis, when the pair is too long (transformers' `only_first`).

use crate::embed::{by_length, softmax, ClassifyOptions, Encoder, LabelScore};
use crate::Model;
use cyb_tensor::{Error, Result};

/// Choices of [`Model::zero_shot`].
#[derive(Clone, Debug)]
pub struct ZeroShotOptions {
    /// `{}` is replaced by the candidate label (transformers' default: "This example is {}.").
    pub hypothesis_template: String,
    /// Score every label on its own (entailment vs contradiction) instead of one softmax over
    /// the labels.
    pub multi_label: bool,
}

impl Default for ZeroShotOptions {
    fn default() -> Self {
        ZeroShotOptions {
            hypothesis_template: "This example is {}.".into(),
            multi_label: false,
        }
    }
}

/// Batch size of pair forward passes.
const BATCH: usize = 32;

impl Model {
    /// Class scores of the text pair `(text, text_pair)` (as [`classify`](Model::classify)
    /// scores one text: softmax, sigmoid for one-logit rerankers, raw for regression), best
    /// first. With
    /// `truncate`, a pair longer than the model takes loses tokens from the end of `text`.
    pub fn classify_pair(
        &self,
        text: &str,
        text_pair: &str,
        truncate: bool,
    ) -> Result<Vec<LabelScore>> {
        let opts = ClassifyOptions {
            truncate,
            function: None,
        };
        let mut all = self.classify_pair_with(&[(text, text_pair)], &opts)?;
        all.pop()
            .ok_or_else(|| Error::invalid("classify", "no result"))
    }

    /// [`classify_pair`](Model::classify_pair) for several pairs, in order, with a choice of
    /// truncation and score function.
    pub fn classify_pair_with(
        &self,
        pairs: &[(&str, &str)],
        opts: &ClassifyOptions,
    ) -> Result<Vec<Vec<LabelScore>>> {
        let enc = self.encoder_or_err("classify")?;
        if pairs.is_empty() {
            return Err(Error::invalid("classify", "no input given"));
        }
        let function = opts.function.unwrap_or(enc.score_function);
        let labels = &enc.net.config().labels;
        Ok(self
            .pair_logits(enc, pairs, opts.truncate)?
            .iter()
            .map(|row| crate::embed::ranked_labels(row, labels, function))
            .collect())
    }

    /// Zero-shot classification of `text` over `labels` with the default template
    /// ("This example is {}.") and one softmax over the labels.
    pub fn classify_zero_shot(&self, text: &str, labels: &[&str]) -> Result<Vec<LabelScore>> {
        self.zero_shot(text, labels, &ZeroShotOptions::default())
    }

    /// Zero-shot classification with an NLI model (see the module comment); candidates most
    /// likely first.
    pub fn zero_shot(
        &self,
        text: &str,
        labels: &[&str],
        opts: &ZeroShotOptions,
    ) -> Result<Vec<LabelScore>> {
        let enc = self.encoder_or_err("zero-shot classification")?;
        if labels.is_empty() {
            return Err(Error::invalid(
                "zero-shot classification",
                "no candidate labels given",
            ));
        }
        if !opts.hypothesis_template.contains("{}") {
            return Err(Error::invalid(
                "zero-shot classification",
                format!(
                    "the hypothesis template {:?} has no {{}} for the label",
                    opts.hypothesis_template
                ),
            ));
        }
        let names = &enc.net.config().labels;
        let entail = names
            .iter()
            .position(|l| l.to_lowercase().starts_with("entail"))
            .ok_or_else(|| {
                Error::invalid(
                    "zero-shot classification",
                    format!(
                        "the model's labels {names:?} have no \"entailment\": zero-shot \
                         classification needs an NLI model"
                    ),
                )
            })?;
        let contra = if entail == 0 { names.len() - 1 } else { 0 };
        let hypotheses: Vec<String> = labels
            .iter()
            .map(|l| opts.hypothesis_template.replace("{}", l))
            .collect();
        let pairs: Vec<(&str, &str)> = hypotheses.iter().map(|h| (text, h.as_str())).collect();
        let logits = self.pair_logits(enc, &pairs, true)?;
        let at = |row: &Vec<f32>, i: usize| row.get(i).copied().unwrap_or(f32::NAN);
        let scores: Vec<f32> = if opts.multi_label || labels.len() == 1 {
            logits
                .iter()
                .map(|row| softmax(&[at(row, contra), at(row, entail)])[1])
                .collect()
        } else {
            softmax(&logits.iter().map(|row| at(row, entail)).collect::<Vec<_>>())
        };
        let mut out: Vec<LabelScore> = labels
            .iter()
            .zip(scores)
            .map(|(l, score)| LabelScore {
                label: (*l).to_string(),
                score,
            })
            .collect();
        out.sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok(out)
    }

    /// Sequence-classification logits of text pairs, in order.
    fn pair_logits(
        &self,
        enc: &Encoder,
        pairs: &[(&str, &str)],
        truncate: bool,
    ) -> Result<Vec<Vec<f32>>> {
        let what = "classify";
        let mut seqs = Vec::with_capacity(pairs.len());
        let mut types = Vec::with_capacity(pairs.len());
        for (i, (a, b)) in pairs.iter().enumerate() {
            if a.trim().is_empty() || b.trim().is_empty() {
                return Err(Error::invalid(what, format!("pair {i} has an empty text")));
            }
            let p = self.tokenizer().encode_pair(a, b)?;
            let (mut ids, mut tys) = (p.ids, p.type_ids);
            let over = ids.len().saturating_sub(enc.max_tokens);
            if over > 0 {
                let first: Vec<usize> = (0..p.sequence.len())
                    .filter(|&j| p.sequence[j] == Some(0))
                    .collect();
                if !truncate || first.len() <= over {
                    return Err(Error::invalid(
                        what,
                        format!(
                            "pair {i} is {} tokens long; this model takes at most {}{}",
                            ids.len(),
                            enc.max_tokens,
                            if truncate {
                                " even with the first text cut away"
                            } else {
                                " (ask for truncation to cut the first text)"
                            }
                        ),
                    ));
                }
                // Drop the first text's last `over` tokens (right-side only_first).
                let drop: std::collections::HashSet<usize> =
                    first[first.len() - over..].iter().copied().collect();
                let keep = |j: &usize| !drop.contains(j);
                ids = (0..ids.len()).filter(keep).map(|j| ids[j]).collect();
                tys = (0..tys.len()).filter(keep).map(|j| tys[j]).collect();
            }
            seqs.push(ids);
            types.push(tys);
        }
        let mut out = vec![Vec::new(); seqs.len()];
        for chunk in by_length(&seqs).chunks(BATCH) {
            let s: Vec<Vec<u32>> = chunk.iter().map(|&i| seqs[i].clone()).collect();
            let t: Vec<Vec<u32>> = chunk.iter().map(|&i| types[i].clone()).collect();
            let logits = enc.net.sequence_logits(&s, Some(&t))?;
            for (&i, l) in chunk.iter().zip(logits) {
                out[i] = l;
            }
        }
        Ok(out)
    }
}

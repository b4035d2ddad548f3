//! The rules applied to the logits of every decoding step, in this order: repetition penalty,
//! no-repeat n-grams, suppressed tokens, a blank or end of text at the first step, and the
//! timestamp grammar (timestamps come in pairs, never go back, and the first one is early).

use super::tokens::SpecialTokens;

/// What the logit rules need to know of a window's decoding.
pub(crate) struct LogitRules<'a> {
    pub special: &'a SpecialTokens,
    /// Ids set to `-inf` at every step.
    pub suppress: &'a [u32],
    /// Ids set to `-inf` at the first step (a space and end of text).
    pub suppress_begin: &'a [u32],
    pub suppress_blank: bool,
    pub timestamps: bool,
    /// The last timestamp index allowed as the first token (`None`: any).
    pub max_initial_timestamp_index: Option<u32>,
    pub repetition_penalty: f32,
    pub no_repeat_ngram_size: usize,
}

/// The value a banned logit gets: the lowest finite f32, as CTranslate2 uses on CPU, so sums
/// and log-softmax stay finite.
pub(crate) const BANNED: f32 = f32::MIN;

impl LogitRules<'_> {
    /// Applies every rule to `logits` of the step after `generated` (the tokens of this window
    /// so far, without the prompt; its first `sample_begin` are a forced prefix).
    pub(crate) fn apply(&self, logits: &mut [f32], generated: &[u32], sample_begin: usize) {
        if self.repetition_penalty != 1.0 {
            let mut seen = generated.to_vec();
            seen.sort_unstable();
            seen.dedup();
            for &t in &seen {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l = if *l < 0.0 {
                        *l * self.repetition_penalty
                    } else {
                        *l / self.repetition_penalty
                    };
                }
            }
        }
        if self.no_repeat_ngram_size > 0 {
            ban_repeated_ngrams(logits, generated, self.no_repeat_ngram_size);
        }
        for &id in self.suppress {
            ban(logits, id as usize..id as usize + 1);
        }
        if generated.len() == sample_begin && self.suppress_blank {
            for &id in self.suppress_begin {
                ban(logits, id as usize..id as usize + 1);
            }
        }
        if self.timestamps {
            self.timestamp_rules(logits, generated, sample_begin);
        }
    }

    /// Timestamps come in pairs (a lone one after text is followed by another or the end),
    /// never go back, and the first is at most `max_initial_timestamp_index`; a timestamp is
    /// forced when the timestamps together are likelier than any single other token.
    fn timestamp_rules(&self, logits: &mut [f32], generated: &[u32], sample_begin: usize) {
        let t = self.special;
        let (tb, eot) = (t.timestamp_begin as usize, t.eot as usize);
        let vocab = logits.len();
        if tb >= vocab {
            return;
        }
        let nt = t.no_timestamps as usize;
        ban(logits, nt..nt + 1);
        let step = generated.len();
        let mut check_prob = false;
        if step == 0 {
            ban(logits, 0..tb);
            if let Some(max) = self.max_initial_timestamp_index {
                ban(logits, tb + max as usize + 1..vocab);
            }
        } else if step > sample_begin {
            let last = generated[step - 1] as usize;
            if last >= tb {
                let penultimate = if step - 1 > sample_begin {
                    generated[step - 2] as usize
                } else {
                    last
                };
                if penultimate >= tb {
                    ban(logits, tb..vocab);
                } else {
                    ban(logits, 0..eot);
                    ban(logits, tb..last);
                    check_prob = true;
                }
            } else {
                check_prob = true;
                let recent = generated[sample_begin..step]
                    .iter()
                    .rev()
                    .find(|&&id| id as usize >= tb);
                if let Some(&ts) = recent {
                    ban(logits, tb..ts as usize + 1);
                }
            }
        }
        // Both sides of `logsumexp(log_probs[tb..]) > max(log_probs[..tb])` carry the same
        // normalizer, so the logits compare directly.
        if check_prob {
            let ts = log_sum_exp(&logits[tb..]);
            let text = logits[..tb]
                .iter()
                .copied()
                .fold(f32::NEG_INFINITY, f32::max);
            if ts > text {
                ban(logits, 0..tb);
            }
        }
    }
}

/// Sets `logits[range]` (clipped to the row) to [`BANNED`].
fn ban(logits: &mut [f32], range: std::ops::Range<usize>) {
    let end = range.end.min(logits.len());
    if let Some(s) = logits.get_mut(range.start.min(end)..end) {
        s.fill(BANNED);
    }
}

/// Bans every token that would complete an n-gram already present in `generated`.
fn ban_repeated_ngrams(logits: &mut [f32], generated: &[u32], n: usize) {
    if generated.len() + 1 < n {
        return;
    }
    let tail = &generated[generated.len() + 1 - n..];
    for w in generated.windows(n) {
        if &w[..n - 1] == tail {
            if let Some(l) = logits.get_mut(w[n - 1] as usize) {
                *l = BANNED;
            }
        }
    }
}

/// `x - log Σ exp(x)` (all `-inf` stays `-inf`).
pub(crate) fn log_softmax(x: &[f32]) -> Vec<f32> {
    let lse = log_sum_exp(x);
    x.iter().map(|&v| v - lse).collect()
}

pub(crate) fn log_sum_exp(x: &[f32]) -> f32 {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return f32::NEG_INFINITY;
    }
    let sum: f32 = x.iter().map(|&v| (v - max).exp()).sum();
    max + sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn special() -> SpecialTokens {
        SpecialTokens {
            eot: 10,
            sot: 11,
            sot_prev: 12,
            sot_lm: None,
            no_speech: Some(13),
            no_timestamps: 14,
            timestamp_begin: 15,
            transcribe: None,
            translate: None,
            languages: vec![],
            multilingual: false,
        }
    }

    fn rules(s: &SpecialTokens) -> LogitRules<'_> {
        LogitRules {
            special: s,
            suppress: &[3],
            suppress_begin: &[1, 10],
            suppress_blank: true,
            timestamps: true,
            max_initial_timestamp_index: Some(2),
            repetition_penalty: 1.0,
            no_repeat_ngram_size: 0,
        }
    }

    fn allowed(l: &[f32]) -> Vec<usize> {
        (0..l.len()).filter(|&i| l[i] > BANNED).collect()
    }

    #[test]
    fn the_first_token_is_an_early_timestamp() {
        let s = special();
        let mut l = vec![0.0; 25];
        rules(&s).apply(&mut l, &[], 0);
        assert_eq!(allowed(&l), vec![15, 16, 17]);
    }

    #[test]
    fn timestamps_pair_up_and_never_go_back() {
        let s = special();
        let r = rules(&s);
        // After <|t=2|> text: text, eot or a timestamp after 2 (closing the pair).
        let mut l = vec![0.0; 25];
        l[0] = 10.0; // text is far likelier than the timestamps together
        r.apply(&mut l, &[17, 4], 0);
        let want: Vec<usize> = (0..15)
            .filter(|&i| i != 3 && i != 14)
            .chain(18..25)
            .collect();
        assert_eq!(allowed(&l), want);
        // A lone timestamp after text: no text, and no timestamp before it.
        let mut l = vec![0.0; 25];
        l[10] = 10.0;
        r.apply(&mut l, &[17, 4, 18], 0);
        assert_eq!(allowed(&l), (10..14).chain(18..25).collect::<Vec<_>>());
        // A closed pair: the next is text or eot, not a timestamp.
        let mut l = vec![0.0; 25];
        l[0] = 10.0;
        r.apply(&mut l, &[17, 4, 18, 18], 0);
        assert!(allowed(&l).iter().all(|&i| i < 15));
    }

    #[test]
    fn likely_timestamps_win_over_text() {
        let s = special();
        let mut l = vec![0.0; 25];
        rules(&s).apply(&mut l, &[17, 4], 0);
        assert!(allowed(&l).iter().all(|&i| i >= 15), "{:?}", allowed(&l));
    }

    #[test]
    fn repeated_ngrams_are_banned() {
        let mut l = vec![0.0; 8];
        ban_repeated_ngrams(&mut l, &[1, 2, 3, 1, 2], 3);
        assert_eq!(allowed(&l), vec![0, 1, 2, 4, 5, 6, 7]);
    }
}

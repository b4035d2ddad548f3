//! Decoding one 30 s window as CTranslate2 does for faster-whisper: the prompt up to its
//! start token is run once, a forced prefix follows, then tokens are chosen greedily, sampled
//! at a temperature, or found by beam search, each step's logits passing the window's
//! [`LogitRules`] and a log-softmax first.
//!
//! Scores are sums of the chosen tokens' log probabilities, end of text included, divided by
//! `tokens^length_penalty` (tokens without the end of text, prefix included).

use super::filters::{log_softmax, log_sum_exp, LogitRules};
use cyb_models::{EncodedAudio, KvCache, WhisperModel};
use cyb_tensor::{Error, Result};
use rand_chacha::rand_core::{Rng as _, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How the next tokens are chosen.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Strategy {
    /// Beam search with `beam_size` hypotheses (1: greedy).
    Beam {
        beam_size: usize,
        patience: f32,
        length_penalty: f32,
    },
    /// `best_of` independent samples at `temperature`; the best scored is kept.
    Sample {
        temperature: f32,
        best_of: usize,
        length_penalty: f32,
    },
}

/// The decoded tokens of a window.
#[derive(Clone, Debug)]
pub(crate) struct Decoded {
    /// The prefix and the generated tokens, without the end of text.
    pub tokens: Vec<u32>,
    /// Sum of log probabilities over `tokens.len()` to the length penalty (f32, as the
    /// reference computes it).
    pub score: f32,
    /// Probability of `<|nospeech|>` at the start-of-transcript position (raw logits).
    pub no_speech_prob: f64,
}

/// One window's decoding context.
pub(crate) struct Search<'a> {
    pub model: &'a WhisperModel,
    pub audio: &'a EncodedAudio,
    pub rules: &'a LogitRules<'a>,
    pub eot: u32,
    /// The no-speech token, when the vocabulary has one.
    pub no_speech: Option<u32>,
    pub sot: u32,
    pub no_timestamps: u32,
    /// Decoder positions (448).
    pub max_positions: usize,
    /// Tokens run through the decoder (for benchmarks).
    pub tokens_run: &'a std::cell::Cell<usize>,
    /// Self-attention caches to reuse (allocating one per hypothesis and window would clear
    /// fresh pages each time).
    pub spare: &'a std::cell::RefCell<Vec<KvCache>>,
}

/// The sampler's random numbers: ChaCha8 from a seed, as the text sampler uses.
pub(crate) struct Rng(ChaCha8Rng);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(ChaCha8Rng::seed_from_u64(seed))
    }

    /// Uniform in `[0, 1)`.
    fn next_f64(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The prompt run, ready for the first free step.
struct Start {
    /// Next-token logits after the start token and the forced prefix.
    logits: Vec<f32>,
    /// The forced prefix tokens (returned as part of the result).
    prefix: Vec<u32>,
    /// Decoding steps allowed, prefix included.
    max_steps: usize,
    no_speech_prob: f64,
}

impl Search<'_> {
    /// Runs the prompt. It is split after the start-of-transcript sequence
    /// (`<|startoftranscript|>` and what follows up to `<|notimestamps|>`): before it is
    /// context, its last token starts decoding, and what follows is a forced prefix.
    fn start(&self, prompt: &[u32]) -> Result<(Start, KvCache)> {
        let sot_index = prompt
            .iter()
            .position(|&t| t == self.sot)
            .ok_or_else(|| Error::invalid("whisper prompt", "no <|startoftranscript|> token"))?;
        let mut prompt_length = sot_index;
        while prompt
            .get(prompt_length)
            .is_some_and(|&t| t >= self.sot && t <= self.no_timestamps)
        {
            prompt_length += 1;
        }
        let start_step = prompt_length - 1;
        let max_steps = (self.max_positions / 2).min(self.max_positions.saturating_sub(start_step));
        let prefix = prompt[prompt_length..].to_vec();
        if prefix.len() >= max_steps {
            return Err(Error::invalid(
                "whisper prompt",
                format!(
                    "a prefix of {} tokens leaves no room to decode",
                    prefix.len()
                ),
            ));
        }
        let mut cache = self.cache()?;
        // The context, the start token and the prefix in one forward: the logits needed are
        // those at the start-of-transcript position (no-speech) and at the last token.
        let last = prompt.len() - 1;
        let at: Vec<usize> = if sot_index < last {
            vec![sot_index, last]
        } else {
            vec![last]
        };
        let mut rows =
            self.model
                .decode(self.audio, &[prompt], std::slice::from_mut(&mut cache), &at)?;
        self.tokens_run.set(self.tokens_run.get() + prompt.len());
        let mut rows = rows.pop().unwrap_or_default();
        let logits = rows.pop().unwrap_or_default();
        let sot_row = rows.pop();
        let no_speech_prob = match self.no_speech {
            Some(id) => {
                let row = sot_row.as_deref().unwrap_or(&logits);
                log_softmax(row)
                    .get(id as usize)
                    .map_or(0.0, |&lp| f64::from(lp).exp())
            }
            None => 0.0,
        };
        Ok((
            Start {
                logits,
                prefix,
                max_steps,
                no_speech_prob,
            },
            cache,
        ))
    }

    pub(crate) fn run(&self, prompt: &[u32], strategy: Strategy, rng: &mut Rng) -> Result<Decoded> {
        let (start, mut cache) = self.start(prompt)?;
        let no_speech_prob = start.no_speech_prob;
        let (tokens, score) = match strategy {
            Strategy::Beam {
                beam_size: 1,
                length_penalty,
                ..
            } => {
                let result = self.greedy(&start, &mut cache, None, rng);
                self.recycle(vec![cache]);
                let (t, sum) = result?;
                let s = normalize(sum, t.len(), length_penalty);
                (t, s)
            }
            Strategy::Beam {
                beam_size,
                patience,
                length_penalty,
            } => self.beam(start, cache, beam_size, patience, length_penalty)?,
            Strategy::Sample {
                temperature,
                best_of,
                length_penalty,
            } => {
                let mut best: Option<(Vec<u32>, f32)> = None;
                for _ in 0..best_of {
                    // Each sample decodes in its own copy of the prompt's cache.
                    let mut own = self.cache()?;
                    own.copy_from_via(&cache, self.model.dispatcher())?;
                    let result = self.greedy(&start, &mut own, Some(temperature), rng);
                    self.recycle(vec![own]);
                    let (t, sum) = result?;
                    let s = normalize(sum, t.len(), length_penalty);
                    if best.as_ref().is_none_or(|(_, b)| s > *b) {
                        best = Some((t, s));
                    }
                }
                self.recycle(vec![cache]);
                best.unwrap_or_default()
            }
        };
        Ok(Decoded {
            tokens,
            score,
            no_speech_prob,
        })
    }

    /// Greedy (`temperature` `None`: the first most likely token) or sampled decoding of one
    /// sequence in `cache`; returns its tokens and the sum of their log probabilities (end of
    /// text included, the prefix adding 0).
    fn greedy(
        &self,
        start: &Start,
        cache: &mut KvCache,
        temperature: Option<f32>,
        rng: &mut Rng,
    ) -> Result<(Vec<u32>, f32)> {
        let begin = start.prefix.len();
        let mut tokens = start.prefix.clone();
        let mut logits = start.logits.clone();
        let mut sum = 0f32;
        loop {
            self.rules.apply(&mut logits, &tokens, begin);
            let lse = log_sum_exp(&logits);
            let next = match temperature {
                None => crate::sampling::argmax(&logits),
                Some(t) => sample(&log_softmax(&logits), t, rng),
            };
            sum += logits[next as usize] - lse;
            if next == self.eot {
                break;
            }
            tokens.push(next);
            if tokens.len() >= start.max_steps {
                break;
            }
            logits = self
                .step(&[next], std::slice::from_mut(cache))?
                .swap_remove(0);
        }
        Ok((tokens, sum))
    }

    /// An empty self-attention cache, reused when one is spare.
    fn cache(&self) -> Result<KvCache> {
        match self.spare.borrow_mut().pop() {
            Some(mut c) => {
                c.clear();
                Ok(c)
            }
            None => self.model.new_cache(),
        }
    }

    fn recycle(&self, caches: Vec<KvCache>) {
        self.spare.borrow_mut().extend(caches);
    }

    /// One decoder step of every live sequence (one new token each); their next-token logits.
    fn step(&self, next: &[u32], caches: &mut [KvCache]) -> Result<Vec<Vec<f32>>> {
        let toks: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
        let toks: Vec<&[u32]> = toks.iter().map(|t| &t[..]).collect();
        let out = self.model.decode(self.audio, &toks, caches, &[0])?;
        self.tokens_run.set(self.tokens_run.get() + next.len());
        Ok(out
            .into_iter()
            .map(|mut r| r.pop().unwrap_or_default())
            .collect())
    }

    /// CTranslate2's beam search: `2·beam_size` candidates a step; an end of text among the
    /// first `beam_size` finishes a hypothesis and its slot goes to the next candidate that does
    /// not end; the search stops once `round(beam_size · patience)` hypotheses have finished
    /// (or at the length limit), and the best length-normalized one wins.
    fn beam(
        &self,
        start: Start,
        cache: KvCache,
        beam_size: usize,
        patience: f32,
        length_penalty: f32,
    ) -> Result<(Vec<u32>, f32)> {
        let k = beam_size;
        let candidates = 2 * k;
        let max_finished = ((k as f32 * patience).round() as usize).max(1);
        let begin = start.prefix.len();
        // Live beams: tokens, cumulative score, cache. One beam until the first free step.
        let mut seqs: Vec<Vec<u32>> = vec![start.prefix.clone()];
        let mut scores: Vec<f32> = vec![0.0];
        let mut caches: Vec<KvCache> = vec![cache];
        let mut rows: Vec<Vec<f32>> = vec![start.logits];
        let mut finished: Vec<(Vec<u32>, f32)> = Vec::new();
        loop {
            let step = seqs[0].len();
            let last_step = step + 1 >= start.max_steps;
            let vocab = rows[0].len();
            // (score, beam, token), best first; ties to the lower flat index.
            let mut cands: Vec<(f32, usize, u32)> = Vec::with_capacity(candidates * seqs.len());
            for (b, row) in rows.iter_mut().enumerate() {
                self.rules.apply(row, &seqs[b], begin);
                let lse = log_sum_exp(row);
                for (t, v) in top_k(row, candidates) {
                    cands.push((scores[b] + (v - lse), b, t));
                }
            }
            cands.sort_by(|a, b| {
                b.0.total_cmp(&a.0)
                    .then((a.1 * vocab + a.2 as usize).cmp(&(b.1 * vocab + b.2 as usize)))
            });
            cands.truncate(candidates);
            let mut chosen: Vec<(f32, usize, u32)> = Vec::with_capacity(k);
            let mut offset = k;
            for i in 0..k.min(cands.len()) {
                let c = cands[i];
                if c.2 == self.eot || last_step {
                    let mut t = seqs[c.1].clone();
                    if c.2 != self.eot {
                        t.push(c.2);
                    }
                    finished.push((t, c.0));
                    let replacement = (offset..cands.len()).find(|&j| cands[j].2 != self.eot);
                    match replacement {
                        Some(j) => {
                            chosen.push(cands[j]);
                            offset = j + 1;
                        }
                        None => chosen.push(c),
                    }
                } else {
                    chosen.push(c);
                }
            }
            if last_step || finished.len() >= max_finished || chosen.is_empty() {
                break;
            }
            // Each chosen beam continues one of the live ones: the first continuation of a
            // beam takes its cache, any other gets a copy in a cache no beam continues.
            let mut children = vec![0usize; caches.len()];
            chosen.iter().for_each(|c| children[c.1] += 1);
            let mut spare: Vec<KvCache> = Vec::new();
            let mut old: Vec<Option<KvCache>> = Vec::with_capacity(caches.len());
            for (b, c) in caches.into_iter().enumerate() {
                if children[b] == 0 {
                    spare.push(c);
                    old.push(None);
                } else {
                    old.push(Some(c));
                }
            }
            let mut taken = vec![false; old.len()];
            let mut copies: Vec<Option<KvCache>> = Vec::with_capacity(chosen.len());
            for &(_, b, _) in &chosen {
                if !taken[b] {
                    taken[b] = true;
                    copies.push(None);
                    continue;
                }
                let parent = old[b]
                    .as_ref()
                    .ok_or_else(|| Error::invalid("beam search", "lost a cache"))?;
                let mut c = match spare.pop() {
                    Some(c) => c,
                    None => self.cache()?,
                };
                c.copy_from_via(parent, self.model.dispatcher())?;
                copies.push(Some(c));
            }
            self.recycle(spare);
            let mut next_seqs = Vec::with_capacity(chosen.len());
            let mut next_caches = Vec::with_capacity(chosen.len());
            scores.clear();
            for (&(score, b, t), copy) in chosen.iter().zip(copies) {
                let mut s = seqs[b].clone();
                s.push(t);
                next_seqs.push(s);
                let cache = match copy {
                    Some(c) => c,
                    None => old[b]
                        .take()
                        .ok_or_else(|| Error::invalid("beam search", "lost a cache"))?,
                };
                next_caches.push(cache);
                scores.push(score);
            }
            let next: Vec<u32> = chosen.iter().map(|c| c.2).collect();
            caches = next_caches;
            seqs = next_seqs;
            rows = self.step(&next, &mut caches)?;
        }
        self.recycle(caches);
        let best = finished
            .into_iter()
            .map(|(t, s)| {
                let n = normalize(s, t.len(), length_penalty);
                (t, n)
            })
            .reduce(|a, b| if b.1 > a.1 { b } else { a })
            .unwrap_or_default();
        Ok(best)
    }
}

/// `sum / len^length_penalty` in f32 (`-inf` for an empty result with a positive penalty).
fn normalize(sum: f32, len: usize, length_penalty: f32) -> f32 {
    sum / (len as f32).powf(length_penalty)
}

/// The `k` largest values with their indices, largest first (lower index first on ties), in
/// one pass that keeps the best `k` seen.
fn top_k(x: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    if k == 0 {
        return best;
    }
    for (i, &v) in x.iter().enumerate() {
        if best.len() == k && v <= best[k - 1].1 {
            continue;
        }
        // After the last kept value not below `v` (earlier indices win ties).
        let at = best.partition_point(|&(_, b)| b >= v);
        best.insert(at, (i as u32, v));
        best.truncate(k);
    }
    best
}

/// A token drawn from `softmax(log_probs / temperature)`.
fn sample(log_probs: &[f32], temperature: f32, rng: &mut Rng) -> u32 {
    let scaled: Vec<f32> = log_probs.iter().map(|&l| l / temperature).collect();
    let lp = log_softmax(&scaled);
    let mut u = rng.next_f64();
    let mut last = 0;
    for (i, &v) in lp.iter().enumerate() {
        let p = f64::from(v).exp();
        if p == 0.0 {
            continue;
        }
        last = i;
        u -= p;
        if u <= 0.0 {
            return i as u32;
        }
    }
    last as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_orders_by_value_then_index() {
        let x = [0.5, 2.0, 2.0, -1.0, 3.0];
        assert_eq!(top_k(&x, 3), vec![(4, 3.0), (1, 2.0), (2, 2.0)]);
        assert_eq!(top_k(&x, 9).len(), 5);
    }

    #[test]
    fn sampling_follows_the_distribution() {
        let lp = log_softmax(&[0.0, (3.0f32).ln()]);
        let mut rng = Rng::new(7);
        let ones = (0..4000)
            .filter(|_| sample(&lp, 1.0, &mut rng) == 1)
            .count();
        assert!(
            (2800..3200).contains(&ones),
            "{ones} of 4000 should be near 3000"
        );
    }
}

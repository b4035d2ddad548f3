//! Choosing the next token from the model's logits.
//!
//! The pipeline, in this order (the order of Hugging Face transformers' `generate`, whose
//! logits processors are the reference for each stage):
//!
//! 1. repetition penalty over the distinct tokens of the last `penalty_last_n` tokens
//!    (`logit > 0 → logit / p`, else `logit * p`);
//! 2. presence and frequency penalties over the same window
//!    (`logit -= presence * (count > 0) + frequency * count`);
//! 3. `temperature == 0`: greedy, the first largest logit. Otherwise:
//! 4. temperature (`logits / T`), 5. top-k, 6. top-p, 7. min-p,
//! 8. a draw from `softmax` of what survived, with a ChaCha8 generator.
//!
//! llama.cpp's default chain filters (top-k, top-p, min-p) *before* temperature; at `T != 1`
//! the surviving set can therefore differ from llama.cpp's for the same parameters.
//!
//! Reproducibility: ChaCha8 seeded with `seed_from_u64` is a fixed algorithm, so the same
//! seed gives the same uniform draws on every platform; the draw walks token ids in order
//! over f64 probabilities.

mod constraint;
#[cfg(feature = "grammar")]
pub mod grammar;
mod stages;
mod stop;

pub use constraint::TokenConstraint;

pub use stages::{
    argmax, min_p, presence_frequency_penalty, repetition_penalty, softmax, temperature, top_k,
    top_p,
};
pub use stop::{StopMatcher, StopOutcome};

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::hash::{BuildHasher, Hasher};

/// Sampling settings. Defaults follow llama.cpp's (`temperature 0.8, top_k 40, top_p 0.95,
/// min_p 0.05`, penalties off, a window of 64 tokens).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 disables.
    pub top_k: usize,
    /// 1 disables.
    pub top_p: f32,
    /// 0 disables.
    pub min_p: f32,
    /// 1 disables.
    pub repetition_penalty: f32,
    /// 0 disables.
    pub presence_penalty: f32,
    /// 0 disables.
    pub frequency_penalty: f32,
    /// How many of the latest tokens the penalties look at; 0 disables the penalties,
    /// `usize::MAX` means the whole history.
    pub penalty_last_n: usize,
    /// `None` seeds from the operating system's randomness.
    pub seed: Option<u64>,
    /// The most tokens to generate; `None` runs until a stop or the context is full.
    pub max_tokens: Option<usize>,
    /// Generation ends before any of these strings (see [`StopMatcher`]).
    pub stop: Vec<String>,
    /// Keep generating past end-of-sequence tokens (llama.cpp's `--ignore-eos`).
    pub ignore_eos: bool,
}

impl Default for SamplingParams {
    fn default() -> SamplingParams {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            seed: None,
            max_tokens: None,
            stop: Vec::new(),
            ignore_eos: false,
        }
    }
}

impl SamplingParams {
    /// Temperature 0: always the most likely token.
    pub fn greedy() -> SamplingParams {
        SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        }
    }
}

/// Applies [`SamplingParams`] to one step's logits at a time.
#[derive(Clone, Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Sampler {
        let seed = params.seed.unwrap_or_else(entropy_seed);
        Sampler {
            params,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// True when the draw is the largest logit as it comes from the model (greedy, no
    /// penalties), so the model may pick it on its own backend (`forward_argmax`).
    pub fn is_plain_greedy(&self) -> bool {
        let p = &self.params;
        p.temperature <= 0.0
            && p.repetition_penalty == 1.0
            && p.presence_penalty == 0.0
            && p.frequency_penalty == 0.0
    }

    /// Picks the next token. `logits` (one per vocabulary entry) is modified in place by the
    /// stages; `history` is every token so far (prompt and generated). An empty `logits`
    /// gives 0.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        self.process(logits, history);
        if self.params.temperature <= 0.0 {
            return argmax(logits);
        }
        let probs = softmax(logits);
        self.draw(&probs).unwrap_or_else(|| argmax(logits))
    }

    /// Stages 1–7: penalties, then (unless greedy) temperature, top-k, top-p, min-p.
    pub fn process(&self, logits: &mut [f32], history: &[u32]) {
        let p = &self.params;
        let n = p.penalty_last_n.min(history.len());
        let window = history.get(history.len() - n..).unwrap_or_default();
        repetition_penalty(logits, window, p.repetition_penalty);
        presence_frequency_penalty(logits, window, p.presence_penalty, p.frequency_penalty);
        if p.temperature <= 0.0 {
            return;
        }
        temperature(logits, p.temperature);
        top_k(logits, p.top_k);
        top_p(logits, p.top_p);
        min_p(logits, p.min_p);
    }

    /// The distribution [`sample`](Sampler::sample) draws from for these logits: stages 1–7,
    /// then the softmax; greedy gives all of it to the largest logit. (`logits` is modified.)
    pub fn distribution(&self, logits: &mut [f32], history: &[u32]) -> Vec<f64> {
        self.process(logits, history);
        if self.params.temperature > 0.0 {
            let probs = softmax(logits);
            if probs.iter().any(|&p| p > 0.0) {
                return probs;
            }
        }
        let mut one = vec![0.0; logits.len()];
        if let Some(p) = one.get_mut(argmax(logits) as usize) {
            *p = 1.0;
        }
        one
    }

    /// One draw from `probs` (non-negative, not necessarily summing to 1); `None` when every
    /// probability is 0.
    pub fn draw_from(&mut self, probs: &[f64]) -> Option<u32> {
        let total: f64 = probs.iter().sum();
        if total <= 0.0 || !total.is_finite() {
            return None;
        }
        if (total - 1.0).abs() < 1e-12 {
            return self.draw(probs);
        }
        let scaled: Vec<f64> = probs.iter().map(|p| p / total).collect();
        self.draw(&scaled)
    }

    /// A uniform number in [0, 1) from this sampler's generator.
    pub fn uniform(&mut self) -> f64 {
        // 53 random bits give every representable f64 in [0, 1) spaced 2^-53 apart.
        (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// One draw from `probs` (summing to 1): the first token whose cumulative probability
    /// exceeds a uniform number in [0, 1). `None` when every probability is 0.
    fn draw(&mut self, probs: &[f64]) -> Option<u32> {
        let u = self.uniform();
        let mut cum = 0.0;
        let mut last_nonzero = None;
        for (i, &p) in probs.iter().enumerate() {
            if p > 0.0 {
                cum += p;
                last_nonzero = Some(i as u32);
                if u < cum {
                    return last_nonzero;
                }
            }
        }
        // Rounding can leave the total a hair under 1.
        last_nonzero
    }
}

/// A seed from the standard library's per-process random keys (drawn from the OS).
fn entropy_seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

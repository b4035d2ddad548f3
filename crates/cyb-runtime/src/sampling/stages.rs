//! The logits processors, one function per stage, each the formula of its reference:
//! Hugging Face transformers' `RepetitionPenaltyLogitsProcessor`, `TemperatureLogitsWarper`,
//! `TopKLogitsWarper`, `TopPLogitsWarper` and `MinPLogitsWarper` (with `min_tokens_to_keep =
//! 1`), and OpenAI's presence/frequency penalties. A filtered token's logit becomes `-inf`.
//!
//! Token ids outside the vocabulary (longer history than logits) are ignored, never indexed.

use std::collections::HashMap;

/// Counts of each token in `window`, in first-seen order of the distinct ids.
fn counts(window: &[u32]) -> Vec<(usize, u32)> {
    let mut seen: HashMap<u32, usize> = HashMap::new();
    let mut order = Vec::new();
    for &t in window {
        let c = seen.entry(t).or_insert(0);
        if *c == 0 {
            order.push(t);
        }
        *c += 1;
    }
    order
        .into_iter()
        .map(|t| (t as usize, seen.get(&t).copied().unwrap_or(0) as u32))
        .collect()
}

/// Repetition penalty (CTRL paper; HF and llama.cpp form): for every distinct token of
/// `window`, a positive logit is divided by `penalty`, a negative one multiplied by it.
/// `penalty == 1` changes nothing.
pub fn repetition_penalty(logits: &mut [f32], window: &[u32], penalty: f32) {
    if penalty == 1.0 {
        return;
    }
    for (t, _) in counts(window) {
        if let Some(l) = logits.get_mut(t) {
            *l = if *l < 0.0 { *l * penalty } else { *l / penalty };
        }
    }
}

/// OpenAI's penalties: `logit -= presence * (count > 0) + frequency * count` for each token
/// by its count in `window`.
pub fn presence_frequency_penalty(
    logits: &mut [f32],
    window: &[u32],
    presence: f32,
    frequency: f32,
) {
    if presence == 0.0 && frequency == 0.0 {
        return;
    }
    for (t, c) in counts(window) {
        if let Some(l) = logits.get_mut(t) {
            *l -= presence + frequency * c as f32;
        }
    }
}

/// `logits / temperature` (temperature > 0).
pub fn temperature(logits: &mut [f32], temperature: f32) {
    for l in logits.iter_mut() {
        *l /= temperature;
    }
}

/// Keeps the `k` largest logits and every logit equal to the k-th largest (ties survive, as in
/// HF's `scores < topk(scores)[-1]` test). `k == 0` or `k >= len` keeps all.
pub fn top_k(logits: &mut [f32], k: usize) {
    if k == 0 || k >= logits.len() {
        return;
    }
    let mut sorted: Vec<f32> = logits.to_vec();
    sorted.sort_unstable_by(|a, b| b.total_cmp(a));
    let Some(&kth) = sorted.get(k - 1) else {
        return;
    };
    for l in logits.iter_mut() {
        if *l < kth {
            *l = f32::NEG_INFINITY;
        }
    }
}

/// Probabilities `softmax(logits)` in f64 (`-inf` → 0). All `-inf` gives all zeros.
pub fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits
        .iter()
        .copied()
        .filter(|l| !l.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return vec![0.0; logits.len()];
    }
    let exps: Vec<f64> = logits
        .iter()
        .map(|&l| {
            if l.is_nan() {
                0.0
            } else {
                f64::from(l - max).exp()
            }
        })
        .collect();
    let sum: f64 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

/// Nucleus filter, HF form: sort ascending, drop the tokens whose cumulative probability
/// (summed from the least likely up) is `<= 1 - p`; the most likely token always stays.
/// `p >= 1` keeps all.
pub fn top_p(logits: &mut [f32], p: f32) {
    if p >= 1.0 || logits.is_empty() {
        return;
    }
    let probs = softmax(logits);
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| {
        let (la, lb) = (logits.get(a).copied(), logits.get(b).copied());
        la.unwrap_or(f32::NEG_INFINITY)
            .total_cmp(&lb.unwrap_or(f32::NEG_INFINITY))
    });
    let cut = 1.0 - f64::from(p);
    let mut cum = 0.0;
    let last = order.len() - 1;
    for (rank, &i) in order.iter().enumerate() {
        cum += probs.get(i).copied().unwrap_or(0.0);
        if cum <= cut && rank < last {
            if let Some(l) = logits.get_mut(i) {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}

/// Min-p filter: drops tokens whose probability is below `min_p` times the largest
/// probability; the most likely token always stays. `min_p <= 0` keeps all.
pub fn min_p(logits: &mut [f32], min_p: f32) {
    if min_p <= 0.0 {
        return;
    }
    let probs = softmax(logits);
    let top = probs.iter().copied().fold(0.0, f64::max);
    let threshold = f64::from(min_p) * top;
    for (l, p) in logits.iter_mut().zip(probs) {
        if p < threshold {
            *l = f32::NEG_INFINITY;
        }
    }
}

/// Index of the largest logit, the first on ties; NaN never wins. 0 for an empty slice.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_val = f32::NEG_INFINITY;
    let mut found = false;
    for (i, &l) in logits.iter().enumerate() {
        if !l.is_nan() && (!found || l > best_val) {
            best = i;
            best_val = l;
            found = true;
        }
    }
    best as u32
}

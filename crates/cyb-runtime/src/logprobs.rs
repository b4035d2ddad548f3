//! Log-probabilities of sampled tokens, for APIs that report them (OpenAI's `logprobs` and
//! `top_logprobs`).
//!
//! They come from the model's raw logits, before penalties, temperature and filters: the
//! model's own belief, which is what OpenAI and vLLM report, not the sampler's distribution.
//! A grammar constraint's mask (see `TokenConstraint`) is applied first: forbidden tokens get `-inf`.

/// The log-probability of one sampled token and of the `top_n` most likely tokens at its
/// position.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    pub token: u32,
    /// Natural log of the token's probability under `softmax(logits)`.
    pub logprob: f32,
    /// The most likely tokens with their log-probabilities, most likely first (ties by id).
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprobs {
    /// `log_softmax(logits)` at `token` and at the `top_n` largest logits. A token outside
    /// `logits` gets `-inf`; NaN logits count as `-inf`.
    pub fn from_logits(logits: &[f32], token: u32, top_n: usize) -> TokenLogprobs {
        let clean = |l: f32| if l.is_nan() { f32::NEG_INFINITY } else { l };
        let max = logits
            .iter()
            .map(|&l| clean(l))
            .fold(f32::NEG_INFINITY, f32::max);
        let log_z = if max == f32::NEG_INFINITY {
            0.0
        } else {
            let sum: f64 = logits
                .iter()
                .map(|&l| f64::from(clean(l) - max).exp())
                .sum();
            f64::from(max) + sum.ln()
        };
        let lp = |l: f32| (f64::from(clean(l)) - log_z) as f32;
        let logprob = logits
            .get(token as usize)
            .map_or(f32::NEG_INFINITY, |&l| lp(l));
        let mut order: Vec<usize> = (0..logits.len()).collect();
        let by_logit = |a: &usize, b: &usize| {
            let (la, lb) = (logits.get(*a), logits.get(*b));
            let la = la.map_or(f32::NEG_INFINITY, |&l| clean(l));
            let lb = lb.map_or(f32::NEG_INFINITY, |&l| clean(l));
            lb.total_cmp(&la).then(a.cmp(b))
        };
        let n = top_n.min(order.len());
        if n > 0 && n < order.len() {
            order.select_nth_unstable_by(n - 1, by_logit);
        }
        order.truncate(n);
        order.sort_by(by_logit);
        let top = order
            .into_iter()
            .filter_map(|i| logits.get(i).map(|&l| (i as u32, lp(l))))
            .collect();
        TokenLogprobs {
            token,
            logprob,
            top,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_of_known_logits() {
        // softmax([ln 1, ln 2, ln 3, ln 4]) = [0.1, 0.2, 0.3, 0.4]
        let logits: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0].iter().map(|x| x.ln()).collect();
        let t = TokenLogprobs::from_logits(&logits, 1, 2);
        assert!((t.logprob - 0.2f32.ln()).abs() < 1e-6);
        assert_eq!(t.top.len(), 2);
        assert_eq!(t.top[0].0, 3);
        assert!((t.top[0].1 - 0.4f32.ln()).abs() < 1e-6);
        assert_eq!(t.top[1].0, 2);
        assert!((t.top[1].1 - 0.3f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn edge_cases_do_not_panic() {
        let t = TokenLogprobs::from_logits(&[], 5, 3);
        assert_eq!(t.logprob, f32::NEG_INFINITY);
        assert!(t.top.is_empty());
        let t = TokenLogprobs::from_logits(&[f32::NAN, 0.0, f32::NEG_INFINITY], 1, 10);
        assert_eq!(t.logprob, 0.0);
        assert_eq!(t.top.len(), 3);
        assert_eq!(t.top[0], (1, 0.0));
        // Ties keep the lower id first.
        let t = TokenLogprobs::from_logits(&[1.0, 1.0, 1.0], 2, 2);
        assert_eq!(t.top.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
    }
}

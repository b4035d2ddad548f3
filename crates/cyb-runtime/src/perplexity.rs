//! Perplexity over a token sequence, computed the way llama.cpp's `llama-perplexity` does so
//! the two figures are comparable on the same file and text.
//!
//! The tokens are cut into `floor(n / ctx)` chunks of `ctx` tokens, each evaluated from an empty
//! cache (its first token replaced by BOS when the tokenizer adds one). Only the second half of
//! each chunk is scored — every scored token has at least `ctx/2` tokens of context:
//! `nll += -log softmax(logits[j])[chunk[j + 1]]` for `j` in `ctx/2 .. ctx - 1`.
//! `PPL = exp(Σ nll / count)`.

use crate::Model;
use cyb_tensor::{Error, Result};

/// The result of [`Model::perplexity`].
#[derive(Clone, Debug, PartialEq)]
pub struct PerplexityReport {
    pub ctx: usize,
    pub chunks: usize,
    pub scored_tokens: usize,
    /// Perplexity after each chunk (running estimate), as llama-perplexity prints them.
    pub running: Vec<f64>,
    pub perplexity: f64,
}

impl Model {
    /// Perplexity of `tokens` in chunks of `ctx` (see the module doc). `progress` is called
    /// after each chunk with (chunks done, chunks total, running perplexity).
    pub fn perplexity(
        &self,
        tokens: &[u32],
        ctx: usize,
        progress: &mut dyn FnMut(usize, usize, f64),
    ) -> Result<PerplexityReport> {
        self.perplexity_rows(tokens, ctx, progress, &mut |_, _| Ok(()))
    }

    /// [`Model::perplexity`], also handing every scored position's logits and the token that
    /// follows it to `row`, in order (what a KL-divergence comparison reads; see
    /// [`KldBaseWriter`](crate::KldBaseWriter)).
    pub fn perplexity_rows(
        &self,
        tokens: &[u32],
        ctx: usize,
        progress: &mut dyn FnMut(usize, usize, f64),
        row: &mut dyn FnMut(&[f32], usize) -> Result<()>,
    ) -> Result<PerplexityReport> {
        if ctx < 4 {
            return Err(Error::invalid(
                "perplexity",
                "the context must be at least 4 tokens",
            ));
        }
        let chunks = tokens.len() / ctx;
        if chunks == 0 {
            return Err(Error::invalid(
                "perplexity",
                format!(
                    "the text has {} tokens, fewer than one chunk of {ctx}; use a smaller --ctx or a longer text",
                    tokens.len()
                ),
            ));
        }
        let bos = if self.tokenizer().add_bos() {
            self.tokenizer().bos_id()
        } else {
            None
        };
        let vocab = self.config().vocab_size;
        let first = ctx / 2;
        let mut cache = self.net()?.new_cache(ctx)?;
        let (mut nll, mut count) = (0f64, 0usize);
        let mut running = Vec::with_capacity(chunks);
        for c in 0..chunks {
            let mut chunk = tokens[c * ctx..(c + 1) * ctx].to_vec();
            if let Some(b) = bos {
                chunk[0] = b;
            }
            cache.clear();
            let logits = self.net()?.forward_all(&chunk, &mut cache)?;
            if logits.len() != ctx * vocab {
                return Err(Error::shape("perplexity", &[ctx, vocab], &[logits.len()]));
            }
            for j in first..ctx - 1 {
                let logits = &logits[j * vocab..(j + 1) * vocab];
                nll += neg_log_softmax(logits, chunk[j + 1] as usize);
                row(logits, chunk[j + 1] as usize)?;
                count += 1;
            }
            let ppl = (nll / count as f64).exp();
            running.push(ppl);
            progress(c + 1, chunks, ppl);
        }
        Ok(PerplexityReport {
            ctx,
            chunks,
            scored_tokens: count,
            perplexity: (nll / count as f64).exp(),
            running,
        })
    }
}

/// `log Σ exp(row)`, in f64 with the max subtracted: `x − log_norm(row)` is `log softmax`.
pub(crate) fn log_norm(row: &[f32]) -> f64 {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
    max + sum.ln()
}

/// `-log(softmax(row)[target])`.
fn neg_log_softmax(row: &[f32], target: usize) -> f64 {
    let t = row.get(target).copied().unwrap_or(f32::NEG_INFINITY) as f64;
    log_norm(row) - t
}

//! What `cyb-llm bench` times: token ids fed straight to the network, without the tokenizer,
//! the sampler or the session's prefix bookkeeping, so that the figures measure the forward
//! pass alone (as llama-bench's do).

use crate::Model;
use cyb_models::KvCache;
use cyb_tensor::{Error, Result};

/// A bare KV cache over a [`Model`] for timing runs.
pub struct BenchSession {
    model: Model,
    cache: KvCache,
}

impl Model {
    /// A timing session whose cache holds up to `ctx` tokens.
    pub fn bench_session(&self, ctx: usize) -> Result<BenchSession> {
        // Timing past the trained context is allowed; a cache beyond memory is not.
        self.check_context(ctx, true)?;
        Ok(BenchSession {
            model: self.clone(),
            cache: self.net()?.new_cache(ctx)?,
        })
    }
}

impl BenchSession {
    /// Empties the cache, so the next feed starts from an empty context.
    pub fn clear(&mut self) {
        self.cache.clear();
    }

    /// Keeps the first `len` tokens (a context filled once, then reused by every repeat).
    pub fn truncate(&mut self, len: usize) {
        self.cache.truncate(len);
    }

    /// Tokens the cache holds.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// One forward pass over `tokens` after what the cache holds (a bulk prefill when there are
    /// several). The logits of the last token are computed, as in generation, and dropped.
    pub fn feed(&mut self, tokens: &[u32]) -> Result<()> {
        if tokens.is_empty() {
            return Err(Error::invalid("bench", "no tokens to feed"));
        }
        if tokens.len() > self.cache.remaining() {
            return Err(Error::invalid(
                "bench",
                format!(
                    "{} tokens do not fit the {} left in the context",
                    tokens.len(),
                    self.cache.remaining()
                ),
            ));
        }
        let vocab = self.model.config().vocab_size;
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::invalid(
                "bench",
                format!("token id {bad} is outside the vocabulary of {vocab}"),
            ));
        }
        self.model.net()?.forward(tokens, &mut self.cache)?;
        Ok(())
    }
}

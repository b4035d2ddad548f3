//! Sessions per model. Each request generates in its own session (its own KV cache over the
//! shared weights); finished sessions wait idle with their cache, and a new request takes the
//! idle session whose cached tokens share the longest prefix with its prompt, so a repeated
//! system prompt or the earlier turns of a chat are not computed again.

use crate::config::{ServedModel, ServerConfig};
use crate::error::ApiError;
use cyb_runtime::sampling::grammar::GrammarCompiler;
use cyb_runtime::{BatchLimits, BatchStats, Batcher, Generator, Model};
use cyb_tensor::Result;
use std::sync::{Arc, Mutex, OnceLock};

/// One served model with its idle sessions.
pub struct ModelSlot {
    pub id: String,
    pub model: Model,
    /// Context size of every session of this model.
    pub ctx: usize,
    /// Idle sessions, least recently used first.
    idle: Mutex<Vec<Generator>>,
    max_idle: usize,
    /// Sessions may run past the trained context (`ServerConfig::allow_ctx_overflow`).
    allow_overflow: bool,
    /// The vocabulary indexed for constrained decoding, built by the first request that
    /// asks for structured output.
    grammar: OnceLock<std::result::Result<Arc<GrammarCompiler>, String>>,
    /// The shared forward steps of this model's generations (continuous batching).
    batcher: Option<Arc<Batcher>>,
}

impl ModelSlot {
    /// The slot of `served`; a generative model's context is checked here, before any request
    /// (see `Model::check_context`).
    pub fn new(
        served: ServedModel,
        config: &ServerConfig,
    ) -> std::result::Result<ModelSlot, String> {
        let allow_overflow = config.allow_ctx_overflow;
        let max_idle = config.parallel;
        let ctx = config
            .ctx
            .unwrap_or_else(|| served.model.context_length().min(4096));
        let generative = !served.model.is_encoder() && !served.model.is_speech();
        let err = |e: cyb_tensor::Error| format!("model {:?}: {e}", served.id);
        let mut batcher = None;
        if generative {
            served
                .model
                .check_context(ctx, allow_overflow)
                .map_err(err)?;
            if config.batch_tokens > 0 && config.parallel > 1 {
                let limits = BatchLimits {
                    step_tokens: config.batch_tokens,
                    max_seqs: config.parallel,
                    ..BatchLimits::default()
                };
                batcher = Some(Batcher::new(served.model.clone(), limits).map_err(err)?);
            }
        }
        Ok(ModelSlot {
            id: served.id,
            model: served.model,
            ctx,
            idle: Mutex::new(Vec::new()),
            max_idle: max_idle.max(1),
            allow_overflow,
            grammar: OnceLock::new(),
            batcher,
        })
    }

    /// A session for `prompt`: the idle one with the longest cached prefix of it, a new one
    /// when none shares a prefix and the pool has room, else the least recently used.
    pub fn checkout(&self, prompt: &[u32]) -> Result<Generator> {
        let taken = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let best = idle
                .iter()
                .enumerate()
                .map(|(i, g)| (common_prefix(g.tokens(), prompt), i))
                .max_by_key(|&(common, i)| (common, i));
            match best {
                Some((common, i)) if common > 0 || idle.len() >= self.max_idle => {
                    Some(idle.remove(i))
                }
                _ => None,
            }
        };
        let mut session = match taken {
            Some(g) => g,
            None if self.allow_overflow => self.model.generator_beyond_context(self.ctx)?,
            None => self.model.generator(Some(self.ctx))?,
        };
        session.set_batcher(self.batcher.clone())?;
        Ok(session)
    }

    /// Counts of the shared steps (`None`: this model's generations run on their own).
    pub fn batch_stats(&self) -> Option<BatchStats> {
        self.batcher.as_ref().map(|b| b.stats())
    }

    /// Returns a session to the pool; beyond `max_idle` the least recently used is freed.
    pub fn checkin(&self, session: Generator) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.push(session);
        while idle.len() > self.max_idle {
            idle.remove(0);
        }
    }

    /// The model's grammar compiler (blocking: indexes the vocabulary on first use).
    pub fn grammar_compiler(&self) -> std::result::Result<Arc<GrammarCompiler>, ApiError> {
        self.grammar
            .get_or_init(|| {
                GrammarCompiler::new(self.model.tokenizer())
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|e| ApiError::server(format!("structured output is unavailable: {e}")))
    }

    pub fn idle_sessions(&self) -> usize {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

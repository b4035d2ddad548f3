//! Sessions per model. Each request generates in its own session (its own KV cache over the
//! shared weights); finished sessions wait idle with their cache, and a new request takes the
//! idle session whose cached tokens share the longest prefix with its prompt, so a repeated
//! system prompt or the earlier turns of a chat are not computed again. An idle session has
//! an id (unique over the server) until a request takes it; `/slots` saves it to disk and
//! restores it from there.

use crate::config::{ServedModel, ServerConfig};
use crate::error::ApiError;
use cyb_runtime::sampling::grammar::GrammarCompiler;
use cyb_runtime::{BatchLimits, BatchStats, Batcher, Drafter, Generator, Model};
use cyb_tensor::Result;
use std::sync::{Arc, Mutex, OnceLock};

/// One served model with its idle sessions.
pub struct ModelSlot {
    pub id: String,
    pub model: Model,
    /// Context size of every session of this model.
    pub ctx: usize,
    /// Idle sessions with their ids, least recently used first.
    idle: Mutex<Vec<(u64, Generator)>>,
    max_idle: usize,
    /// Sessions may run past the trained context (`ServerConfig::allow_ctx_overflow`).
    allow_overflow: bool,
    /// The vocabulary indexed for constrained decoding, built by the first request that
    /// asks for structured output.
    grammar: OnceLock<std::result::Result<Arc<GrammarCompiler>, String>>,
    /// The shared forward steps of this model's generations (continuous batching).
    batcher: Option<Arc<Batcher>>,
    /// Speculative decoding: what proposes tokens, and how many a step.
    draft: Option<(Drafter, usize)>,
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
        let draft = config.draft.clone().filter(|_| generative);
        if generative {
            served
                .model
                .check_context(ctx, allow_overflow)
                .map_err(err)?;
            let batching = config.batch_tokens > 0 && config.parallel > 1;
            if let Some((drafter, max)) = &draft {
                if batching {
                    return Err(format!(
                        "model {:?}: speculative decoding runs generations one at a time; \
                         turn batching off (--batch-tokens 0) or serve one at a time \
                         (--parallel 1)",
                        served.id
                    ));
                }
                // The draft must fit this model (same vocabulary, a valid count).
                let mut probe = served.model.generator(Some(ctx.min(16))).map_err(err)?;
                drafter.apply(&mut probe, *max).map_err(err)?;
            }
            if batching {
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
            draft,
        })
    }

    /// A session for `prompt` under the LoRA scales `lora`: the idle one with the longest
    /// cached prefix of it made with the same scales, a new one when none shares a prefix and
    /// the pool has room, else the least recently used.
    pub fn checkout(&self, prompt: &[u32], lora: Option<Vec<f32>>) -> Result<Generator> {
        let taken = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let best = idle
                .iter()
                .enumerate()
                .map(|(i, (_, g))| {
                    let same = g.lora_scales() == lora.as_deref();
                    (
                        if same {
                            common_prefix(&g.prompt_key(), prompt)
                        } else {
                            0
                        },
                        i,
                    )
                })
                .max_by_key(|&(common, i)| (common, i));
            match best {
                Some((common, i)) if common > 0 || idle.len() >= self.max_idle => {
                    Some(idle.remove(i).1)
                }
                _ => None,
            }
        };
        let mut session = match taken {
            Some(g) => g,
            None => self.new_session()?,
        };
        session.set_batcher(self.batcher.clone())?;
        session.set_lora_scales(lora);
        Ok(session)
    }

    /// Counts of the shared steps (`None`: this model's generations run on their own).
    pub fn batch_stats(&self) -> Option<BatchStats> {
        self.batcher.as_ref().map(|b| b.stats())
    }

    /// An empty session of this model's context (with the server's draft, if any).
    pub fn new_session(&self) -> Result<Generator> {
        let mut session = if self.allow_overflow {
            self.model.generator_beyond_context(self.ctx)?
        } else {
            self.model.generator(Some(self.ctx))?
        };
        if let Some((drafter, max)) = &self.draft {
            drafter.apply(&mut session, *max)?;
        }
        Ok(session)
    }

    /// Returns a session to the pool under a new id; beyond `max_idle` the least recently
    /// used is freed.
    pub fn checkin(&self, session: Generator) {
        self.checkin_as(next_session_id(), session);
    }

    /// Returns a session to the pool as `id` (replacing an idle session of that id).
    pub fn checkin_as(&self, id: u64, session: Generator) {
        let mut idle = self.lock_idle();
        idle.retain(|(i, _)| *i != id);
        idle.push((id, session));
        while idle.len() > self.max_idle {
            idle.remove(0);
        }
    }

    /// Takes the idle session `id` out of the pool (to save or erase it).
    pub fn take_idle(&self, id: u64) -> Option<Generator> {
        let mut idle = self.lock_idle();
        let i = idle.iter().position(|(i, _)| *i == id)?;
        Some(idle.remove(i).1)
    }

    /// The idle sessions' ids and token counts, least recently used first.
    pub fn idle_list(&self) -> Vec<(u64, usize)> {
        self.lock_idle()
            .iter()
            .map(|(id, g)| (*id, g.tokens().len()))
            .collect()
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Generator)>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
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
        self.lock_idle().len()
    }
}

/// Session ids, unique over the server's models (`GET /slots`).
pub fn next_session_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

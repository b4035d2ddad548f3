//! Continuous batching: the sessions of one model that generate at the same time advance
//! together, one forward step over all of them.
//!
//! Decoding is bound by memory bandwidth: a step of one token reads every weight once, and a
//! step of sixteen sequences reads them once too. A [`Batcher`] collects the forward calls of
//! the sessions that use it (each still runs on its own thread, samples on its own and keeps
//! its own KV cache) and runs them as one [`LlamaModel::forward_batch`]. No thread of its own:
//! a caller whose work is waiting and finds no step running becomes the step's leader, takes
//! what is queued, runs it, hands each caller its logits and goes back to being a caller.
//!
//! - A step takes every waiting decode (one token each) and then prompt chunks up to
//!   [`BatchLimits::step_tokens`] tokens in all: a long prompt is prefilled in chunks between
//!   the others' decode steps instead of stalling them, and a new request joins at the next
//!   step.
//! - Before running, a leader waits (at most [`BatchLimits::gather_wait`]) until every member
//!   that is generating has its next step queued, so members that just sampled are not left
//!   for the step after. A session alone never waits.
//! - A session that finishes leaves at once ([`Member`] is dropped).

use crate::Model;
use cyb_models::{BatchSeq, KvCache};
use cyb_tensor::{Error, Result};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How much one step may take on.
#[derive(Clone, Copy, Debug)]
pub struct BatchLimits {
    /// Tokens in one step, all sequences together (decodes count one each; prompts are
    /// chunked to fit). At least 1.
    pub step_tokens: usize,
    /// Sequences in one step.
    pub max_seqs: usize,
    /// Longest a leader waits for the other members' next steps before running without them.
    pub gather_wait: Duration,
}

impl Default for BatchLimits {
    fn default() -> BatchLimits {
        BatchLimits {
            step_tokens: 512,
            max_seqs: 64,
            gather_wait: Duration::from_millis(2),
        }
    }
}

/// Counts since the batcher was made (for `/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchStats {
    /// Forward steps run.
    pub steps: u64,
    /// Sequence-steps run (a step of four sequences counts four).
    pub sequences: u64,
    /// Tokens fed.
    pub tokens: u64,
    /// The most sequences one step took.
    pub max_seqs: usize,
}

impl BatchStats {
    /// Sequences per step on average.
    pub fn mean_seqs(&self) -> f64 {
        if self.steps == 0 {
            return 0.0;
        }
        self.sequences as f64 / self.steps as f64
    }
}

/// The shared step queue of one model's sessions.
pub struct Batcher {
    model: Model,
    limits: BatchLimits,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// Members generating now.
    members: usize,
    next_id: u64,
    queued: VecDeque<Work>,
    done: HashMap<u64, Finished>,
    leading: bool,
    stats: BatchStats,
}

/// A forward call waiting for a step: the tokens still to feed and the session's cache, lent
/// to the batcher until the call returns.
struct Work {
    id: u64,
    tokens: Vec<u32>,
    fed: usize,
    cache: KvCache,
}

struct Finished {
    cache: KvCache,
    logits: Result<Vec<f32>>,
}

/// A session's membership: while it lives, leaders wait for this session's next step.
pub struct Member {
    batcher: Arc<Batcher>,
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut s = self.batcher.lock();
        s.members = s.members.saturating_sub(1);
        drop(s);
        self.batcher.wake.notify_all();
    }
}

impl Batcher {
    /// A batcher for the sessions of `model` (a LlamaStyle generator).
    pub fn new(model: Model, limits: BatchLimits) -> Result<Arc<Batcher>> {
        model.net()?;
        if limits.step_tokens == 0 || limits.max_seqs == 0 {
            return Err(Error::InvalidConfig {
                field: "batch".into(),
                reason: "a step must take at least one token and one sequence".into(),
            });
        }
        Ok(Arc::new(Batcher {
            model,
            limits,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        }))
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn stats(&self) -> BatchStats {
        self.lock().stats
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Joins the sessions that generate now (until the returned member is dropped).
    pub fn join(self: &Arc<Self>) -> Member {
        self.lock().members += 1;
        Member {
            batcher: self.clone(),
        }
    }

    /// Feeds `tokens` after what `cache` holds, in a step shared with the other members;
    /// returns the logits of the last token, as `LlamaModel::forward` does.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(Error::invalid("forward", "no tokens to process"));
        }
        let mut s = self.lock();
        let id = s.next_id;
        s.next_id += 1;
        s.queued.push_back(Work {
            id,
            tokens: tokens.to_vec(),
            fed: 0,
            cache: std::mem::take(cache),
        });
        self.wake.notify_all();
        loop {
            if let Some(f) = s.done.remove(&id) {
                *cache = f.cache;
                return f.logits;
            }
            if !s.leading && !s.queued.is_empty() {
                s = self.lead(s);
                continue;
            }
            s = self.wake.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Runs one step as its leader: gathers, takes the step's work, runs it unlocked, files
    /// the results. Returns the lock again.
    fn lead<'a>(&'a self, mut s: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        s.leading = true;
        let deadline = Instant::now() + self.limits.gather_wait;
        while s.queued.len() < s.members.min(self.limits.max_seqs) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s = self
                .wake
                .wait_timeout(s, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let mut step = self.take_step(&mut s);
        drop(s);
        let result = self.run(&mut step);
        let mut s = self.lock();
        let mut fed = 0;
        let n = step.len();
        match result {
            Ok(logits) => {
                let mut unfinished = Vec::new();
                for ((mut w, chunk), logits) in step.into_iter().zip(logits) {
                    fed += chunk;
                    w.fed += chunk;
                    if w.fed < w.tokens.len() {
                        unfinished.push(w);
                        continue;
                    }
                    let logits = Ok(logits);
                    s.done.insert(
                        w.id,
                        Finished {
                            cache: w.cache,
                            logits,
                        },
                    );
                }
                // Prompts fed in part: the rest goes in later steps, ahead of newer work.
                for w in unfinished.into_iter().rev() {
                    s.queued.push_front(w);
                }
            }
            Err(e) => {
                // Every sequence of the step hears the error (a cache is left as it was:
                // a step commits only once it has run).
                let reason = e.to_string();
                for (w, _) in step {
                    let logits = Err(Error::invalid("batched step", reason.clone()));
                    s.done.insert(
                        w.id,
                        Finished {
                            cache: w.cache,
                            logits,
                        },
                    );
                }
            }
        }
        s.stats.steps += 1;
        s.stats.sequences += n as u64;
        s.stats.tokens += fed as u64;
        s.stats.max_seqs = s.stats.max_seqs.max(n);
        s.leading = false;
        self.wake.notify_all();
        s
    }

    /// The work of the next step, each with the tokens it feeds now: every queued decode
    /// first, then prompt chunks, oldest first, within the step's token budget.
    fn take_step(&self, s: &mut State) -> Vec<(Work, usize)> {
        let (mut budget, mut step) = (self.limits.step_tokens, Vec::new());
        let mut rest = VecDeque::new();
        let decodes_first = s
            .queued
            .drain(..)
            .partition::<Vec<Work>, _>(|w| w.tokens.len() - w.fed == 1);
        for w in decodes_first.0.into_iter().chain(decodes_first.1) {
            let want = w.tokens.len() - w.fed;
            let chunk = want.min(budget);
            if chunk == 0 || step.len() == self.limits.max_seqs {
                rest.push_back(w);
                continue;
            }
            budget -= chunk;
            step.push((w, chunk));
        }
        s.queued = rest;
        step
    }

    /// One forward step over `step`; the logits of each sequence's last fed token.
    fn run(&self, step: &mut [(Work, usize)]) -> Result<Vec<Vec<f32>>> {
        let net = self.model.net()?;
        let mut seqs: Vec<BatchSeq<'_>> = step
            .iter_mut()
            .map(|(w, chunk)| BatchSeq {
                tokens: &w.tokens[w.fed..w.fed + *chunk],
                cache: &mut w.cache,
            })
            .collect();
        net.forward_batch(&mut seqs)
    }
}

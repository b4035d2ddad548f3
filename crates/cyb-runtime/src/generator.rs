//! `Generator`: one session (its own KV cache) that turns prompts into streamed tokens.
//!
//! The session remembers which tokens its cache holds. A new prompt that starts with those
//! tokens (the next turn of a chat, a repeated system prompt) only prefills what is new.

use crate::batch::{Batcher, Member};
use crate::{Model, Sampler, SamplingParams, StopMatcher, TokenConstraint, TokenLogprobs};
use cyb_models::KvCache;
use cyb_tensor::{Error, Result};
use std::sync::Arc;
use std::time::Instant;

/// Timings of one generation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationMetrics {
    pub load_ms: f64,
    /// Prompt tokens in the request.
    pub prompt_tokens: usize,
    /// Prompt tokens actually prefilled (the rest came from the session's cache).
    pub prefilled_tokens: usize,
    pub generated_tokens: usize,
    /// From the start of `generate` to the first sampled token (prefill included).
    pub time_to_first_token_ms: f64,
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

impl GenerationMetrics {
    /// Prefilled tokens per second.
    pub fn prefill_tps(&self) -> f64 {
        rate(self.prefilled_tokens, self.prefill_ms)
    }

    /// Generated tokens per second over the decode steps (the first token comes from prefill).
    pub fn decode_tps(&self) -> f64 {
        rate(self.generated_tokens.saturating_sub(1), self.decode_ms)
    }
}

fn rate(n: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        n as f64 * 1e3 / ms
    } else {
        0.0
    }
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens` reached or the context is full.
    Length,
}

/// A piece of streamed output: the sampled token (none for the final flush) and the text it
/// completed (possibly empty while a character or a possible stop string is incomplete).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub token: Option<u32>,
    pub text: String,
}

/// A session over a [`Model`].
pub struct Generator {
    model: Model,
    state: Session,
    /// Steps go through this shared queue (continuous batching) when set.
    batcher: Option<Arc<Batcher>>,
}

struct Session {
    cache: KvCache,
    /// The tokens whose keys and values the cache holds, in order.
    tokens: Vec<u32>,
}

impl Generator {
    pub(crate) fn new(model: Model, ctx: usize) -> Result<Generator> {
        let cache = model.net()?.new_cache(ctx)?;
        Ok(Generator {
            model,
            state: Session {
                cache,
                tokens: Vec::new(),
            },
            batcher: None,
        })
    }

    /// Runs this session's steps through `batcher`, together with the other sessions that use
    /// it (`None`: on its own, the default). The batcher must be for this session's model.
    pub fn set_batcher(&mut self, batcher: Option<Arc<Batcher>>) -> Result<()> {
        if let Some(b) = &batcher {
            if !b.model().same_as(&self.model) {
                return Err(Error::invalid(
                    "generator",
                    "the batcher is for another model",
                ));
            }
        }
        self.batcher = batcher;
        Ok(())
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Tokens the session's cache holds.
    pub fn tokens(&self) -> &[u32] {
        &self.state.tokens
    }

    /// The session's context size in tokens.
    pub fn capacity(&self) -> usize {
        self.state.cache.capacity()
    }

    /// Forgets the conversation.
    pub fn reset(&mut self) {
        self.state.cache.clear();
        self.state.tokens.clear();
    }

    /// Feeds `prompt` (token ids) and returns the stream of generated pieces.
    pub fn generate(&mut self, prompt: &[u32], params: SamplingParams) -> Result<Generation<'_>> {
        let cap = self.state.cache.capacity();
        if prompt.is_empty() {
            return Err(Error::invalid("generate", "the prompt has no tokens"));
        }
        if prompt.len() > cap {
            return Err(Error::invalid(
                "generate",
                format!(
                    "the prompt has {} tokens but the context holds {cap}; use a larger --ctx or a shorter prompt",
                    prompt.len()
                ),
            ));
        }
        let t0 = Instant::now();
        let state = &mut self.state;
        // Reuse the cached prefix; at least the last prompt token is fed again so its logits
        // come out.
        let common = state
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len() - 1);
        state.cache.truncate(common);
        state.tokens.truncate(common);
        let fresh = &prompt[common..];
        let member = self.batcher.as_ref().map(Batcher::join);
        let logits = match &self.batcher {
            Some(b) => b.forward(fresh, &mut state.cache)?,
            None => self.model.net()?.forward(fresh, &mut state.cache)?,
        };
        state.tokens.extend_from_slice(fresh);
        let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
        let metrics = GenerationMetrics {
            load_ms: self.model.load_ms(),
            prompt_tokens: prompt.len(),
            prefilled_tokens: fresh.len(),
            prefill_ms,
            ..GenerationMetrics::default()
        };
        let Generator {
            model,
            state,
            batcher,
        } = self;
        Ok(Generation {
            model,
            state,
            batcher: batcher.as_deref(),
            member,
            decoder: model.tokenizer().incremental_decoder(false),
            stop: StopMatcher::new(&params.stop),
            max_tokens: params.max_tokens,
            ignore_eos: params.ignore_eos,
            sampler: Sampler::new(params),
            logits: Some(logits),
            unfed: None,
            started: t0,
            metrics,
            finish: None,
            flushed: false,
            logprobs_top: None,
            last_logprobs: None,
            constraint: None,
        })
    }
}

/// What a decode step produced: logits to sample from, or the token the model already picked.
enum Next {
    Logits(Vec<f32>),
    Token(u32),
}

/// The token stream of one `generate` call. Iterate to pull tokens; dropping it early leaves
/// the session consistent (the cache holds exactly the tokens it processed).
pub struct Generation<'g> {
    model: &'g Model,
    state: &'g mut Session,
    batcher: Option<&'g Batcher>,
    /// Held while generating: leaders of batched steps wait for this session's next one.
    member: Option<Member>,
    decoder: crate::IncrementalDecoder<'g>,
    stop: StopMatcher,
    sampler: Sampler,
    max_tokens: Option<usize>,
    ignore_eos: bool,
    /// Logits for the next draw, when already computed.
    logits: Option<Vec<f32>>,
    /// The last sampled token, not yet fed to the model.
    unfed: Option<u32>,
    started: Instant,
    metrics: GenerationMetrics,
    finish: Option<FinishReason>,
    flushed: bool,
    /// `Some(n)`: record the sampled token's log-probability and the `n` most likely tokens.
    logprobs_top: Option<usize>,
    last_logprobs: Option<TokenLogprobs>,
    constraint: Option<Box<dyn TokenConstraint + 'g>>,
}

impl<'g> Generation<'g> {
    pub fn metrics(&self) -> &GenerationMetrics {
        &self.metrics
    }

    /// Why generation ended, once it has.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish
    }

    /// Records, for each sampled token, its log-probability and the `top_n` most likely
    /// tokens at its position (see [`TokenLogprobs`]); read them with `last_logprobs`.
    pub fn with_logprobs(mut self, top_n: usize) -> Self {
        self.logprobs_top = Some(top_n);
        self
    }

    /// The log-probabilities of the token of the last piece that carried one (set only after
    /// `with_logprobs`).
    pub fn last_logprobs(&self) -> Option<&TokenLogprobs> {
        self.last_logprobs.as_ref()
    }

    /// Only tokens `constraint` allows are sampled; generation stops when it is finished.
    pub fn with_constraint(mut self, constraint: Box<dyn TokenConstraint + 'g>) -> Self {
        self.constraint = Some(constraint);
        self
    }

    fn step(&mut self) -> Result<Option<Piece>> {
        if self.metrics.generated_tokens >= self.max_tokens.unwrap_or(usize::MAX) {
            self.finish = Some(FinishReason::Length);
            return Ok(None);
        }
        let next = match self.logits.take() {
            Some(l) => Next::Logits(l),
            None => {
                let Some(t) = self.unfed.take() else {
                    return Ok(None);
                };
                if self.state.cache.remaining() == 0 {
                    self.finish = Some(FinishReason::Length);
                    return Ok(None);
                }
                let t0 = Instant::now();
                let net = self.model.net()?;
                let cache = &mut self.state.cache;
                // Plain greedy decoding needs only the index of the largest logit: on a device
                // backend the model picks it there and reads back one index, not the logits.
                let device_pick = self.sampler.is_plain_greedy()
                    && self.constraint.is_none()
                    && self.logprobs_top.is_none()
                    && !net.dispatcher().primary().host_memory();
                let next = match self.batcher {
                    Some(b) => Next::Logits(b.forward(&[t], cache)?),
                    None if device_pick => Next::Token(net.forward_argmax(&[t], cache)?),
                    None => Next::Logits(net.forward(&[t], cache)?),
                };
                self.state.tokens.push(t);
                self.metrics.decode_ms += t0.elapsed().as_secs_f64() * 1e3;
                next
            }
        };
        let token = match next {
            Next::Token(t) => t,
            Next::Logits(mut logits) => {
                if logits.iter().any(|x| x.is_nan() || *x == f32::INFINITY) {
                    return Err(Error::InvalidArgument {
                        op: "generate".into(),
                        reason: "the model produced non-finite logits (NaN or +inf): its \
                                 weights or settings are broken"
                            .into(),
                    });
                }
                if let Some(c) = self.constraint.as_mut() {
                    c.mask(&mut logits)?;
                }
                let raw = self.logprobs_top.map(|n| (n, logits.clone()));
                let token = self.sampler.sample(&mut logits, &self.state.tokens);
                if let Some((n, raw)) = raw {
                    self.last_logprobs = Some(TokenLogprobs::from_logits(&raw, token, n));
                }
                token
            }
        };
        if let Some(c) = self.constraint.as_mut() {
            c.accept(token)?;
        }
        if self.metrics.generated_tokens == 0 {
            self.metrics.time_to_first_token_ms = self.started.elapsed().as_secs_f64() * 1e3;
        }
        if !self.ignore_eos && self.model.tokenizer().eos_ids().contains(&token) {
            self.finish = Some(FinishReason::Stop);
            return Ok(None);
        }
        self.metrics.generated_tokens += 1;
        self.unfed = Some(token);
        let text = self.decoder.push(token)?;
        let out = self.stop.push(&text);
        let grammar_done = self.constraint.as_ref().is_some_and(|c| c.is_finished());
        if out.stopped || grammar_done {
            self.finish = Some(FinishReason::Stop);
        }
        Ok(Some(Piece {
            token: Some(token),
            text: out.text,
        }))
    }

    /// Text held back at the end (an incomplete character, a prefix of a stop string that
    /// never completed).
    fn flush(&mut self) -> Result<Option<Piece>> {
        self.flushed = true;
        let mut text = String::new();
        if !self.stop.stopped() {
            let tail = self.decoder.finish()?;
            text.push_str(&self.stop.push(&tail).text);
            if !self.stop.stopped() {
                text.push_str(&self.stop.finish());
            }
        }
        Ok((!text.is_empty()).then_some(Piece { token: None, text }))
    }
}

impl Iterator for Generation<'_> {
    type Item = Result<Piece>;

    fn next(&mut self) -> Option<Result<Piece>> {
        if self.finish.is_none() {
            match self.step() {
                Ok(Some(p)) => return Some(Ok(p)),
                Ok(None) => {}
                Err(e) => {
                    self.finish = Some(FinishReason::Stop);
                    self.member = None;
                    return Some(Err(e));
                }
            }
        }
        // Finished: batched steps no longer wait for this session.
        self.member = None;
        if self.flushed {
            return None;
        }
        self.flush().transpose()
    }
}

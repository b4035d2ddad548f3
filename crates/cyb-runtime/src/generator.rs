//! `Generator`: one session (its own KV cache) that turns prompts into streamed tokens.
//!
//! The session remembers which tokens its cache holds. A new prompt that starts with those
//! tokens (the next turn of a chat, a repeated system prompt) only prefills what is new.

use crate::batch::{Batcher, Member};
use crate::vision::vlm::ImageSpan;
use crate::{Model, Sampler, SamplingParams, StopMatcher, TokenConstraint, TokenLogprobs};
use cyb_media::image::RgbImage;
use cyb_models::KvCache;
use cyb_tensor::{Error, Result, Tensor};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::path::Path;
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
    /// Tokens a draft model proposed (speculative decoding), and how many of them the model
    /// accepted.
    pub draft_proposed: usize,
    pub draft_accepted: usize,
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
    /// A smaller model that proposes tokens for this one to verify, when set.
    draft: Option<Draft>,
}

/// The draft of speculative decoding: what proposes tokens, and how many it proposes a step.
struct Draft {
    source: DraftSource,
    max: usize,
}

enum DraftSource {
    /// A model with the same vocabulary and its own cache.
    Model {
        model: Model,
        cache: KvCache,
        /// The tokens its cache holds.
        tokens: Vec<u32>,
    },
    /// Prompt lookup: the tokens that followed the latest earlier occurrence of the last
    /// n-gram (n = [`LOOKUP_NGRAM`] down to [`LOOKUP_NGRAM_MIN`]) of the prompt and the text
    /// so far.
    Lookup,
}

/// The longest n-gram prompt lookup matches.
pub const LOOKUP_NGRAM: usize = 3;
/// The shortest: a single repeated token predicts too little to pay for scoring proposals.
pub const LOOKUP_NGRAM_MIN: usize = 2;

/// The first bytes of a saved session.
const SESSION_MAGIC: &[u8; 8] = b"CYBSESS1";
/// Bytes of a saved session's header: the magic, four u32, two u64.
const SESSION_HEADER: usize = 8 + 16 + 16;

/// Most tokens a draft may propose in one step.
pub const MAX_DRAFT_TOKENS: usize = 64;

struct Session {
    cache: KvCache,
    /// The tokens whose keys and values the cache holds, in order.
    tokens: Vec<u32>,
    /// Where images' tokens are among `tokens`, and which images they were.
    images: Vec<ImageSpan>,
    /// For a vision-language model: the key of the last prompt as it was given (one
    /// fingerprint per image placeholder, `Model::prompt_key`) and its length once expanded.
    given_prompt: Option<(Vec<u32>, usize)>,
}

impl Generator {
    pub(crate) fn new(model: Model, ctx: usize) -> Result<Generator> {
        let cache = model.net()?.new_cache(ctx)?;
        Ok(Generator {
            model,
            state: Session {
                cache,
                tokens: Vec::new(),
                images: Vec::new(),
                given_prompt: None,
            },
            batcher: None,
            draft: None,
        })
    }

    /// Decodes speculatively with `draft` (`None`: off, the default): each step the draft
    /// proposes up to `max` tokens and this session's model checks them all in one forward,
    /// keeping those its own sampling would have produced (the speculative sampling rule, so
    /// the text follows this model's distribution; greedy gives its greedy tokens). The draft
    /// must share this model's vocabulary token for token. Not used with a batcher or a token
    /// constraint (those steps go one token at a time).
    pub fn set_draft(&mut self, draft: Option<Model>, max: usize) -> Result<()> {
        let Some(model) = draft else {
            self.draft = None;
            return Ok(());
        };
        check_draft_max(max)?;
        let (ours, theirs) = (self.model.tokenizer(), model.tokenizer());
        if ours.vocab_size() != theirs.vocab_size() {
            return Err(Error::invalid(
                "draft",
                format!(
                    "the draft model's vocabulary has {} tokens, the model's {}",
                    theirs.vocab_size(),
                    ours.vocab_size()
                ),
            ));
        }
        let vocab = u32::try_from(ours.vocab_size()).unwrap_or(u32::MAX);
        if let Some(id) = (0..vocab).find(|&id| ours.token_text(id) != theirs.token_text(id)) {
            return Err(Error::invalid(
                "draft",
                format!(
                    "token {id} is {:?} in the model's vocabulary and {:?} in the draft's",
                    ours.token_text(id).unwrap_or_default(),
                    theirs.token_text(id).unwrap_or_default()
                ),
            ));
        }
        let cache = model.net()?.new_cache(self.capacity())?;
        self.draft = Some(Draft {
            source: DraftSource::Model {
                model,
                cache,
                tokens: Vec::new(),
            },
            max,
        });
        Ok(())
    }

    /// Decodes speculatively with prompt lookup (`None`: off): each step proposes up to `max`
    /// tokens copied from where the last few tokens occurred before in the prompt or the text
    /// so far, checked as a draft model's proposals are. No second model: it gains where the
    /// answer repeats its input (code edits, summaries that quote, extraction). Replaces a
    /// draft model.
    pub fn set_prompt_lookup(&mut self, max: Option<usize>) -> Result<()> {
        let Some(max) = max else {
            self.draft = None;
            return Ok(());
        };
        check_draft_max(max)?;
        self.draft = Some(Draft {
            source: DraftSource::Lookup,
            max,
        });
        Ok(())
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

    /// What a new prompt's [`Model::prompt_key`] is compared with to find the session that
    /// holds most of it: the tokens, or for a vision-language model the key of the last prompt
    /// as it was given (each placeholder standing for its image's fingerprint, not yet
    /// expanded) and the tokens generated after it.
    pub fn prompt_key(&self) -> Cow<'_, [u32]> {
        match &self.state.given_prompt {
            Some((given, expanded)) => {
                let after = self.state.tokens.get(*expanded..).unwrap_or_default();
                Cow::Owned([given.as_slice(), after].concat())
            }
            None => Cow::Borrowed(&self.state.tokens),
        }
    }

    /// The session's context size in tokens.
    pub fn capacity(&self) -> usize {
        self.state.cache.capacity()
    }

    /// Saves the session (the tokens its cache holds, their keys and values, and `note`, any
    /// bytes the caller wants back, such as a chat's messages) to `path`, through a temporary
    /// file renamed into place. A session on a device backend is not saved (an error).
    ///
    /// Layout (little-endian): the 8 bytes `CYBSESS1`; u32 layers, KV heads, head size and
    /// vocabulary size; u64 token count and note length; the token ids (u32); the note; then
    /// per layer the keys and the values, f32 `[tokens, kv_heads, head_dim]`.
    pub fn save_session(&self, path: &Path, note: &[u8]) -> Result<()> {
        let io = |e| Error::Io {
            path: path.into(),
            source: e,
        };
        let tmp = path.with_extension("tmp-session");
        let file = std::fs::File::create(&tmp).map_err(io)?;
        let mut out = std::io::BufWriter::new(file);
        let mut head = Vec::with_capacity(SESSION_HEADER);
        head.extend_from_slice(SESSION_MAGIC);
        for v in self.session_shape() {
            head.extend_from_slice(&v.to_le_bytes());
        }
        head.extend_from_slice(&(self.state.tokens.len() as u64).to_le_bytes());
        head.extend_from_slice(&(note.len() as u64).to_le_bytes());
        let written = (|| {
            out.write_all(&head).map_err(io)?;
            for t in &self.state.tokens {
                out.write_all(&t.to_le_bytes()).map_err(io)?;
            }
            out.write_all(note).map_err(io)?;
            self.state.cache.write_rows(&mut out, path)?;
            out.flush().map_err(io)
        })();
        drop(out);
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Restores a session [`save_session`](Generator::save_session) wrote, for this model (the
    /// same layers, KV heads, head size and vocabulary; a file for another shape, one that is
    /// cut short or longer than its header says, or more tokens than this session's context
    /// are refused naming the field) and returns its note. On an error the session is empty.
    pub fn load_session(&mut self, path: &Path) -> Result<Vec<u8>> {
        self.reset();
        let loaded = self.read_session(path);
        if loaded.is_err() {
            self.reset();
        }
        loaded
    }

    fn session_shape(&self) -> [u32; 4] {
        let c = &self.state.cache;
        let vocab = self.model.tokenizer().vocab_size();
        [c.num_layers(), c.kv_heads(), c.head_dim(), vocab]
            .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
    }

    fn read_session(&mut self, path: &Path) -> Result<Vec<u8>> {
        let io = |e| Error::Io {
            path: path.into(),
            source: e,
        };
        let bad = |reason: String| Error::InvalidConfig {
            field: format!("session file {}", path.display()),
            reason,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let size = file.metadata().map_err(io)?.len();
        let mut input = std::io::BufReader::new(file);
        let mut head = [0u8; SESSION_HEADER];
        input
            .read_exact(&mut head)
            .map_err(|_| bad(format!("{size} bytes is shorter than its header")))?;
        if &head[..8] != SESSION_MAGIC {
            return Err(bad("it does not start with CYBSESS1".into()));
        }
        let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().unwrap_or([0; 8]));
        let names = ["layers", "KV heads", "head size", "vocabulary size"];
        for (k, (want, name)) in self.session_shape().into_iter().zip(names).enumerate() {
            let got = u32_at(8 + 4 * k);
            if got != want {
                return Err(bad(format!(
                    "it was saved for a model with {got} {name}, this one has {want}"
                )));
            }
        }
        let (tokens, note_len) = (u64_at(24), u64_at(32));
        let cap = self.state.cache.capacity() as u64;
        if tokens > cap {
            return Err(bad(format!(
                "it holds {tokens} tokens, more than this session's context of {cap}"
            )));
        }
        let c = &self.state.cache;
        let rows = 2 * (c.num_layers() * c.kv_heads() * c.head_dim()) as u64 * 4 * tokens;
        let want = (SESSION_HEADER as u64)
            .checked_add(4 * tokens)
            .and_then(|n| n.checked_add(note_len))
            .and_then(|n| n.checked_add(rows));
        if want != Some(size) {
            return Err(bad(format!(
                "it is {size} bytes, its header describes {}",
                want.map_or("more than 2^64".to_string(), |w| w.to_string())
            )));
        }
        let mut ids = vec![0u8; 4 * tokens as usize];
        input.read_exact(&mut ids).map_err(io)?;
        let ids: Vec<u32> = ids
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        self.model
            .tokenizer()
            .check_ids(&ids)
            .map_err(|e| bad(e.to_string()))?;
        let mut note = vec![0u8; note_len as usize];
        input.read_exact(&mut note).map_err(io)?;
        self.state.cache.read_rows(ids.len(), &mut input, path)?;
        self.state.tokens = ids;
        self.state.images.clear();
        self.state.given_prompt = None;
        Ok(note)
    }

    /// Sets the scale of each of the model's LoRA adapters for this session, in the order they
    /// were loaded (0 leaves one out; `None`: the model's own). A change forgets the
    /// conversation, whose keys and values were made with the scales before.
    pub fn set_lora_scales(&mut self, scales: Option<Vec<f32>>) {
        if self.state.cache.lora_scales() != scales.as_deref() {
            self.reset();
            self.state.cache.set_lora_scales(scales);
        }
    }

    /// The session's LoRA scales, where it set its own.
    pub fn lora_scales(&self) -> Option<&[f32]> {
        self.state.cache.lora_scales()
    }

    /// Forgets the conversation.
    pub fn reset(&mut self) {
        self.state.cache.clear();
        self.state.tokens.clear();
        self.state.images.clear();
        self.state.given_prompt = None;
        if let Some(Draft {
            source: DraftSource::Model { cache, tokens, .. },
            ..
        }) = &mut self.draft
        {
            cache.clear();
            tokens.clear();
        }
    }

    /// Feeds `prompt` (token ids) and returns the stream of generated pieces.
    pub fn generate(&mut self, prompt: &[u32], params: SamplingParams) -> Result<Generation<'_>> {
        self.generate_with_images(prompt, &[], params)
    }

    /// As [`generate`](Generator::generate) for a vision-language model: each image placeholder
    /// token of `prompt` (as the chat template writes it for an image part) stands for the
    /// next of `images`, and is expanded into that image's tokens. An image whose tokens the
    /// session already holds at the same place is not encoded again.
    pub fn generate_with_images(
        &mut self,
        prompt: &[u32],
        images: &[RgbImage],
        params: SamplingParams,
    ) -> Result<Generation<'_>> {
        let t0 = Instant::now();
        let side = self.model.image_side();
        let given = side.map(|s| s.keyed(prompt, images));
        let (prompt, spans, prepared) = match side {
            Some(side) => {
                let prepared = side.prepare(images)?;
                let (ids, spans) = side.expand(prompt, &prepared, self.model.tokenizer())?;
                (Cow::Owned(ids), spans, prepared)
            }
            None if images.is_empty() => (Cow::Borrowed(prompt), Vec::new(), Vec::new()),
            None => {
                return Err(Error::invalid(
                    "image",
                    format!(
                        "{} is a text-only model; it takes no images",
                        self.model.path().display()
                    ),
                ))
            }
        };
        let prompt: &[u32] = &prompt;
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
        let state = &mut self.state;
        // Reuse the cached prefix; at least the last prompt token is fed again so its logits
        // come out. Image tokens are reused only where the same image sits at the same place.
        let mut common = state
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len() - 1);
        for span in state.images.iter().filter(|s| !spans.contains(s)) {
            common = common.min(span.start);
        }
        for span in spans.iter().filter(|s| !state.images.contains(s)) {
            common = common.min(span.start);
        }
        state.cache.truncate(common);
        state.tokens.truncate(common);
        state.images.clear();
        state.given_prompt = None;
        let fresh = &prompt[common..];
        // The embeddings of the images (or their rest) among the fresh tokens.
        let mut inject = Vec::new();
        if let Some(side) = side {
            let fresh_runs: Vec<_> = spans.iter().filter(|s| s.start + s.len > common).collect();
            let mut wanted: Vec<usize> = fresh_runs.iter().map(|s| s.image).collect();
            wanted.dedup();
            let refs: Vec<_> = wanted.iter().map(|&i| &prepared[i]).collect();
            let embeds = side.encode(&refs)?;
            for run in fresh_runs {
                let Some(k) = wanted.iter().position(|&i| i == run.image) else {
                    continue;
                };
                let Some(e) = embeds[k].get(run.frame) else {
                    continue;
                };
                // A frame whose first rows are cached already feeds only the rest.
                let skip = common.saturating_sub(run.start);
                let e = match skip {
                    0 => e.clone(),
                    _ => {
                        let h = e.dims()[1];
                        Tensor::from_f32(&[run.len - skip, h], &e.to_f32_vec()?[skip * h..])?
                    }
                };
                inject.push((run.start + skip - common, e));
            }
        }
        let member = self.batcher.as_ref().map(Batcher::join);
        let logits = match &self.batcher {
            _ if !inject.is_empty() => {
                let net = self.model.net()?;
                net.forward_with_embeds(fresh, &mut state.cache, &inject)?
            }
            Some(b) => b.forward(fresh, &mut state.cache)?,
            None => self.model.net()?.forward(fresh, &mut state.cache)?,
        };
        state.tokens.extend_from_slice(fresh);
        state.images = spans;
        state.given_prompt = given.map(|g| (g, prompt.len()));
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
            draft,
        } = self;
        Ok(Generation {
            model,
            state,
            draft: draft.as_mut().filter(|_| batcher.is_none()),
            pending: VecDeque::new(),
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

fn check_draft_max(max: usize) -> Result<()> {
    if (1..=MAX_DRAFT_TOKENS).contains(&max) {
        return Ok(());
    }
    Err(Error::invalid(
        "draft",
        format!("draft tokens per step must be 1..={MAX_DRAFT_TOKENS}, not {max}"),
    ))
}

/// What proposes tokens in speculative decoding: a draft model or prompt lookup.
#[derive(Clone)]
pub enum Drafter {
    Model(Model),
    Lookup,
}

impl std::fmt::Debug for Drafter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Drafter::Model(m) => write!(f, "Drafter::Model({})", m.path().display()),
            Drafter::Lookup => f.write_str("Drafter::Lookup"),
        }
    }
}

impl Drafter {
    /// Sets this drafter on `session`, proposing up to `max` tokens a step
    /// ([`Generator::set_draft`], [`Generator::set_prompt_lookup`]).
    pub fn apply(&self, session: &mut Generator, max: usize) -> Result<()> {
        match self {
            Drafter::Model(m) => session.set_draft(Some(m.clone()), max),
            Drafter::Lookup => session.set_prompt_lookup(Some(max)),
        }
    }
}

/// Prompt lookup: up to `k` tokens that followed the latest earlier occurrence of the last
/// n tokens of `history` (the longest n in [`LOOKUP_NGRAM_MIN`]..=[`LOOKUP_NGRAM`] that occurs
/// before).
fn lookup(history: &[u32], k: usize) -> Vec<u32> {
    let len = history.len();
    for n in (LOOKUP_NGRAM_MIN..=LOOKUP_NGRAM.min(len.saturating_sub(1))).rev() {
        let tail = &history[len - n..];
        // Latest first; the match must end before the tail starts.
        let found = (0..len - n).rev().find(|&i| &history[i..i + n] == tail);
        if let Some(i) = found {
            let from = i + n;
            return history[from..(from + k).min(len)].to_vec();
        }
    }
    Vec::new()
}

/// Refuses logits with NaN or +inf (broken weights or settings).
fn check_finite(logits: &[f32]) -> Result<()> {
    if logits.iter().any(|x| x.is_nan() || *x == f32::INFINITY) {
        return Err(Error::InvalidArgument {
            op: "generate".into(),
            reason: "the model produced non-finite logits (NaN or +inf): its weights or \
                     settings are broken"
                .into(),
        });
    }
    Ok(())
}

/// Up to `k` proposals of a draft model after `history`, each drawn from the draft's
/// sampling distribution (returned with it). The draft's cache first catches up with
/// `history` (it keeps what it was fed before).
fn draft_with_model(
    model: &Model,
    cache: &mut KvCache,
    tokens: &mut Vec<u32>,
    sampler: &mut Sampler,
    history: &[u32],
    k: usize,
) -> Result<(Vec<u32>, Vec<Vec<f64>>)> {
    let dnet = model.net()?;
    let common = tokens
        .iter()
        .zip(history)
        .take_while(|(a, b)| a == b)
        .count()
        .min(history.len() - 1);
    cache.truncate(common);
    tokens.truncate(common);
    let mut feed = history[common..].to_vec();
    let mut proposals = Vec::with_capacity(k);
    let mut drafts = Vec::with_capacity(k);
    let mut seen = history.to_vec();
    for _ in 0..k {
        if cache.remaining() < feed.len() {
            break;
        }
        let mut logits = dnet.forward(&feed, cache)?;
        tokens.extend_from_slice(&feed);
        check_finite(&logits)?;
        let q = sampler.distribution(&mut logits, &seen);
        let Some(d) = sampler.draw_from(&q) else {
            break;
        };
        proposals.push(d);
        drafts.push(q);
        seen.push(d);
        feed = vec![d];
    }
    Ok((proposals, drafts))
}

/// The speculative sampling rule for a proposal `d` drawn from the draft's distribution `q`
/// (empty: all on `d`, a proposal copied rather than drawn), where the model's is `p`
/// ([`Sampler::distribution`], never all zero): kept with probability min(1, p(d)/q(d))
/// (`None`), else replaced (`Some`) by a draw from max(0, p − q), or from `p` where rounding
/// left that all zero. Kept or replaced, the token is distributed as `p`.
fn judge(sampler: &mut Sampler, p: &[f64], q: &[f64], d: u32) -> Option<u32> {
    let q_at = |i: usize| match q.is_empty() {
        true => f64::from(u8::from(i == d as usize)),
        false => q.get(i).copied().unwrap_or(0.0),
    };
    let (pd, qd) = (p.get(d as usize).copied().unwrap_or(0.0), q_at(d as usize));
    if qd > 0.0 && (pd >= qd || (pd > 0.0 && sampler.uniform() < pd / qd)) {
        return None;
    }
    let rest: Vec<f64> = p
        .iter()
        .enumerate()
        .map(|(i, a)| (a - q_at(i)).max(0.0))
        .collect();
    Some(
        sampler
            .draw_from(&rest)
            .or_else(|| sampler.draw_from(p))
            .unwrap_or(d),
    )
}

/// A token decided ahead of its turn by a speculative step.
struct Pending {
    token: u32,
    /// Already in the cache (an accepted proposal), or to be fed next (the last of a step).
    fed: bool,
    logprobs: Option<TokenLogprobs>,
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
    draft: Option<&'g mut Draft>,
    /// Tokens a speculative step decided, emitted one a step.
    pending: VecDeque<Pending>,
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
        if self.pending.is_empty()
            && self.logits.is_none()
            && self.draft.is_some()
            && self.constraint.is_none()
        {
            if let Some(t) = self.unfed.take() {
                if self.state.cache.remaining() == 0 {
                    self.finish = Some(FinishReason::Length);
                    return Ok(None);
                }
                let t0 = Instant::now();
                self.speculate(t)?;
                self.metrics.decode_ms += t0.elapsed().as_secs_f64() * 1e3;
            }
        }
        let (token, fed) = match self.pending.pop_front() {
            Some(p) => {
                if p.logprobs.is_some() {
                    self.last_logprobs = p.logprobs;
                }
                (p.token, p.fed)
            }
            None => match self.next_token()? {
                Some(t) => (t, false),
                None => return Ok(None),
            },
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
        if !fed {
            self.unfed = Some(token);
        }
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

    /// The next token one step at a time: sampled from the logits at hand, or from those of
    /// a forward of the unfed token. `None` when there is nothing to feed or the context is full
    /// (the finish reason is set).
    fn next_token(&mut self) -> Result<Option<u32>> {
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
                check_finite(&logits)?;
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
        Ok(Some(token))
    }

    /// One speculative step from the unfed token `t`: the draft proposes up to its maximum
    /// of tokens, the model scores `t` and all of them in one forward, and each proposal `d`
    /// is kept with probability min(1, p(d)/q(d)) (`p` this model's sampling distribution,
    /// `q` the draft's); the first one refused is replaced by a draw from max(0, p − q), and
    /// when all are kept one more token is drawn from the last `p`. The tokens so follow this
    /// model's own distribution (greedy: exactly its greedy tokens). Queues the kept proposals
    /// (in the cache) and the token drawn after them (to be fed); the cache is cut back to
    /// what was kept.
    fn speculate(&mut self, t: u32) -> Result<()> {
        let net = self.model.net()?;
        let Some(draft) = self.draft.as_deref_mut() else {
            return Err(Error::invalid("speculate", "no draft model"));
        };
        let before = self.state.cache.len();
        let mut history = self.state.tokens.clone();
        history.push(t);
        // Tokens still to emit, the one drawn after the proposals included, and room in the
        // cache for `t` and every proposal.
        let budget = self.max_tokens.map_or(usize::MAX, |m| {
            m.saturating_sub(self.metrics.generated_tokens)
        });
        let k = draft
            .max
            .min(budget.saturating_sub(1))
            .min(self.state.cache.remaining().saturating_sub(1));
        let (proposals, drafts) = match &mut draft.source {
            DraftSource::Model {
                model,
                cache,
                tokens,
            } => draft_with_model(model, cache, tokens, &mut self.sampler, &history, k)?,
            DraftSource::Lookup => {
                // A copied token is certain: its `q` (empty) is all on it.
                let proposals = lookup(&history, k);
                let drafts = vec![Vec::new(); proposals.len()];
                (proposals, drafts)
            }
        };
        let mut input = Vec::with_capacity(proposals.len() + 1);
        input.push(t);
        input.extend_from_slice(&proposals);
        let rows = net.forward_all(&input, &mut self.state.cache)?;
        self.state.tokens.extend_from_slice(&input);
        self.metrics.draft_proposed += proposals.len();
        let vocab = rows.len() / input.len();
        let mut seen = history;
        for (i, row) in rows.chunks_exact(vocab.max(1)).enumerate() {
            check_finite(row)?;
            let mut logits = row.to_vec();
            let p = self.sampler.distribution(&mut logits, &seen);
            let top = self.logprobs_top;
            let logprobs = |token| top.map(|n| TokenLogprobs::from_logits(row, token, n));
            let proposal = proposals.get(i).zip(drafts.get(i));
            let judged = proposal.map(|(&d, q)| (d, judge(&mut self.sampler, &p, q, d)));
            let replacement = match judged {
                Some((d, None)) => {
                    self.pending.push_back(Pending {
                        token: d,
                        fed: true,
                        logprobs: logprobs(d),
                    });
                    self.metrics.draft_accepted += 1;
                    seen.push(d);
                    continue;
                }
                Some((_, Some(t))) => Some(t),
                None => None,
            };
            // Refused, or every proposal kept: one token more, from the model.
            let token = replacement
                .or_else(|| self.sampler.draw_from(&p))
                .unwrap_or_else(|| crate::sampling::argmax(row));
            self.pending.push_back(Pending {
                token,
                fed: false,
                logprobs: logprobs(token),
            });
            let keep = before + 1 + i;
            self.state.cache.truncate(keep);
            self.state.tokens.truncate(keep);
            break;
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Proposals drawn from `q` and judged against `p` come out distributed as `p`, for a
    /// draft that is too sure, one that misses tokens `p` likes, and one equal to `p`.
    #[test]
    fn judged_proposals_follow_the_model() {
        let p = [0.5, 0.3, 0.15, 0.05, 0.0];
        for q in [
            [0.05, 0.05, 0.05, 0.05, 0.8],
            [0.9, 0.0, 0.0, 0.1, 0.0],
            [0.5, 0.3, 0.15, 0.05, 0.0],
        ] {
            let mut sampler = Sampler::new(SamplingParams {
                seed: Some(7),
                ..SamplingParams::default()
            });
            let n = 200_000;
            let mut counts = [0usize; 5];
            for _ in 0..n {
                let d = sampler.draw_from(&q).unwrap();
                let t = judge(&mut sampler, &p, &q, d).unwrap_or(d);
                counts[t as usize] += 1;
            }
            for (c, want) in counts.iter().zip(p) {
                let got = *c as f64 / n as f64;
                assert!((got - want).abs() < 0.005, "q {q:?}: {counts:?}");
            }
        }
    }

    /// A copied proposal (`q` all on it) is kept with probability p(d), and the tokens still
    /// come out distributed as `p`, whichever token was copied.
    #[test]
    fn copied_proposals_follow_the_model() {
        let p = [0.5, 0.3, 0.15, 0.05, 0.0];
        for d in [0u32, 2, 4] {
            let mut sampler = Sampler::new(SamplingParams {
                seed: Some(11),
                ..SamplingParams::default()
            });
            let n = 200_000;
            let mut counts = [0usize; 5];
            for _ in 0..n {
                let t = judge(&mut sampler, &p, &[], d).unwrap_or(d);
                counts[t as usize] += 1;
            }
            for (c, want) in counts.iter().zip(p) {
                let got = *c as f64 / n as f64;
                assert!((got - want).abs() < 0.005, "d {d}: {counts:?}");
            }
        }
    }

    #[test]
    fn lookup_copies_what_followed_the_latest_longest_match() {
        // No earlier "4 6 7"; "6 7" occurred before, latest at 6..8, followed by 9 1.
        let h = [5, 6, 7, 8, 2, 5, 6, 7, 9, 1, 4, 6, 7];
        assert_eq!(lookup(&h, 2), vec![9, 1]);
        assert_eq!(lookup(&h, 10), vec![9, 1, 4, 6, 7]);
        // A 2-gram match, and no match of 2 or more (a lone repeated token is not enough).
        assert_eq!(lookup(&[1, 2, 3, 9, 4, 2, 3], 3), vec![9, 4, 2]);
        assert_eq!(lookup(&[1, 2, 3, 9, 4, 3], 3), Vec::<u32>::new());
        assert_eq!(lookup(&[1, 2, 3], 4), Vec::<u32>::new());
        assert_eq!(lookup(&[7], 4), Vec::<u32>::new());
        assert_eq!(lookup(&[], 4), Vec::<u32>::new());
        assert_eq!(lookup(&[3, 3, 3, 3], 4), vec![3]);
    }
}

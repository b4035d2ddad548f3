//! Generation runs on a blocking thread (it is synchronous CPU work) and streams its pieces
//! through a channel. When the receiver goes away (the client disconnected, the response was
//! dropped) the next send fails and the generation stops; the session goes back to the pool.

use crate::error::ApiError;
use crate::pool::ModelSlot;
use crate::AppState;
use cyb_runtime::{FinishReason, SamplingParams, TokenConstraint, TokenLogprobs};
use std::sync::Arc;
use tokio::sync::{mpsc, OwnedSemaphorePermit};

/// What a generation sends, in order: pieces, then one `Done` or one `Error`.
pub enum Event {
    Piece {
        text: String,
        logprobs: Option<TokenLogprobs>,
    },
    Done(Summary),
    Error(ApiError),
}

/// How a generation ended, for `usage` and `finish_reason`.
#[derive(Clone, Debug)]
pub struct Summary {
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub completion_tokens: usize,
}

pub struct Job {
    pub slot: Arc<ModelSlot>,
    pub prompt: Vec<u32>,
    /// The images of the prompt's placeholders, in order (vision-language models).
    pub images: Vec<cyb_runtime::vision::RgbImage>,
    pub params: SamplingParams,
    pub top_logprobs: Option<usize>,
    pub constraint: Option<Box<dyn TokenConstraint>>,
    /// The request's LoRA scales (`None`: the model's).
    pub lora: Option<Vec<f32>>,
}

/// Starts `job` on a blocking thread; it holds `permit` (its generation slot) until it ends.
pub fn spawn(
    state: Arc<AppState>,
    job: Job,
    permit: OwnedSemaphorePermit,
) -> mpsc::Receiver<Event> {
    let (tx, rx) = mpsc::channel(64);
    tokio::task::spawn_blocking(move || {
        let active = state.metrics.active();
        let result = run(&state, job, &tx);
        // Slot and session are free before the client hears the end, so a client that
        // reads the metrics right after its answer sees them released.
        drop(active);
        drop(permit);
        let _ = tx.blocking_send(match result {
            Ok(summary) => Event::Done(summary),
            Err(e) => Event::Error(e),
        });
    });
    rx
}

fn run(state: &AppState, job: Job, tx: &mpsc::Sender<Event>) -> Result<Summary, ApiError> {
    let slot = job.slot.clone();
    let key = slot.model.prompt_key(&job.prompt, &job.images);
    let mut session = slot.checkout(&key, job.lora.clone())?;
    let result = generate(&mut session, job, tx);
    // The session stays consistent when generation stopped early or failed: reuse it.
    slot.checkin(session);
    let (s, tps, drafted) = result?;
    state
        .metrics
        .record_generation(s.prompt_tokens, s.cached_tokens, s.completion_tokens, tps);
    state.metrics.record_draft(drafted.0, drafted.1);
    Ok(s)
}

fn generate(
    session: &mut cyb_runtime::Generator,
    job: Job,
    tx: &mpsc::Sender<Event>,
) -> Result<(Summary, f64, (usize, usize)), ApiError> {
    let mut generation = session.generate_with_images(&job.prompt, &job.images, job.params)?;
    if let Some(n) = job.top_logprobs {
        generation = generation.with_logprobs(n);
    }
    if let Some(c) = job.constraint {
        generation = generation.with_constraint(c);
    }
    while let Some(item) = generation.next() {
        if tx.is_closed() {
            break;
        }
        let piece = item?;
        let logprobs = match piece.token {
            Some(_) => generation.last_logprobs().cloned(),
            None => None,
        };
        if tx
            .blocking_send(Event::Piece {
                text: piece.text,
                logprobs,
            })
            .is_err()
        {
            break;
        }
    }
    let m = generation.metrics();
    let summary = Summary {
        finish: generation.finish_reason().unwrap_or(FinishReason::Stop),
        prompt_tokens: m.prompt_tokens,
        cached_tokens: m.prompt_tokens.saturating_sub(m.prefilled_tokens),
        completion_tokens: m.generated_tokens,
    };
    Ok((
        summary,
        m.decode_tps(),
        (m.draft_proposed, m.draft_accepted),
    ))
}

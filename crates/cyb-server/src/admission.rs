//! At most `parallel` generations run at once; up to `queue` more requests wait for a slot,
//! in arrival order (tokio's semaphore is fair); beyond that a request gets 429 at once.

use crate::error::ApiError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub struct Admission {
    slots: Arc<Semaphore>,
    waiting: AtomicUsize,
    queue: usize,
}

/// Decrements the waiting count when a queued request leaves the queue for any reason,
/// including the client going away while it waits.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Admission {
    pub fn new(parallel: usize, queue: usize) -> Admission {
        Admission {
            slots: Arc::new(Semaphore::new(parallel.max(1))),
            waiting: AtomicUsize::new(0),
            queue,
        }
    }

    /// A generation slot, held until the permit drops; 429 when the queue is full.
    pub async fn admit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        if let Ok(p) = self.slots.clone().try_acquire_owned() {
            return Ok(p);
        }
        let reserved = self
            .waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
                (w < self.queue).then_some(w + 1)
            });
        if reserved.is_err() {
            return Err(ApiError::queue_full());
        }
        let _waiting = Waiting(&self.waiting);
        self.slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::server("the server is shutting down"))
    }

    /// Requests waiting for a slot.
    pub fn queue_depth(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

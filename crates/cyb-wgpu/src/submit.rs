//! The submission thread: finishing command encoders and submitting them, and the queue writes
//! ordered with them, run on a thread of their own.
//!
//! On a fast GPU decode is bound by the host thread that records the launches, and a profile of
//! it on the H200 put about two thirds of its time in wgpu's `CommandEncoder::finish` (where
//! wgpu-core validates the recorded passes, tracks buffer states and emits the barriers) and in
//! `Queue::submit`. Both now run here while the recording thread goes on with the next launches.
//! Every queue operation of the backend goes through this thread in the order it was asked for
//! (a `write_buffer` issued after a submission must not land before it), and anything that
//! waits for the GPU, maps a buffer or uses the queue directly first waits until the thread
//! has done everything sent to it (`idle`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

/// Queue work, in the order the backend asked for it.
pub(crate) enum Job {
    /// `queue.write_buffer(buffer, 0, bytes)`.
    Write(wgpu::Buffer, Vec<u8>),
    /// Finish the encoder and submit it.
    Submit(wgpu::CommandEncoder),
    /// Submit a finished command buffer.
    SubmitFinished(wgpu::CommandBuffer),
}

/// Jobs done so far, and whether the thread has stopped.
#[derive(Default)]
struct Progress {
    done: u64,
    stopped: bool,
}

pub(crate) struct Submitter {
    queue: wgpu::Queue,
    tx: Option<Sender<Job>>,
    sent: AtomicU64,
    progress: Arc<(Mutex<Progress>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    host_time: Option<Arc<crate::host_time::HostTime>>,
}

/// Marks the thread stopped when it ends, however it ends, so that `idle` never waits for it.
struct StopGuard(Arc<(Mutex<Progress>, Condvar)>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        let (m, cv) = &*self.0;
        m.lock().unwrap_or_else(PoisonError::into_inner).stopped = true;
        cv.notify_all();
    }
}

fn run(queue: &wgpu::Queue, job: Job, host_time: Option<&crate::host_time::HostTime>) {
    let t0 = std::time::Instant::now();
    let submit = match job {
        Job::Write(buf, bytes) => {
            queue.write_buffer(&buf, 0, &bytes);
            false
        }
        Job::Submit(enc) => {
            queue.submit([enc.finish()]);
            true
        }
        Job::SubmitFinished(commands) => {
            queue.submit([commands]);
            true
        }
    };
    if let Some(h) = host_time {
        h.add_job(submit, t0, std::time::Instant::now());
    }
}

impl Submitter {
    /// Starts the thread (or, where no thread can be started, runs every job on the caller).
    pub(crate) fn new(
        queue: &wgpu::Queue,
        host_time: Option<Arc<crate::host_time::HostTime>>,
    ) -> Submitter {
        let progress: Arc<(Mutex<Progress>, Condvar)> = Arc::default();
        let (tx, rx) = channel::<Job>();
        let (q, p, h) = (queue.clone(), progress.clone(), host_time.clone());
        let thread = std::thread::Builder::new()
            .name("cyb-wgpu-submit".into())
            .spawn(move || {
                let _stop = StopGuard(p.clone());
                for job in rx {
                    run(&q, job, h.as_deref());
                    let (m, cv) = &*p;
                    m.lock().unwrap_or_else(PoisonError::into_inner).done += 1;
                    cv.notify_all();
                }
            })
            .ok();
        Submitter {
            queue: queue.clone(),
            tx: thread.as_ref().map(|_| tx),
            sent: AtomicU64::new(0),
            progress,
            thread,
            host_time,
        }
    }

    fn send(&self, job: Job) {
        let job = match &self.tx {
            Some(tx) => {
                // Counted before sending, so that `idle` never misses a job in flight.
                self.sent.fetch_add(1, Ordering::SeqCst);
                match tx.send(job) {
                    Ok(()) => return,
                    Err(e) => {
                        self.sent.fetch_sub(1, Ordering::SeqCst);
                        e.0
                    }
                }
            }
            None => job,
        };
        // No thread (it could not start, or it stopped): in order, here, after what it took.
        self.idle();
        run(&self.queue, job, self.host_time.as_deref());
    }

    /// Finishes and submits `enc` after everything sent before.
    pub(crate) fn submit(&self, enc: wgpu::CommandEncoder) {
        self.send(Job::Submit(enc));
    }

    /// Runs `jobs` on the calling thread, in order, once everything sent before is done.
    /// The caller holds the backend's state lock, as for every other job, so nothing is sent
    /// meanwhile.
    pub(crate) fn run_here(&self, jobs: Vec<Job>) {
        self.idle();
        for job in jobs {
            run(&self.queue, job, self.host_time.as_deref());
        }
    }

    /// `queue.write_buffer(buf, 0, bytes)` after everything sent before.
    pub(crate) fn write(&self, buf: &wgpu::Buffer, bytes: Vec<u8>) {
        self.send(Job::Write(buf.clone(), bytes));
    }

    /// Waits until every job sent so far is done (then the queue may be used directly: nothing
    /// sent earlier is still to come).
    pub(crate) fn idle(&self) {
        let target = self.sent.load(Ordering::SeqCst);
        let (m, cv) = &*self.progress;
        let mut p = m.lock().unwrap_or_else(PoisonError::into_inner);
        while p.done < target && !p.stopped {
            p = cv.wait(p).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Drop for Submitter {
    fn drop(&mut self) {
        // Closing the channel ends the thread once it has run what it holds.
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

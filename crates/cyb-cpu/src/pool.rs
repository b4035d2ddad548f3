//! A persistent thread pool with low wake-up latency for the many small parallel sections of a
//! decode step (one per matmul): workers spin briefly after each job, then park.
//!
//! `run(f)` calls `f(t)` once for every thread index `t` in `0..threads` (the caller is thread
//! 0) and returns when all are done. Kernels split their outputs by `t`, so a result never
//! depends on which OS thread ran it, only on the fixed split.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking: long enough to span the gap between two ops
/// of a decode step, short enough not to burn a core between tokens.
const SPIN: Duration = Duration::from_micros(200);

type Job = dyn Fn(usize) + Sync;

struct Shared {
    /// Bumped once per job; workers run the job when they see a new value.
    generation: AtomicUsize,
    /// The current job. Written only by `run` while every worker is idle (pending == 0), read
    /// by workers only after they observe the generation that published it.
    job: UnsafeCell<Option<*const Job>>,
    pending: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
}

// SAFETY: `job` is the only non-Sync field; the generation/pending protocol above ensures it is
// never written while a worker may read it.
unsafe impl Sync for Shared {}
// SAFETY: the raw job pointer is only dereferenced during `run`, while the closure it points to
// is alive on the caller's stack.
unsafe impl Send for Shared {}

pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<(JoinHandle<()>, Thread)>,
    /// Serialises callers: one job at a time.
    gate: Mutex<()>,
}

impl ThreadPool {
    /// A pool of `threads` (≥ 1) including the calling thread.
    pub fn new(threads: usize) -> ThreadPool {
        let shared = Arc::new(Shared {
            generation: AtomicUsize::new(0),
            job: UnsafeCell::new(None),
            pending: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
        });
        let mut workers = Vec::new();
        for index in 1..threads.max(1) {
            let s = Arc::clone(&shared);
            let spawned = thread::Builder::new()
                .name(format!("cyb-cpu-{index}"))
                .spawn(move || worker(&s, index));
            match spawned {
                Ok(h) => {
                    let t = h.thread().clone();
                    workers.push((h, t));
                }
                // Fewer threads than asked still computes the same results (the split is by
                // index, and the caller runs the missing indices below).
                Err(_) => break,
            }
        }
        ThreadPool {
            shared,
            workers,
            gate: Mutex::new(()),
        }
    }

    /// Number of thread indices `run` hands out.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Calls `f(t)` for `t` in `0..threads()`, in parallel, and waits for all of them.
    pub fn run(&self, f: &(dyn Fn(usize) + Sync)) {
        if self.workers.is_empty() {
            f(0);
            return;
        }
        let _one_at_a_time = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        let s = &*self.shared;
        // SAFETY: we only erase the lifetime; the pointer is cleared below before `f` can go
        // out of scope, and workers finish with it before `pending` reaches 0.
        let ptr: *const Job =
            unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static Job>(f) };
        // SAFETY: every worker is idle (the previous `run` waited for pending == 0), so nobody
        // reads `job` now.
        unsafe { *s.job.get() = Some(ptr) };
        s.pending.store(self.workers.len(), Ordering::Relaxed);
        s.generation.fetch_add(1, Ordering::Release);
        for (_, t) in &self.workers {
            t.unpark();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0)));
        let mut spins = 0u32;
        while s.pending.load(Ordering::Acquire) != 0 {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) {
                thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        // SAFETY: all workers are done with the job (pending == 0).
        unsafe { *s.job.get() = None };
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Ordering::Relaxed) {
            panic!("a cyb-cpu worker thread panicked inside a kernel");
        }
    }
}

fn worker(s: &Shared, index: usize) {
    let mut seen = 0usize;
    loop {
        let start = Instant::now();
        let mut spins = 0u32;
        let gen = loop {
            let g = s.generation.load(Ordering::Acquire);
            if g != seen || s.shutdown.load(Ordering::Relaxed) {
                break g;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) && start.elapsed() > SPIN {
                // A stale unpark token only makes this return early; the loop re-checks.
                thread::park();
            } else {
                std::hint::spin_loop();
            }
        };
        if s.shutdown.load(Ordering::Relaxed) {
            return;
        }
        seen = gen;
        // SAFETY: the Acquire load of the new generation makes the caller's write of `job`
        // visible, and the caller keeps the closure alive until `pending` reaches 0.
        if let Some(job) = unsafe { *s.job.get() } {
            // SAFETY: see above; the pointee outlives this call.
            let f = unsafe { &*job };
            if catch_unwind(AssertUnwindSafe(|| f(index))).is_err() {
                s.panicked.store(true, Ordering::Relaxed);
            }
        }
        s.pending.fetch_sub(1, Ordering::Release);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Relaxed);
        for (h, t) in self.workers.drain(..) {
            t.unpark();
            let _ = h.join();
        }
    }
}

/// The `t`-th of `parts` near-equal contiguous ranges of `0..len` (a fixed split).
pub fn split(len: usize, parts: usize, t: usize) -> std::ops::Range<usize> {
    let parts = parts.max(1);
    (len * t / parts)..(len * (t + 1) / parts)
}

/// An output buffer that threads write in disjoint ranges.
pub struct DisjointOut<'a, T = f32> {
    ptr: *mut T,
    len: usize,
    _life: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: callers of `set`/`slice` promise that no two threads touch the same index; reads
// never happen through this type.
unsafe impl<T: Send> Sync for DisjointOut<'_, T> {}

impl<'a, T> DisjointOut<'a, T> {
    pub fn new(out: &'a mut [T]) -> DisjointOut<'a, T> {
        DisjointOut {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            _life: std::marker::PhantomData,
        }
    }

    /// Writes `v` at `i`.
    ///
    /// # Safety
    /// No other thread writes index `i` during the same parallel section.
    pub unsafe fn set(&self, i: usize, v: T) {
        assert!(i < self.len, "DisjointOut index {i} out of {}", self.len);
        // SAFETY: in bounds (checked), and exclusive per the caller's promise.
        unsafe { *self.ptr.add(i) = v };
    }

    /// A mutable view of `range`.
    ///
    /// # Safety
    /// No other thread touches `range` during the same parallel section.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, range: std::ops::Range<usize>) -> &mut [T] {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: in bounds (checked), and exclusive per the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.len()) }
    }
}

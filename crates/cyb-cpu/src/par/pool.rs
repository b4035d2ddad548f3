//! A persistent thread pool with low wake-up latency for the many small parallel sections of a
//! decode step (one per matmul): workers spin briefly after each job, then park.
//!
//! `run(f)` calls `f(t)` once for every part index `t` in `0..threads` (`run_parts(n, f)`: in
//! `0..n`) and returns when all are done. Parts are claimed from a shared counter by whichever
//! thread gets there first, the caller included, so a worker that is slow to wake (parked, or
//! preempted on a busy machine) never holds the caller up: the caller runs the unclaimed parts
//! itself. Kernels split their outputs by the part index, so a result never depends on which
//! OS thread ran a part, only on the fixed split.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking: long enough to span the gap between two ops
/// of a decode step, short enough not to burn a core between tokens.
const SPIN: Duration = Duration::from_micros(200);

type Job = dyn Fn(usize) + Sync;

struct Shared {
    /// Bumped once per job, after the job is published; wakes the workers.
    generation: AtomicUsize,
    /// The current job. Written only by `run_parts` while no part is claimed-but-unfinished
    /// (before `next` is reset, or after `done` reached the job's parts); read only by a thread
    /// that has just claimed a part, which orders it after the write.
    job: UnsafeCell<Option<*const Job>>,
    /// The current job's parts (high 32 bits) and the next part to claim (low 32 bits), in one
    /// word so that a claim reads both at once: a thread left over from the previous job can
    /// never pair its count with the new job's parts. Low bits ≥ the parts: every part taken.
    next: AtomicU64,
    /// Parts finished in the current job.
    done: AtomicUsize,
    /// Pool threads, the caller included: the parts `run` hands out.
    threads: usize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
}

// SAFETY: `job` is the only non-Sync field; the claim protocol above ensures it is never
// written while a thread may read it.
unsafe impl Sync for Shared {}
// SAFETY: the raw job pointer is only dereferenced during `run`, while the closure it points to
// is alive on the caller's stack.
unsafe impl Send for Shared {}

impl Shared {
    /// Claims and runs parts of the current job until none is left; the first panic of a part
    /// it ran, if any.
    fn work(&self) -> Result<(), Box<dyn std::any::Any + Send>> {
        let mut result = Ok(());
        loop {
            let claim = self.next.fetch_add(1, Ordering::AcqRel);
            let (parts, t) = ((claim >> 32) as usize, (claim & 0xffff_ffff) as usize);
            if t >= parts {
                return result;
            }
            // SAFETY: a successful claim happens after `run` published the job (it reset
            // `next` with Release after writing `job`), and `run` keeps the closure alive and
            // `job` unchanged until this part counts as done.
            if let Some(job) = unsafe { *self.job.get() } {
                // SAFETY: see above; the pointee outlives this call.
                let f = unsafe { &*job };
                if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(t))) {
                    if result.is_ok() {
                        result = Err(p);
                    }
                }
            }
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<(JoinHandle<()>, Thread)>,
    /// Serialises callers: one job at a time.
    gate: Mutex<()>,
}

impl ThreadPool {
    /// A pool of `threads` (≥ 1) including the calling thread.
    pub fn new(threads: usize) -> ThreadPool {
        let parts = threads.max(1);
        let shared = Arc::new(Shared {
            generation: AtomicUsize::new(0),
            job: UnsafeCell::new(None),
            next: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            threads: parts,
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
        });
        let mut workers = Vec::new();
        for index in 1..parts {
            let s = Arc::clone(&shared);
            let spawned = thread::Builder::new()
                .name(format!("cyb-cpu-{index}"))
                .spawn(move || worker(&s));
            match spawned {
                Ok(h) => {
                    let t = h.thread().clone();
                    workers.push((h, t));
                }
                // Fewer threads than asked still computes the same results: the caller runs
                // the parts nobody else claims.
                Err(_) => break,
            }
        }
        ThreadPool {
            shared,
            workers,
            gate: Mutex::new(()),
        }
    }

    /// Number of part indices `run` hands out.
    pub fn threads(&self) -> usize {
        self.shared.threads
    }

    /// Calls `f(t)` for `t` in `0..threads()`, in parallel, and waits for all of them.
    pub fn run(&self, f: &(dyn Fn(usize) + Sync)) {
        self.run_parts(self.shared.threads, f)
    }

    /// Calls `f(p)` for `p` in `0..parts`, each part claimed by whichever thread is free first
    /// (more parts than threads balance the work when one core runs slower, as a busy
    /// machine's often does), and waits for all of them.
    pub fn run_parts(&self, parts: usize, f: &(dyn Fn(usize) + Sync)) {
        let s = &*self.shared;
        if self.workers.is_empty() || parts <= 1 {
            for t in 0..parts {
                f(t);
            }
            return;
        }
        assert!(
            parts <= u32::MAX as usize,
            "{parts} parts do not fit a claim word"
        );
        let _one_at_a_time = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: we only erase the lifetime; the pointer is cleared below before `f` can go
        // out of scope, and no part runs after `done` reaches `parts`.
        let ptr: *const Job =
            unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static Job>(f) };
        // SAFETY: the previous job is finished (`done` == `parts`) and `next` is still ≥
        // `parts`, so no thread holds a claim or reads `job` now.
        unsafe { *s.job.get() = Some(ptr) };
        s.done.store(0, Ordering::Relaxed);
        s.next.store((parts as u64) << 32, Ordering::Release);
        s.generation.fetch_add(1, Ordering::Release);
        for (_, t) in &self.workers {
            t.unpark();
        }
        let mine = s.work();
        let mut spins = 0u32;
        while s.done.load(Ordering::Acquire) != parts {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) {
                thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        // SAFETY: every part is done and `next` ≥ `parts`, so no thread reads `job`.
        unsafe { *s.job.get() = None };
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Ordering::Relaxed) {
            panic!("a cyb-cpu worker thread panicked inside a kernel");
        }
    }
}

fn worker(s: &Shared) {
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
        if s.work().is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
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

/// Most parts per thread that [`balanced_parts`] cuts a matmul into.
const PARTS_PER_THREAD: usize = 16;

/// Least bytes of weights in one part of [`balanced_parts`]: smaller parts cost more in claims
/// and in restarting the hardware prefetcher than they win in balance.
const PART_BYTES: usize = 256 * 1024;

/// How many parts [`ThreadPool::run_parts`] should cut `len` units of `unit_bytes` each into on
/// `threads` threads: up to 16 per thread, none under 256 KiB (but at least one per thread). A
/// fixed split into one part per thread waits for the slowest core; on a shared VM one core is
/// often slower for a while, and with many parts the other takes over its share. On a Zen 4 VM,
/// 2 threads, the 1B F16 decode (`bench -p 1 -n 32 -r 3`, alternated) ran 11.2–11.9 t/s with
/// one part per thread and 13.1–15.5 with up to 16.
pub fn balanced_parts(len: usize, threads: usize, unit_bytes: usize) -> usize {
    if threads <= 1 {
        return 1;
    }
    let min_units = PART_BYTES.div_ceil(unit_bytes.max(1));
    (len / min_units).clamp(threads, threads * PARTS_PER_THREAD)
}

/// Least bytes of weights in one of [`guided_range`]'s small parts.
const GUIDED_PART_BYTES: usize = 64 * 1024;

/// Parts of [`guided_range`] for `len` units of `unit_bytes` on `threads` threads: one per
/// thread when its small parts would be under 64 KiB.
pub fn guided_parts(len: usize, threads: usize, unit_bytes: usize) -> usize {
    let small = (len - len * 3 / 4) / (threads * 4).max(1);
    if threads <= 1 || small * unit_bytes < GUIDED_PART_BYTES {
        threads.max(1)
    } else {
        threads * 5
    }
}

/// Part `p` of `0..len` cut into `parts` ([`guided_parts`]) for `threads` threads: one
/// leading part per thread holding three quarters of its share, then the last quarter in four
/// small parts per thread, which whichever thread is free takes first. The leading parts keep
/// most of the weights in long streams, which the hardware prefetchers follow best; the small
/// ones keep a thread that a busy machine slowed from holding the other up. Without the small
/// parts (`parts == threads`), a fixed split.
pub fn guided_range(len: usize, threads: usize, parts: usize, p: usize) -> std::ops::Range<usize> {
    if parts <= threads {
        return split(len, parts, p);
    }
    let head = len * 3 / 4;
    if p < threads {
        split(head, threads, p)
    } else {
        let r = split(len - head, parts - threads, p - threads);
        head + r.start..head + r.end
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

    /// A raw pointer to index `start` for a kernel that writes a strided block ending before
    /// `end` (rows of other threads' columns may lie in between).
    ///
    /// # Safety
    /// The caller writes only indices in `start..end` that no other thread touches.
    pub unsafe fn strided(&self, start: usize, end: usize) -> *mut T {
        assert!(start <= end && end <= self.len);
        // SAFETY: in bounds (checked).
        unsafe { self.ptr.add(start) }
    }

    /// Asks for the cache lines of `range` to be brought in for writing (a hint: no access).
    pub fn prefetch_write(&self, range: std::ops::Range<usize>) {
        #[cfg(target_arch = "x86_64")]
        if range.start <= range.end && range.end <= self.len {
            let bytes = range.len() * std::mem::size_of::<T>();
            for off in (0..bytes).step_by(64) {
                // SAFETY: an in-bounds address; a prefetch cannot fault or change memory.
                unsafe {
                    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET1};
                    let p = (self.ptr.add(range.start) as *const i8).add(off);
                    _mm_prefetch::<_MM_HINT_ET1>(p);
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = range;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every part of every job runs exactly once, whatever the number of parts (more or fewer
    /// than threads, changing from job to job, so that a thread still leaving one job meets the
    /// next job's claim word) and the number of threads.
    #[test]
    fn each_part_runs_once() {
        for threads in [1, 2, 3] {
            let pool = ThreadPool::new(threads);
            for (job, parts) in [5, 1, 32, 2, 0, 17, 3, 64, 4]
                .iter()
                .cycle()
                .take(300)
                .enumerate()
            {
                let runs: Vec<AtomicUsize> = (0..*parts).map(|_| AtomicUsize::new(0)).collect();
                pool.run_parts(*parts, &|p| {
                    runs[p].fetch_add(1, Ordering::Relaxed);
                });
                for (p, r) in runs.iter().enumerate() {
                    let n = r.load(Ordering::Relaxed);
                    assert_eq!(
                        n, 1,
                        "{threads} threads, job {job}: part {p} of {parts} ran {n}×"
                    );
                }
            }
            let seen: Vec<AtomicUsize> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
            pool.run(&|t| {
                seen[t].fetch_add(1, Ordering::Relaxed);
            });
            assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn balanced_parts_stay_within_bounds() {
        assert_eq!(balanced_parts(1000, 1, 1 << 20), 1);
        // Small weights: one part per thread.
        assert_eq!(balanced_parts(576, 2, 1152), 2);
        // Large ones: up to 16 per thread, each at least PART_BYTES.
        assert_eq!(balanced_parts(128_256, 2, 4096), 32);
        assert_eq!(balanced_parts(2048, 2, 4096), 32);
        assert_eq!(balanced_parts(640, 2, 4096), 10);
        assert_eq!(balanced_parts(3, 4, 0), 4);
    }

    /// Guided parts tile `0..len` in order, leading parts first; small weights keep one part
    /// per thread.
    #[test]
    fn guided_parts_tile_the_range() {
        assert_eq!(guided_parts(512, 1, 18_432), 1);
        assert_eq!(guided_parts(32, 2, 18_432), 2);
        assert_eq!(guided_parts(512, 2, 18_432), 10);
        for (len, threads, unit) in [(512, 2, 18_432), (129, 3, 65_536), (7, 2, 1), (0, 2, 1)] {
            let parts = guided_parts(len, threads, unit);
            let mut next = 0;
            for p in 0..parts {
                let r = guided_range(len, threads, parts, p);
                assert_eq!(r.start, next, "{len} {threads} part {p}");
                next = r.end;
            }
            assert_eq!(next, len);
            if parts > threads {
                let lead = guided_range(len, threads, parts, 0).len();
                let small = guided_range(len, threads, parts, parts - 1).len();
                assert!(lead >= 2 * small, "{len}: {lead} vs {small}");
            }
        }
    }
}

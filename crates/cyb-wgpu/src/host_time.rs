//! `CYB_WGPU_HOST_TIME=1`: the host time spent inside the backend's recording entry points
//! (`execute`, `upload_tensor`, `begin_step`, `end_step`; waits for the GPU and readbacks are
//! not counted), summed and printed per launch to stderr when the backend is dropped. Decode on
//! a fast GPU is bound by this time, so it is the figure to cut.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

#[derive(Default)]
pub(crate) struct HostTime {
    nanos: AtomicU64,
    calls: AtomicU64,
    /// Steps begun, and the launch count when the counted steps began.
    steps: AtomicU64,
    launch_base: AtomicU64,
    /// On-CPU nanoseconds of the recording thread when the counted steps began (Linux).
    cpu_base: AtomicU64,
    /// Readbacks: count, then nanoseconds waiting for the submission thread, for the GPU, and
    /// copying out of the mapped buffer.
    reads: [AtomicU64; 4],
    /// Nanoseconds from each step's end to the next step's beginning (the caller's time), and
    /// when the last step ended (nanoseconds since `epoch`).
    between: AtomicU64,
    ended_at: AtomicU64,
    epoch: std::sync::OnceLock<Instant>,
    /// When the current step began (nanoseconds since `epoch`), and the queue jobs (submit.rs;
    /// on the submission thread, a replay's on the caller) measured from it: [writes, their
    /// nanoseconds, submissions, their nanoseconds, Σ start of each step's first job, Σ end of
    /// each step's first submission, Σ end of each step's last submission], with the step the
    /// first job and first submission were seen in.
    begun_at: AtomicU64,
    jobs: [AtomicU64; 7],
    first_job_step: AtomicU64,
    first_submit_step: AtomicU64,
    last_submit_end: AtomicU64,
}

/// On-CPU nanoseconds of the calling thread, where the OS tells them (Linux schedstat): unlike
/// wall time, this leaves out time the thread waited or was descheduled on a busy machine.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Steps left out of the totals: the first ones compile pipelines and upload weights.
const WARM_STEPS: u64 = 2;

/// Adds the time from its making to its drop to a `HostTime`.
pub(crate) struct Span<'a> {
    into: &'a HostTime,
    t0: Instant,
}

impl Drop for Span<'_> {
    fn drop(&mut self) {
        let ns = self.t0.elapsed().as_nanos() as u64;
        self.into.nanos.fetch_add(ns, Ordering::Relaxed);
        self.into.calls.fetch_add(1, Ordering::Relaxed);
    }
}

impl HostTime {
    pub(crate) fn span(&self) -> Span<'_> {
        Span {
            into: self,
            t0: Instant::now(),
        }
    }

    fn now_ns(&self) -> u64 {
        self.epoch.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }

    /// A step ends.
    pub(crate) fn end_step(&self) {
        self.ended_at.store(self.now_ns(), Ordering::Relaxed);
    }

    /// Adds one readback's phases (each from the last mark to the next).
    pub(crate) fn add_read(&self, marks: [Instant; 4]) {
        self.reads[0].fetch_add(1, Ordering::Relaxed);
        for i in 0..3 {
            let ns = marks[i + 1].duration_since(marks[i]).as_nanos() as u64;
            self.reads[i + 1].fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// One queue job (submit.rs) ran from t0 to t1 (a queue write, or the finishing and
    /// submitting of an encoder).
    pub(crate) fn add_job(&self, submit: bool, t0: Instant, t1: Instant) {
        let epoch = *self.epoch.get_or_init(Instant::now);
        let begun = self.begun_at.load(Ordering::Relaxed);
        let at = |t: Instant| (t.duration_since(epoch).as_nanos() as u64).saturating_sub(begun);
        let step = self.steps.load(Ordering::Relaxed);
        let i = if submit { 2 } else { 0 };
        self.jobs[i].fetch_add(1, Ordering::Relaxed);
        self.jobs[i + 1].fetch_add(t1.duration_since(t0).as_nanos() as u64, Ordering::Relaxed);
        if self.first_job_step.swap(step, Ordering::Relaxed) != step {
            self.jobs[4].fetch_add(at(t0), Ordering::Relaxed);
        }
        if submit {
            if self.first_submit_step.swap(step, Ordering::Relaxed) != step {
                self.jobs[5].fetch_add(at(t1), Ordering::Relaxed);
            }
            self.last_submit_end.store(at(t1), Ordering::Relaxed);
        }
    }

    /// A step begins; after the warm-up steps the totals restart from zero.
    pub(crate) fn begin_step(&self, launches: u64) {
        let last = self.last_submit_end.swap(0, Ordering::Relaxed);
        self.jobs[6].fetch_add(last, Ordering::Relaxed);
        self.begun_at.store(self.now_ns(), Ordering::Relaxed);
        let ended = self.ended_at.load(Ordering::Relaxed);
        if ended > 0 {
            let gap = self.now_ns().saturating_sub(ended);
            self.between.fetch_add(gap, Ordering::Relaxed);
        }
        if self.steps.fetch_add(1, Ordering::Relaxed) == WARM_STEPS {
            self.between.store(0, Ordering::Relaxed);
            for r in &self.reads {
                r.store(0, Ordering::Relaxed);
            }
            for j in &self.jobs {
                j.store(0, Ordering::Relaxed);
            }
            self.nanos.store(0, Ordering::Relaxed);
            self.calls.store(0, Ordering::Relaxed);
            self.launch_base.store(launches, Ordering::Relaxed);
            self.cpu_base
                .store(thread_cpu_ns().unwrap_or(0), Ordering::Relaxed);
        }
    }

    /// Since the warm-up steps: host nanoseconds spent recording, nanoseconds the queue jobs
    /// spent finishing and submitting, and the number of timed calls.
    pub(crate) fn totals(&self) -> (u64, u64, u64) {
        (
            self.nanos.load(Ordering::Relaxed),
            self.jobs[3].load(Ordering::Relaxed),
            self.calls.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn report(&self, launches: u64) -> String {
        let (ns, submit, calls) = self.totals();
        let launches = launches - self.launch_base.load(Ordering::Relaxed).min(launches);
        let steps = self
            .steps
            .load(Ordering::Relaxed)
            .saturating_sub(WARM_STEPS);
        // Everything the thread ran since the counted steps began (model code, dispatcher,
        // recording, submissions), valid when the backend is dropped on the thread that ran
        // them (the CLI's case).
        let cpu = match (thread_cpu_ns(), self.cpu_base.load(Ordering::Relaxed)) {
            (Some(now), base) if base > 0 => format!(
                "; thread on-CPU since then {:.2} us/launch",
                now.saturating_sub(base) as f64 / 1e3 / launches.max(1) as f64
            ),
            _ => String::new(),
        };
        let r: Vec<u64> = self
            .reads
            .iter()
            .map(|r| r.load(Ordering::Relaxed))
            .collect();
        let per_read = |i: usize| r[i] as f64 / 1e3 / r[0].max(1) as f64;
        let j: Vec<f64> = self
            .jobs
            .iter()
            .map(|j| j.load(Ordering::Relaxed) as f64)
            .collect();
        let per_step = |x: f64| x / 1e3 / steps.max(1) as f64;
        format!(
            "wgpu host time ({steps} steps after {WARM_STEPS} warm-up ones): {:.2} ms recording ({:.2} ms finishing and \
             submitting) in {calls} calls, \
             {launches} launches: {:.2} us/launch, {:.2} us/call{cpu}\n\
             wgpu readbacks: {} reads: {:.1} us waiting for the submission thread, {:.1} us for \
             the GPU, {:.1} us copying per read; {:.1} us per step between steps\n\
             wgpu queue jobs per step (submission thread; a replay's on the caller): {:.1} writes in {:.1} us, {:.1} submissions in {:.1} us; \
             from the step's beginning: first job at {:.1} us, first submission done at {:.1} us, \
             last at {:.1} us\n",
            ns as f64 / 1e6,
            submit as f64 / 1e6,
            ns as f64 / 1e3 / launches.max(1) as f64,
            ns as f64 / 1e3 / calls.max(1) as f64,
            r[0],
            per_read(1),
            per_read(2),
            per_read(3),
            self.between.load(Ordering::Relaxed) as f64 / 1e3 / steps.max(1) as f64,
            j[0] / steps.max(1) as f64,
            per_step(j[1]),
            j[2] / steps.max(1) as f64,
            per_step(j[3]),
            per_step(j[4]),
            per_step(j[5]),
            per_step(j[6]),
        )
    }
}

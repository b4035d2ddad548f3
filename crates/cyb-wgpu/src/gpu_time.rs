//! `CYB_WGPU_GPU_TIME=1`: the GPU's own time per forward step, from timestamps the device
//! writes at the start and end of every compute pass (adapters with timestamp queries only).
//! Unlike `CYB_WGPU_PROFILE`, launches are not serialized: the passes run as they would, and
//! the step ends with one extra wait to read the timestamps back. Printed to stderr when the
//! backend is dropped: per step, the time the GPU spent inside passes ("busy") and from the
//! first pass's start to the last one's end ("span"); a span much longer than busy, or a step
//! wall time much longer than span, means the GPU waited on the host.
//!
//! `CYB_WGPU_GPU_TIME=kernels` puts every launch in its own pass and also prints the GPU time
//! per kernel (family, entry point, weight dtype) per step, largest first: where the busy time
//! goes. The extra pass boundaries cost a little, so its busy figure runs slightly high.

/// Timestamps per step: two per compute pass; passes beyond it go untimed.
const QUERIES: u32 = 1024;
/// Steps left out of the totals (pipeline compilation, weight uploads).
const WARM_STEPS: u64 = 2;

pub(crate) struct GpuTimer {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    read: wgpu::Buffer,
    /// Nanoseconds per timestamp tick.
    period: f64,
    /// Queries written in the current step.
    pub(crate) used: u32,
    steps: u64,
    passes: u64,
    busy_ns: f64,
    span_ns: f64,
    /// `CYB_WGPU_GPU_TIME=kernels`: one pass per launch, labelled.
    pub(crate) per_kernel: bool,
    /// The kernel of each timed pass of the current step (per_kernel only).
    labels: Vec<String>,
    /// Per kernel label: nanoseconds and launches over the counted steps.
    kernels: rustc_hash::FxHashMap<String, (f64, u64)>,
}

impl GpuTimer {
    /// A timer per step (`per_kernel` false) or per kernel when asked for (`WgpuOptions::gpu_time`)
    /// and the device has timestamp queries.
    pub(crate) fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        mode: Option<bool>,
    ) -> Option<GpuTimer> {
        let per_kernel = mode?;
        if !device.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
            eprintln!("CYB_WGPU_GPU_TIME: this adapter has no timestamp queries");
            return None;
        }
        let bytes = u64::from(QUERIES) * 8;
        Some(GpuTimer {
            set: device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("gpu-time"),
                ty: wgpu::QueryType::Timestamp,
                count: QUERIES,
            }),
            resolve: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpu-time-resolve"),
                size: bytes,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }),
            read: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpu-time-read"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            period: f64::from(queue.get_timestamp_period()),
            used: 0,
            steps: 0,
            passes: 0,
            busy_ns: 0.0,
            span_ns: 0.0,
            per_kernel,
            labels: Vec::new(),
            kernels: Default::default(),
        })
    }

    /// Where the next compute pass writes its start and end, if there is room this step;
    /// `label` names the pass's one kernel (per_kernel).
    pub(crate) fn writes(
        &mut self,
        label: impl FnOnce() -> String,
    ) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        if self.used + 2 > QUERIES {
            return None;
        }
        let i = self.used;
        self.used += 2;
        if self.per_kernel {
            self.labels.push(label());
        }
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(i),
            end_of_pass_write_index: Some(i + 1),
        })
    }

    /// After the step's last submission: reads the step's timestamps back (one wait) and adds
    /// them to the totals.
    pub(crate) fn end_step(&mut self, device: &wgpu::Device, queue: &wgpu::Queue) {
        let n = self.used;
        self.used = 0;
        let labels = std::mem::take(&mut self.labels);
        if n == 0 {
            return;
        }
        let mut enc =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        enc.resolve_query_set(&self.set, 0..n, &self.resolve, 0);
        enc.copy_buffer_to_buffer(&self.resolve, 0, &self.read, 0, u64::from(n) * 8);
        queue.submit([enc.finish()]);
        let slice = self.read.slice(..u64::from(n) * 8);
        slice.map_async(wgpu::MapMode::Read, |_| {});
        if device.poll(wgpu::PollType::wait_indefinitely()).is_err() {
            return;
        }
        let ticks: Vec<u64> = match slice.get_mapped_range() {
            Ok(r) => bytemuck::cast_slice(&r).to_vec(),
            Err(_) => return,
        };
        self.read.unmap();
        self.steps += 1;
        if self.steps <= WARM_STEPS {
            return;
        }
        let pairs: Vec<(u64, u64)> = ticks.chunks_exact(2).map(|p| (p[0], p[1])).collect();
        let busy: u64 = pairs.iter().map(|(a, b)| b.saturating_sub(*a)).sum();
        let first = pairs.iter().map(|p| p.0).min().unwrap_or(0);
        let last = pairs.iter().map(|p| p.1).max().unwrap_or(0);
        self.busy_ns += busy as f64 * self.period;
        self.span_ns += last.saturating_sub(first) as f64 * self.period;
        self.passes += pairs.len() as u64;
        for (label, (a, b)) in labels.into_iter().zip(&pairs) {
            let e = self.kernels.entry(label).or_default();
            e.0 += b.saturating_sub(*a) as f64 * self.period;
            e.1 += 1;
        }
    }

    pub(crate) fn report(&self) -> String {
        let steps = self.steps.saturating_sub(WARM_STEPS).max(1) as f64;
        let mut out = format!(
            "wgpu GPU time ({} steps after {WARM_STEPS} warm-up ones): busy {:.1} us/step in {:.1} passes, span {:.1} us/step\n",
            self.steps.saturating_sub(WARM_STEPS),
            self.busy_ns / 1e3 / steps,
            self.passes as f64 / steps,
            self.span_ns / 1e3 / steps,
        );
        let mut rows: Vec<_> = self.kernels.iter().collect();
        rows.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
        for (label, (ns, count)) in rows {
            out.push_str(&format!(
                "  {:>9.1} us/step {:>6.1}x {:>8.2} us/launch  {label}\n",
                ns / 1e3 / steps,
                *count as f64 / steps,
                ns / 1e3 / (*count).max(1) as f64,
            ));
        }
        out
    }
}

//! `WgpuBackend`: device memory, per-step command recording and the `Backend` contract.
//!
//! Ops are recorded into one command encoder; it is submitted at `end_step`, every
//! `SUBMIT_EVERY` launches, or earlier when a download needs results — finished and
//! submitted on the submission thread (submit.rs), which also runs the queue writes in order.
//! Activations come from the `FrameAllocator`, whose buffers return to the pool at the next
//! `begin_step` (a buffer still held by a live tensor is skipped).

use crate::context::GpuContext;
use crate::kernels::Kernels;
use crate::memory::{
    padded, padded_vec, shadow, DeviceView, GpuBuf, HostShadow, MemKind, ResidentKey,
};
use crate::ops;
use cyb_backend::{Backend, BufferUsage, ExecContext, FrameAllocator};
use cyb_ops::Op;
use cyb_tensor::{DType, Error, Result, Shape, Storage, Tensor, TensorInfo};
use rustc_hash::FxHashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// The portable GPU backend (`"wgpu"`).
pub struct WgpuBackend {
    pub(crate) ctx: GpuContext,
    pub(crate) kernels: Kernels,
    state: Mutex<State>,
    /// Signalled when a forward step ends (see `State::in_step`).
    step_done: Condvar,
    /// Per-kernel timing (`CYB_WGPU_PROFILE`).
    pub(crate) profile: Option<crate::profile::Profile>,
    /// Host time spent recording (`CYB_WGPU_HOST_TIME`).
    host_time: Option<Arc<crate::host_time::HostTime>>,
    /// Finishes encoders and runs the queue's work on a thread of its own (submit.rs).
    pub(crate) submitter: crate::submit::Submitter,
    /// Kernel launches recorded so far (after merging; see `launch.rs`).
    pub(crate) launches: std::sync::atomic::AtomicU64,
    /// Adjacent independent launches are merged (`launch.rs`).
    pub(crate) merge: std::sync::atomic::AtomicBool,
    /// A decode matvec, the residual add + norm of its output and the matvecs of that are
    /// recorded as two launches when merging is on (`launch.rs`, `ResNorm`).
    pub(crate) norm_merge: bool,
    /// How long a readback polls for the GPU before it sleeps (`SPIN_WAIT`; none on a software
    /// adapter, whose work runs on the same CPU cores).
    spin_wait: std::time::Duration,
    /// Decode steps may be recorded and replayed (replay.rs; `WgpuOptions::replay`).
    replay: std::sync::atomic::AtomicBool,

    /// Steps replayed so far (replay.rs).
    pub(crate) replayed: std::sync::atomic::AtomicU64,
    /// Decode matvecs of at least this many weight rows in a format matvec_q16.wgsl reads
    /// quantize their activations and use integer dot products (`ops::matmul::MVQ_MIN_ROWS`).
    pub(crate) mvq_min_rows: std::sync::atomic::AtomicUsize,
    /// Prefill matmuls of non-F32 weights run on cooperative matrices (matmul_coop.wgsl),
    /// where the device has them (`AdapterReport::coop` and `WgpuOptions::cooperative_matrices`).
    pub(crate) coop: std::sync::atomic::AtomicBool,
    /// Bytes of the buffers this backend made that are alive, and the most at once.
    memory: Arc<crate::memory::MemoryCounter>,
    /// Print the memory by kind at exit (`WgpuOptions::memory_report`).
    memory_report: bool,
    /// Bytes written through staging copies since they were last submitted and waited for.
    staged: std::sync::atomic::AtomicU64,
}

/// Launches after which the recorded work is submitted mid-step, so the GPU runs the first part
/// of a step while the rest is being recorded (best on the H200 for the 1B shape).
pub(crate) const SUBMIT_EVERY: usize = 16;
/// Launches after which a step's first submission goes out (the GPU starts on a step sooner
/// than after a full batch).
pub(crate) const FIRST_SUBMIT: usize = 4;
/// How long a readback spins before it sleeps, on a hardware adapter.
const SPIN_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

impl Drop for WgpuBackend {
    fn drop(&mut self) {
        self.submitter.idle();
        if let Some(p) = &self.profile {
            eprint!("{}", p.report());
        }
        if let Some(h) = &self.host_time {
            eprint!("{}", h.report(self.launch_count()));
        }
        if let Some(g) = &self.lock().gpu_time {
            eprint!("{}", g.report());
        }
        if self.memory_report {
            eprint!("{}", self.memory.report());
        }
    }
}

pub(crate) struct State {
    pub(crate) encoder: Option<wgpu::CommandEncoder>,
    /// The compute pass every kernel launch of the current submission is recorded into (one
    /// pass, not one per launch); ended before a copy or a submission.
    pub(crate) pass: Option<wgpu::ComputePass<'static>>,
    /// Kernel parameters of the launches recorded since the last submission, in one uniform
    /// buffer written once just before the submission (not one small write per launch).
    pub(crate) params: Option<ParamArena>,
    /// Bind groups by (kernel, parameter buffer and offset, buffers): a decode step launches
    /// the same kernels on the same pooled buffers every time, so after the first steps no bind
    /// group is created. Cleared when it grows past `BIND_CACHE_MAX` (an entry keeps its
    /// buffers alive).
    pub(crate) bind_groups: FxHashMap<BindKey, wgpu::BindGroup>,
    /// The last rope cos/sin table staged this step and what it was made from, reused while
    /// the next rope's inputs are equal (q and k of every layer share them).
    pub(crate) rope_table: Option<(crate::ops::RopeSource, Arc<GpuBuf>)>,
    pub(crate) frame: FrameAllocator<Arc<GpuBuf>>,
    /// Weights kept on the device across steps, keyed by the address of their bytes inside a
    /// shared owner (a file mapping). The entry holds the owner, so the memory stays mapped and
    /// its address cannot be reused for other bytes while the entry exists.
    resident: FxHashMap<ResidentKey, Resident>,
    /// A forward step is running. Steps of different sessions take turns: `begin_step` recycles
    /// every frame buffer, which must not happen under a step that still uses them.
    in_step: bool,
    /// The last launches recorded, held back while the next one may still join them into one
    /// launch (see `launch.rs`); recorded before anything else is.
    pub(crate) pending: Option<crate::launch::Pending>,
    /// Small buffers bound where a merged kernel has fewer outputs than bindings.
    pub(crate) spare: Option<[Arc<GpuBuf>; SPARE]>,
    /// Lazy slices whose copy is not recorded yet (`memory::LazySlice`).
    pub(crate) lazy: Vec<std::sync::Weak<crate::memory::LazySlice>>,
    /// Launches recorded since the last submission.
    pub(crate) since_submit: usize,
    /// Something was submitted since the step began (the step's first submission comes after
    /// `FIRST_SUBMIT` launches, the later ones every `SUBMIT_EVERY`).
    pub(crate) submitted_in_step: bool,
    /// Timestamps around every compute pass (`CYB_WGPU_GPU_TIME`).
    pub(crate) gpu_time: Option<crate::gpu_time::GpuTimer>,
    /// Small integer host tensors (ids, positions) uploaded since the frame was reset, by dtype
    /// and bytes: a model passes the same positions to every layer's rope, and each
    /// `queue.write_buffer` costs a staging allocation in the driver, so equal bytes share one
    /// frame buffer. Only integer tensors: the one kernel that writes into an input buffer
    /// (`Op::KvAppend`, in place) writes F32 caches, which must never be shared.
    small_uploads: FxHashMap<(DType, Vec<u8>), Arc<GpuBuf>>,
    /// The step being recorded for a replay (replay.rs).
    pub(crate) capture: Option<crate::replay::Capture>,
}

/// Writes larger than this run on the recording thread (`WgpuBackend::write`).
const DIRECT_WRITE: usize = 1 << 16;

/// Bytes written through staging copies after which they are submitted and waited for, so the
/// driver frees the copies (`WgpuBackend::write`).
const STAGING_FLUSH: u64 = 256 << 20;

/// Uploads up to this many bytes are shared within a frame (`State::small_uploads`).
const SMALL_UPLOAD: usize = 256;

type SharedOwner = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// A weight kept on the device: the owner of its host bytes (held so that their address is not
/// reused), the buffer, and the host shadow small tensors carry (made once, not per use).
struct Resident {
    owner: SharedOwner,
    buf: Arc<GpuBuf>,
    host: HostShadow,
}

/// Kernel (address of its pipeline entry, which lives as long as the backend), parameter
/// buffer id and offset, then the ids of the kernel's buffers.
pub(crate) type BindKey = (usize, u64, u64, [u64; MAX_BUFFERS]);
/// Most storage buffers one kernel binds.
pub(crate) const MAX_BUFFERS: usize = 10;

/// Bytes past its data that a weight's (or any uploaded tensor's) buffer has: matvec_fast.wgsl's
/// `u32w` reads the word after the one it needs, which at the end of a tensor is this tail.
pub(crate) const WEIGHT_TAIL: u64 = 4;
/// Buffers for merged kernels (launch.rs): three small ones bound where a merged kernel writes
/// nothing, and one of `NORM_FUSE_MAX_D` values for the weighted sum of a `ResNorm`.
pub(crate) const SPARE: usize = 4;
pub(crate) const BIND_CACHE_MAX: usize = 8192;

/// Bytes of one parameter block (32 u32 words).
pub(crate) const PARAM_BYTES: u64 = 128;
/// Parameter blocks per arena buffer.
const ARENA_SLOTS: u64 = 512;
/// Parameter blocks an arena's host bytes have room for at first.
const ARENA_START_SLOTS: u64 = 32;

/// A uniform buffer of parameter blocks, filled on the host as launches are recorded.
pub(crate) struct ParamArena {
    buf: Arc<GpuBuf>,
    data: Vec<u8>,
    /// Distance between blocks: the device's uniform offset alignment (≥ 128).
    stride: u64,
}

impl WgpuBackend {
    /// The backend [`WgpuOptions::from_env`](crate::WgpuOptions::from_env) describes.
    pub fn new() -> Result<WgpuBackend> {
        WgpuBackend::from_options(&crate::WgpuOptions::from_env()?)
    }

    /// The backend `options` describe, on the adapter they name, else the best one found.
    pub fn from_options(options: &crate::WgpuOptions) -> Result<WgpuBackend> {
        let ctx = GpuContext::open(options)?;
        let software = ctx.adapter.device_type == format!("{:?}", wgpu::DeviceType::Cpu);
        let gpu_time = crate::gpu_time::GpuTimer::new(&ctx.device, &ctx.queue, options.gpu_time);
        let host_time = options
            .host_time
            .then(crate::host_time::HostTime::default)
            .map(Arc::new);
        Ok(WgpuBackend {
            coop: std::sync::atomic::AtomicBool::new(ctx.adapter.coop),
            submitter: crate::submit::Submitter::new(&ctx.queue, host_time.clone()),
            merge: std::sync::atomic::AtomicBool::new(crate::launch::merging_enabled(&ctx.limits)),
            norm_merge: crate::launch::norm_merging(&ctx.limits),
            kernels: Kernels::new(options.shader_checks, ctx.subgroup),
            ctx,
            state: Mutex::new(State {
                encoder: None,
                pass: None,
                params: None,
                rope_table: None,
                bind_groups: FxHashMap::default(),
                frame: FrameAllocator::new(),
                resident: FxHashMap::default(),
                in_step: false,
                pending: None,
                spare: None,
                lazy: Vec::new(),
                since_submit: 0,
                submitted_in_step: false,
                gpu_time,
                small_uploads: FxHashMap::default(),
                capture: None,
            }),
            step_done: Condvar::new(),
            profile: options.profile.then(crate::profile::Profile::default),
            host_time,
            launches: std::sync::atomic::AtomicU64::new(0),
            spin_wait: if software {
                std::time::Duration::ZERO
            } else {
                SPIN_WAIT
            },
            replay: std::sync::atomic::AtomicBool::new(options.replay),
            replayed: std::sync::atomic::AtomicU64::new(0),
            mvq_min_rows: std::sync::atomic::AtomicUsize::new(crate::ops::matmul::MVQ_MIN_ROWS),
            memory: Arc::default(),
            memory_report: options.memory_report,
            staged: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// This backend with its kernels compiled with (`true`) or without wgpu's shader runtime
    /// checks (`kernels::Kernels::new`; `WgpuOptions::shader_checks` at creation).
    pub fn with_shader_checks(mut self, on: bool) -> WgpuBackend {
        self.kernels = Kernels::new(on, self.kernels.subgroup());
        self
    }

    /// This backend with its reductions on subgroup operations (`true`, where the adapter
    /// offers them: see `subgroup_size`) or through workgroup memory alone (`false`; also
    /// `WgpuOptions::subgroups` off at creation).
    pub fn with_subgroups(mut self, on: bool) -> WgpuBackend {
        let size = if on { self.ctx.subgroup } else { 0 };
        self.kernels = Kernels::new(self.kernels.checked(), size);
        self
    }

    /// The subgroup size the kernels' reductions use, 0 when they use none (the adapter has no
    /// subgroup operations or no one fixed size of 4 to 32 lanes).
    pub fn subgroup_size(&self) -> u32 {
        self.kernels.subgroup()
    }

    /// The adapter in use.
    pub fn adapter(&self) -> &crate::AdapterReport {
        &self.ctx.adapter
    }

    /// Buffers created and bytes owned by the frame allocator (for tests and metrics).
    pub fn frame_stats(&self) -> cyb_backend::FrameStats {
        self.lock().frame.stats()
    }

    /// Times the caller's scope when `CYB_WGPU_HOST_TIME` is set.
    fn host_span(&self) -> Option<crate::host_time::Span<'_>> {
        self.host_time
            .as_deref()
            .map(crate::host_time::HostTime::span)
    }

    /// Host nanoseconds spent recording, when `CYB_WGPU_HOST_TIME` is set:
    /// (recording, finishing and submitting on the submission thread, calls timed).
    pub fn host_time(&self) -> Option<(u64, u64, u64)> {
        self.host_time
            .as_deref()
            .map(crate::host_time::HostTime::totals)
    }

    /// Turns the recording and replaying of decode steps (replay.rs) on or off (for
    /// comparisons; plans made before stay usable).
    pub fn set_step_replay(&self, on: bool) {
        self.replay.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn replay_on(&self) -> bool {
        self.replay.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Decode steps replayed since the backend was made (replay.rs).
    pub fn replayed_steps(&self) -> u64 {
        self.replayed.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Kernel launches recorded since the backend was made (a launch merged from several ops
    /// counts once): tests and benchmarks compare it across steps.
    pub fn launch_count(&self) -> u64 {
        self.launches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Turns the merging of adjacent launches (`launch.rs`) on or off; off, every op is its own
    /// launch (for comparisons). Stays off on an adapter that cannot bind the merged kernels.
    pub fn set_launch_merging(&self, on: bool) {
        let on = on && crate::launch::merging_enabled(&self.ctx.limits);
        let mut st = self.lock();
        self.flush(&mut st);
        self.merge.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Decode matvecs of at least `rows` weight rows (`None`: none) in Q8_0, Q4_0 or Q6_K
    /// quantize their activation row to 16-bit levels and use integer dot products
    /// (matvec_q16.wgsl); for tests and comparisons.
    pub fn set_matvec_q16_rows(&self, rows: Option<usize>) {
        self.mvq_min_rows.store(
            rows.unwrap_or(usize::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Runs prefill matmuls of F16 and quantized weights on cooperative matrices (`true`,
    /// where the device has them: see `coop_matmul`) or on the f32 tiled kernel (`false`); for
    /// tests and comparisons.
    pub fn set_coop_matmul(&self, on: bool) {
        self.coop.store(
            on && self.ctx.adapter.coop,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Whether prefill matmuls of F16 and quantized weights run on cooperative matrices
    /// (tensor cores): products of f16-rounded activations and weights summed in f32.
    pub fn coop_matmul(&self) -> bool {
        self.coop.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn create(
        &self,
        size: u64,
        usage: BufferUsage,
        kind: MemKind,
    ) -> Result<Arc<GpuBuf>> {
        if size > self.ctx.limits.max_buffer_size {
            return Err(Error::OutOfMemory {
                what: format!(
                    "a wgpu buffer (the adapter's largest is {} bytes)",
                    self.ctx.limits.max_buffer_size
                ),
                bytes: size,
                available: None,
            });
        }
        let usage = match usage {
            BufferUsage::Storage => {
                wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST
            }
            BufferUsage::Uniform => wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            BufferUsage::Staging => wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        };
        let buffer = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage,
            mapped_at_creation: false,
        });
        Ok(Arc::new(GpuBuf::counted(buffer, &self.memory, kind)))
    }

    /// A frame buffer of at least `bytes` (rounded to 4) that no live tensor holds, for the host
    /// to write (uploads, tables, parameters) or to read back: never one used earlier in this
    /// step, since a host write would land before the step's recorded work that reads it.
    pub(crate) fn frame_buf(
        &self,
        st: &mut State,
        bytes: usize,
        usage: BufferUsage,
    ) -> Result<Arc<GpuBuf>> {
        self.frame_take(st, bytes, usage, false)
    }

    /// A storage frame buffer of at least `bytes` for kernels (and copies) to write: it may be
    /// one that an earlier op of this step used and nothing holds any more, as the device runs
    /// the step's work in recorded order.
    pub(crate) fn frame_out(&self, st: &mut State, bytes: usize) -> Result<Arc<GpuBuf>> {
        self.frame_take(st, bytes, BufferUsage::Storage, true)
    }

    fn frame_take(
        &self,
        st: &mut State,
        bytes: usize,
        usage: BufferUsage,
        reuse: bool,
    ) -> Result<Arc<GpuBuf>> {
        let size = padded(bytes);
        // Held by the allocator alone, and bound by no launch held back for merging.
        let pending = &st.pending;
        let idle = |b: &Arc<GpuBuf>| {
            reuse && Arc::strong_count(b) == 1 && !pending.as_ref().is_some_and(|p| p.binds(b.id))
        };
        loop {
            let b = st
                .frame
                .alloc_reusing(size, usage, idle, |s| self.create(s, usage, MemKind::Frame))?;
            // The allocator and this handle hold two references; more means a tensor from an
            // earlier step still uses it (it stays checked out until the next reset).
            if Arc::strong_count(&b) <= 2 {
                return Ok(b);
            }
        }
    }

    /// A new F32 (or other dtype) tensor on this device for an op's output.
    pub(crate) fn output(
        &self,
        st: &mut State,
        dims: &[usize],
        dtype: DType,
    ) -> Result<(Tensor, Arc<GpuBuf>)> {
        let shape = Shape::new(dims)?;
        let len = dtype
            .bytes_for(shape.numel())
            .ok_or_else(|| Error::invalid("wgpu output", format!("{dtype} {shape}")))?;
        let buf = self.frame_out(st, len)?;
        let view = DeviceView {
            buf: buf.clone(),
            len,
            host: None,
            lazy: None,
        };
        Ok((view.into_tensor(shape, dtype)?, buf))
    }

    /// A frame buffer holding a rope's cos/sin `table`, made by `recipe` from the positions
    /// `positions` (recorded as such for a replay).
    pub(crate) fn stage_rope(
        &self,
        st: &mut State,
        table: &[u8],
        recipe: crate::ops::RopeRecipe,
        positions: &[u8],
    ) -> Result<Arc<GpuBuf>> {
        let buf = self.frame_buf(st, table.len(), BufferUsage::Storage)?;
        self.write(&buf.buffer, table);
        if let Some(c) = st.capture.as_mut() {
            c.events.push(crate::replay::Event::Rope {
                id: buf.id,
                buffer: buf.buffer.clone(),
                recipe,
                positions: positions.to_vec(),
            });
        }
        Ok(buf)
    }

    /// Writes `data` to the start of `buf`, ordered with the submissions (submit.rs): small
    /// writes go to the submission thread as a copy; large ones (weights) wait for it to be
    /// idle and write from here, without the copy.
    pub(crate) fn write(&self, buf: &wgpu::Buffer, data: &[u8]) {
        let len = padded(data.len()) as usize;
        if len <= DIRECT_WRITE {
            self.submitter.write(buf, padded_vec(data));
            return;
        }
        self.submitter.idle();
        if len == data.len() {
            self.ctx.queue.write_buffer(buf, 0, data);
        } else {
            self.ctx.queue.write_buffer(buf, 0, &padded_vec(data));
        }
        // Each write holds a staging copy of its bytes in the driver until a submission that
        // carries it has completed. A model's weights are written while its first step is
        // recorded, so without this every weight would be held twice at once.
        let staged = self
            .staged
            .fetch_add(len as u64, std::sync::atomic::Ordering::Relaxed)
            + len as u64;
        if staged >= STAGING_FLUSH {
            self.staged.store(0, std::sync::atomic::Ordering::Relaxed);
            // Pending writes always run before the next submission's commands, so submitting
            // them now orders nothing differently.
            self.ctx.queue.submit(std::iter::empty());
            let _ = self.ctx.device.poll(wgpu::PollType::wait_indefinitely());
        }
    }

    /// A parameter block holding `words` in the current arena (a new arena when it is full);
    /// returns the arena's buffer and the block's offset.
    pub(crate) fn param_slot(&self, st: &mut State, words: &[u8]) -> Result<(Arc<GpuBuf>, u64)> {
        let full = st
            .params
            .as_ref()
            .is_none_or(|a| a.data.len() as u64 + a.stride > a.stride * ARENA_SLOTS);
        if full {
            self.write_params(st);
            let stride =
                u64::from(self.ctx.limits.min_uniform_buffer_offset_alignment).max(PARAM_BYTES);
            let buf = self.frame_buf(st, (stride * ARENA_SLOTS) as usize, BufferUsage::Uniform)?;
            // Sized for the blocks one submission usually holds, not for the whole arena: the
            // bytes go to the submission thread and are freed there, so a full-size buffer
            // per submission would be fresh memory (page faults) every time.
            st.params = Some(ParamArena {
                buf,
                data: Vec::with_capacity((stride * ARENA_START_SLOTS) as usize),
                stride,
            });
        }
        let arena = st
            .params
            .as_mut()
            .ok_or_else(|| Error::invalid("wgpu", "internal: no parameter arena"))?;
        let offset = arena.data.len() as u64;
        arena.data.extend_from_slice(words);
        arena.data.resize((offset + arena.stride) as usize, 0);
        Ok((arena.buf.clone(), offset))
    }

    /// Writes the current arena's blocks to its buffer (before the launches that read them
    /// are submitted) and retires it.
    fn write_params(&self, st: &mut State) {
        if let Some(a) = st.params.take() {
            if !a.data.is_empty() {
                self.submitter.write(&a.buf.buffer, a.data);
            }
        }
    }

    /// Submits what was recorded.
    pub(crate) fn flush(&self, st: &mut State) {
        self.emit_pending(st);
        st.pass = None;
        st.since_submit = 0;
        self.write_params(st);
        if let Some(enc) = st.encoder.take() {
            self.submitter.submit(enc);
            st.submitted_in_step = true;
        }
    }

    /// `read` applied to the bytes of a tensor of this backend (one submission and one wait;
    /// the bytes are those of the mapped staging buffer, copied only by `read`).
    fn read_mapped<R>(&self, t: &Tensor, read: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let view = device_view(t)?;
        if let Some(h) = &view.host {
            return Ok(read(h));
        }
        let mut st = self.lock();
        if let Some(c) = st.capture.as_mut() {
            c.spoil("a result was read back");
        }
        ops::materialize_input(self, &mut st, t)?;
        let staging = self.frame_buf(&mut st, view.len, BufferUsage::Staging)?;
        let size = padded(view.len);
        let device = &self.ctx.device;
        // A copy is recorded on the encoder itself, outside any compute pass, after every
        // launch held back.
        self.emit_pending(&mut st);
        st.pass = None;
        let enc = st.encoder.get_or_insert_with(|| {
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None })
        });
        enc.copy_buffer_to_buffer(&view.buffer()?.buffer, 0, &staging.buffer, 0, size);
        self.flush(&mut st);
        drop(st);
        let t0 = std::time::Instant::now();
        self.submitter.idle();
        let t1 = std::time::Instant::now();
        let slice = staging.buffer.slice(0..size);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        // Decode waits here for every token: polling first wakes as soon as the GPU is done
        // (a blocking wait sleeps in the driver and measured ~7% slower decode on the H200),
        // up to `spin_wait`, then sleeps.
        let mut done = None;
        let deadline = t1 + self.spin_wait;
        while done.is_none() && std::time::Instant::now() < deadline {
            self.ctx
                .device
                .poll(wgpu::PollType::Poll)
                .map_err(|e| Error::invalid("download", format!("wgpu: {e}")))?;
            done = rx.try_recv().ok();
            std::hint::spin_loop();
        }
        if done.is_none() {
            self.ctx
                .device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| Error::invalid("download", format!("wgpu: {e}")))?;
        }
        let t2 = std::time::Instant::now();
        self.ctx.take_error("download")?;
        match done.map_or_else(|| rx.recv(), Ok) {
            Ok(Ok(())) => {}
            _ => {
                return Err(Error::invalid(
                    "download",
                    "wgpu: mapping the staging buffer failed",
                ))
            }
        }
        let out = {
            let range = slice
                .get_mapped_range()
                .map_err(|e| Error::invalid("download", format!("wgpu: {e}")))?;
            range.get(..view.len).map(read)
        };
        staging.buffer.unmap();
        if let Some(h) = &self.host_time {
            h.add_read([t0, t1, t2, std::time::Instant::now()]);
        }
        out.ok_or_else(|| Error::invalid("download", "staging buffer smaller than the tensor"))
    }

    /// Waits until every submitted command has run (tests and benchmarks).
    pub fn synchronize(&self) -> Result<()> {
        let mut st = self.lock();
        self.flush(&mut st);
        drop(st);
        self.submitter.idle();
        self.ctx
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::invalid("synchronize", format!("wgpu: {e}")))?;
        self.ctx.take_error("synchronize")
    }

    /// Bytes of device memory held for weights (the resident uploads of shared storage).
    pub fn resident_bytes(&self) -> u64 {
        let st = self.lock();
        st.resident.values().map(|r| r.buf.buffer.size()).sum()
    }

    /// The device copy of a weight in shared storage, uploaded on first use.
    fn resident_upload(
        &self,
        st: &mut State,
        owner: &SharedOwner,
        data: &[u8],
        dtype: DType,
    ) -> Result<(Arc<GpuBuf>, HostShadow)> {
        let key = ResidentKey {
            addr: data.as_ptr() as usize,
            len: data.len(),
            dtype,
        };
        if let Some(r) = st.resident.get(&key) {
            return Ok((r.buf.clone(), r.host.clone()));
        }
        if let Some(c) = st.capture.as_mut() {
            c.spoil("a weight was uploaded");
        }
        let buf = self.create(
            padded(data.len()) + WEIGHT_TAIL,
            BufferUsage::Storage,
            MemKind::Weights,
        )?;
        self.write(&buf.buffer, data);
        let host = shadow(data);
        let resident = Resident {
            owner: owner.clone(),
            buf: buf.clone(),
            host: host.clone(),
        };
        st.resident.insert(key, resident);
        Ok((buf, host))
    }
}

/// The wgpu view behind a tensor of this backend.
pub(crate) fn device_view(t: &Tensor) -> Result<&DeviceView> {
    match t.storage() {
        Storage::Device(d) => d
            .as_any()
            .downcast_ref::<DeviceView>()
            .ok_or_else(|| Error::invalid("wgpu", format!("tensor lives on {}", d.backend()))),
        _ => Err(Error::invalid(
            "wgpu",
            "expected a tensor on the wgpu device",
        )),
    }
}

/// The buffer behind a tensor of this backend.
pub(crate) fn gpu_buf(t: &Tensor) -> Result<Arc<GpuBuf>> {
    device_view(t)?.buffer()
}

impl Backend for WgpuBackend {
    /// Drops the device copies of weights whose storage only this backend still holds (the
    /// model that mapped them is gone), and the bind groups that may name their buffers.
    fn release_unowned(&self) {
        let mut st = self.lock();
        let key = |r: &Resident| Arc::as_ptr(&r.owner) as *const () as usize;
        let mut held: FxHashMap<usize, usize> = FxHashMap::default();
        for r in st.resident.values() {
            *held.entry(key(r)).or_default() += 1;
        }
        let before = st.resident.len();
        st.resident
            .retain(|_, r| Arc::strong_count(&r.owner) > held.get(&key(r)).copied().unwrap_or(0));
        if st.resident.len() != before {
            st.bind_groups.clear();
        }
    }

    fn name(&self) -> &str {
        "wgpu"
    }

    fn device_memory(&self) -> Option<cyb_backend::DeviceMemory> {
        Some(self.memory.get())
    }

    fn supports(&self, op: &Op, inputs: &[TensorInfo]) -> bool {
        cyb_ops::output_infos(op, inputs).is_ok() && ops::supports(self, op, inputs)
    }

    fn host_memory(&self) -> bool {
        false
    }

    fn execute(&self, op: &Op, inputs: &[Tensor], _ctx: &mut ExecContext) -> Result<Vec<Tensor>> {
        let _timed = self.host_span();
        let infos: Vec<TensorInfo> = inputs.iter().map(Tensor::info).collect();
        let declined = || Error::UnsupportedOp {
            op: op.name().into(),
            backend: "wgpu".into(),
            input_dtype: infos.first().map_or(DType::F32, |i| i.dtype),
        };
        // The shape rule runs once here (`supports` would run it again).
        let Ok(outs) = cyb_ops::output_infos(op, &infos) else {
            return Err(declined());
        };
        if !ops::supports(self, op, &infos) {
            return Err(declined());
        }
        let mut st = self.lock();
        for (i, t) in inputs.iter().enumerate() {
            // Attention reads a lazy slice of the KV cache (keys, values) in place.
            let in_place = matches!(op, Op::Sdpa { .. }) && (i == 1 || i == 2);
            if !in_place {
                ops::materialize_input(self, &mut st, t)?;
            }
        }
        let result = ops::execute(self, &mut st, op, inputs, &outs)?;
        result.ok_or_else(declined)
    }

    fn alloc(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let shape = Shape::new(shape)?;
        let len = dtype
            .bytes_for(shape.numel())
            .ok_or_else(|| Error::invalid("alloc", format!("{dtype} {shape}")))?;
        // A fresh buffer, not a frame one: the caller may keep it across steps. wgpu zeroes it.
        let buf = self.create(padded(len), BufferUsage::Storage, MemKind::Kept)?;
        let view = DeviceView {
            buf,
            len,
            host: None,
            lazy: None,
        };
        view.into_tensor(shape, dtype)
    }

    fn upload(&self, data: &[u8], shape: &[usize], dtype: DType) -> Result<Tensor> {
        let mut st = self.lock();
        let small = data.len() <= SMALL_UPLOAD && matches!(dtype, DType::I32 | DType::I64);
        let known = if small {
            st.small_uploads.get(&(dtype, data.to_vec())).cloned()
        } else {
            None
        };
        let buf = match known {
            Some(b) => b,
            None => {
                let b = self.frame_buf(
                    &mut st,
                    data.len() + WEIGHT_TAIL as usize,
                    BufferUsage::Storage,
                )?;
                self.write(&b.buffer, data);
                if let Some(c) = st.capture.as_mut() {
                    c.events.push(crate::replay::Event::Write {
                        id: b.id,
                        buffer: b.buffer.clone(),
                        bytes: data.to_vec(),
                    });
                }
                if small {
                    st.small_uploads.insert((dtype, data.to_vec()), b.clone());
                }
                b
            }
        };
        drop(st);
        let view = DeviceView {
            buf,
            len: data.len(),
            host: shadow(data),
            lazy: None,
        };
        view.into_tensor(Shape::new(shape)?, dtype)
    }

    fn upload_tensor(&self, t: &Tensor) -> Result<Tensor> {
        let _timed = self.host_span();
        let Storage::Shared { owner, .. } = t.storage() else {
            let bytes = t
                .host_bytes()
                .ok_or_else(|| Error::invalid("upload", "tensor is not in host memory"))?;
            return self.upload(bytes, t.dims(), t.dtype());
        };
        let data = t
            .host_bytes()
            .ok_or_else(|| Error::invalid("upload", "shared storage out of range"))?;
        let mut st = self.lock();
        let (buf, host) = self.resident_upload(&mut st, owner, data, t.dtype())?;
        drop(st);
        let view = DeviceView {
            buf,
            len: data.len(),
            host,
            lazy: None,
        };
        view.into_tensor(Shape::new(t.dims())?, t.dtype())
    }

    fn download_f32(&self, t: &Tensor) -> Result<Vec<f32>> {
        if t.host_bytes().is_some() {
            return t.to_f32_vec();
        }
        // Converted straight from the mapped bytes (decode reads a vocabulary of logits per
        // token), with no host tensor in between.
        self.read_mapped(t, |b| cyb_tensor::decode_f32_vec(t.dtype(), b, t.numel()))?
    }

    fn download(&self, t: &Tensor) -> Result<Tensor> {
        if t.host_bytes().is_some() {
            return Ok(t.clone());
        }
        self.read_mapped(t, |b| Tensor::from_bytes(t.dims(), t.dtype(), b))?
    }

    fn begin_step(&self, _ctx: &mut ExecContext) -> Result<()> {
        let mut st = self.lock();
        while st.in_step {
            st = self
                .step_done
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
        st.in_step = true;
        if let Some(h) = &self.host_time {
            h.begin_step(self.launch_count());
        }
        let _timed = self.host_span();
        self.flush(&mut st);
        st.rope_table = None;
        let released = st.frame.reset();
        if !released.is_empty() {
            // Bind groups naming a released buffer would keep it alive.
            let gone: rustc_hash::FxHashSet<u64> = released.iter().map(|b| b.id).collect();
            st.bind_groups
                .retain(|k, _| !gone.contains(&k.1) && !k.3.iter().any(|id| gone.contains(id)));
        }
        st.small_uploads.clear();
        st.capture = None;
        st.submitted_in_step = false;
        Ok(())
    }

    fn end_step(&self, _ctx: &mut ExecContext) -> Result<()> {
        let _timed = self.host_span();
        let mut st = self.lock();
        st.capture = None;
        self.flush(&mut st);
        if let Some(g) = st.gpu_time.as_mut() {
            self.submitter.idle();
            g.end_step(&self.ctx.device, &self.ctx.queue);
        }
        st.in_step = false;
        drop(st);
        if let Some(h) = &self.host_time {
            h.end_step();
        }
        self.step_done.notify_one();
        self.ctx.take_error("end_step")
    }

    fn begin_capture(&self) -> bool {
        self.capture_begin()
    }

    fn end_capture(&self, output: &Tensor) -> Option<cyb_backend::Recording> {
        self.capture_end(output)
    }

    fn plan_replay(
        &self,
        steps: Vec<(cyb_backend::Recording, Vec<Vec<u8>>)>,
        output: &Tensor,
    ) -> Result<Option<cyb_backend::Recording>> {
        let _timed = self.host_span();
        self.make_plan(steps, output)
    }

    fn replay(
        &self,
        plan: &cyb_backend::Recording,
        steps: i64,
        inputs: &[&[u8]],
    ) -> Result<Tensor> {
        let _timed = self.host_span();
        self.run_plan(plan, steps, inputs)
    }
}

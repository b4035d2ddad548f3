//! Recording a decode step and running it again without the model (`Backend::begin_capture`,
//! `end_capture`, `plan_replay`, `replay`).
//!
//! On a fast GPU a decode step is bound by the host: every op goes through the model, the
//! dispatcher, the shape rules and the op code before its launch is recorded, ~10 µs per
//! launch, as long as the GPU takes for the step. Yet one decode step of a session is the
//! same as the next: the same kernels on the same buffers (the frame allocator hands them out
//! in the same order every step), and only a few things change with the token and its
//! position: the uploaded token id and position, the rope's cos/sin table, and parameter
//! words that follow the length of the KV cache (attention's key count).
//!
//! So the model records three consecutive decode steps (`Capture`: every launch with its
//! parameter words and buffers, every host write) and asks for a plan. The plan exists only
//! when the three recordings show one step: the same launches of the same kernels on the
//! same buffers; every host write either one of the step's host inputs (matched by its bytes
//! in all three), a constant, or a rope table made from one of those inputs; and every
//! parameter word either constant or changing by the same amount from step to step (affine in
//! the position). Anything else, or a step that read a result back or uploaded a weight,
//! gives no plan and steps run as before. A replay writes the inputs, the tables and the
//! parameter words for its position and records the launches with bind groups made once. The
//! caller keys plans by the power of two above the KV length, so that nothing that is sized
//! by a power of two of it (attention's score scratch) changes under a plan.

use crate::backend::{gpu_buf, WgpuBackend, PARAM_BYTES};
use crate::kernels::{Kernel, KernelKey};
use crate::memory::padded_vec;
use crate::memory::GpuBuf;
use crate::ops::RopeRecipe;
use crate::submit::Job;
use cyb_backend::{BufferUsage, Recording};
use cyb_tensor::{Error, Result, Tensor};
use std::sync::Arc;

/// One thing a recorded step did that a replay repeats.
pub(crate) enum Event {
    /// A kernel launch (after merging).
    Launch(Box<Launched>),
    /// Host bytes written to a frame buffer (an uploaded host tensor).
    Write {
        id: u64,
        buffer: wgpu::Buffer,
        bytes: Vec<u8>,
    },
    /// A rope's cos/sin table, made on the host from positions `positions`.
    Rope {
        id: u64,
        buffer: wgpu::Buffer,
        recipe: RopeRecipe,
        positions: Vec<u8>,
    },
}

/// A recorded launch: its kernel, parameter words, buffers and workgroups.
pub(crate) struct Launched {
    pub(crate) key: KernelKey,
    pub(crate) kernel: Arc<Kernel>,
    pub(crate) words: [u32; 32],
    pub(crate) bufs: crate::launch::Bufs,
    pub(crate) groups: u32,
}

/// A step being recorded (`State::capture`).
#[derive(Default)]
pub(crate) struct Capture {
    pub(crate) events: Vec<Event>,
    /// Why this step cannot be replayed, once something shows it.
    pub(crate) spoiled: Option<&'static str>,
}

impl Capture {
    pub(crate) fn spoil(&mut self, why: &'static str) {
        self.spoiled.get_or_insert(why);
    }
}

/// What `end_capture` returns: the events and the buffer of the step's output.
struct Recorded {
    events: Vec<Event>,
    output: u64,
}

/// Where a replayed write's bytes come from.
enum Fill {
    /// Host input i of the step.
    Input(usize),
    /// The same bytes every step.
    Const(Vec<u8>),
    /// A rope table from the positions in host input i.
    Rope(RopeRecipe, usize),
}

struct PlanWrite {
    buffer: wgpu::Buffer,
    fill: Fill,
}

struct PlanLaunch {
    key: KernelKey,
    kernel: Arc<Kernel>,
    bind: wgpu::BindGroup,
    groups: u32,
}

/// A replayable step (`plan_replay`).
pub(crate) struct Plan {
    writes: Vec<PlanWrite>,
    launches: Vec<PlanLaunch>,
    /// One parameter block per launch, `stride` bytes apart, in a buffer of the plan's own.
    params: Arc<GpuBuf>,
    /// The blocks' words at the first recorded step.
    words: Vec<u32>,
    /// (word index, change per step) of the words that follow the position.
    deltas: Vec<(usize, u32)>,
    /// Byte length of each host input.
    input_lens: Vec<usize>,
    output: Tensor,
    /// The frame buffers the plan binds or writes, held so that the frame allocator hands
    /// none of them out while the plan lives: a replay writes them without allocating, and a
    /// tensor another step kept in one of them would be overwritten.
    _reserved: Vec<Arc<GpuBuf>>,
    /// The plan's launches encoded and finished ahead of its next replay (`run_plan`).
    prebuilt: std::sync::Mutex<Option<wgpu::CommandBuffer>>,
}

/// Which of the host inputs `bytes` equals in every recording (`per_step[s]` the bytes of
/// step s, `inputs[s]` its inputs): `Ok(Some(i))` for exactly one, `Ok(None)` for none,
/// `Err` when ambiguous.
fn input_of(per_step: &[&[u8]], inputs: &[Vec<Vec<u8>>]) -> std::result::Result<Option<usize>, ()> {
    let n = inputs.first().map_or(0, Vec::len);
    let mut found = None;
    for i in 0..n {
        let all = per_step
            .iter()
            .zip(inputs)
            .all(|(b, ins)| ins.get(i).is_some_and(|x| x.as_slice() == *b));
        if all {
            if found.is_some() {
                return Err(());
            }
            found = Some(i);
        }
    }
    Ok(found)
}

impl WgpuBackend {
    /// See `Backend::begin_capture`.
    pub(crate) fn capture_begin(&self) -> bool {
        let mut st = self.lock();
        let per_kernel = st.gpu_time.as_ref().is_some_and(|g| g.per_kernel);
        if !self.replay_on() || self.profile.is_some() || per_kernel {
            return false;
        }
        // What is held belongs to the ops before the capture.
        self.emit_pending(&mut st);
        st.capture = Some(Capture::default());
        true
    }

    /// See `Backend::end_capture`.
    pub(crate) fn capture_end(&self, output: &Tensor) -> Option<Recording> {
        let mut st = self.lock();
        // The held launches belong to this step.
        self.emit_pending(&mut st);
        let capture = st.capture.take()?;
        if let Some(why) = capture.spoiled {
            tracing::debug!(why, "wgpu: step not recorded for replay");
            return None;
        }
        let output = gpu_buf(output).ok()?.id;
        Some(Box::new(Recorded {
            events: capture.events,
            output,
        }))
    }

    /// See `Backend::plan_replay`: `Ok(None)` when the recordings are not one step.
    pub(crate) fn make_plan(
        &self,
        steps: Vec<(Recording, Vec<Vec<u8>>)>,
        output: &Tensor,
    ) -> Result<Option<Recording>> {
        let mut recs = Vec::with_capacity(steps.len());
        let mut inputs = Vec::with_capacity(steps.len());
        for (r, i) in steps {
            match r.downcast::<Recorded>() {
                Ok(r) => recs.push(*r),
                Err(_) => return Ok(None),
            }
            inputs.push(i);
        }
        let no = |why: &str| {
            tracing::debug!(why, "wgpu: no replay plan");
            Ok(None)
        };
        let Some(first) = recs.first() else {
            return no("no recordings");
        };
        if recs.len() < 3 {
            return no("fewer than three recordings");
        }
        let out_id = gpu_buf(output)?.id;
        if recs
            .iter()
            .any(|r| r.output != out_id || r.events.len() != first.events.len())
        {
            return no("the steps differ in their output or their length");
        }
        let stride =
            u64::from(self.ctx.limits.min_uniform_buffer_offset_alignment).max(PARAM_BYTES);
        let block = (stride / 4) as usize;
        let mut writes = Vec::new();
        let mut launch_events = Vec::new();
        let mut words = Vec::new();
        let mut deltas = Vec::new();
        for (e, ev) in first.events.iter().enumerate() {
            let others: Vec<&Event> = recs.iter().map(|r| &r.events[e]).collect();
            match ev {
                Event::Launch(l) => {
                    let Launched {
                        key,
                        kernel,
                        words: w0,
                        bufs,
                        groups,
                    } = &**l;
                    let mut per_step = Vec::with_capacity(others.len());
                    for o in &others {
                        let Event::Launch(o) = o else {
                            return no("events differ");
                        };
                        let (k, w, b, g) = (&o.kernel, &o.words, &o.bufs, &o.groups);
                        let same_bufs =
                            b.len() == bufs.len() && b.iter().zip(bufs).all(|(x, y)| x.0 == y.0);
                        if !Arc::ptr_eq(k, kernel) || g != groups || !same_bufs {
                            return no("launches differ");
                        }
                        per_step.push(*w);
                    }
                    let base = launch_events.len() * block;
                    words.resize(base + block, 0);
                    for i in 0..32 {
                        let d = per_step[1][i].wrapping_sub(per_step[0][i]);
                        let affine = per_step
                            .windows(2)
                            .all(|p| p[1][i].wrapping_sub(p[0][i]) == d);
                        if !affine {
                            return no("a parameter word does not follow the position");
                        }
                        words[base + i] = w0[i];
                        if d != 0 {
                            deltas.push((base + i, d));
                        }
                    }
                    launch_events.push((key.clone(), kernel.clone(), bufs.clone(), *groups));
                }
                Event::Write { id, buffer, bytes } => {
                    let mut per_step = Vec::with_capacity(others.len());
                    for o in &others {
                        match o {
                            Event::Write {
                                id: i, bytes: b, ..
                            } if i == id => per_step.push(b.as_slice()),
                            _ => return no("writes differ"),
                        }
                    }
                    let fill = match input_of(&per_step, &inputs) {
                        Ok(Some(i)) => Fill::Input(i),
                        Ok(None) if per_step.iter().all(|b| *b == bytes.as_slice()) => {
                            Fill::Const(bytes.clone())
                        }
                        _ => return no("an upload is neither an input nor a constant"),
                    };
                    writes.push(PlanWrite {
                        buffer: buffer.clone(),
                        fill,
                    });
                }
                Event::Rope {
                    id, buffer, recipe, ..
                } => {
                    let mut per_step = Vec::with_capacity(others.len());
                    for o in &others {
                        match o {
                            Event::Rope {
                                id: i,
                                recipe: r,
                                positions,
                                ..
                            } if i == id && r == recipe => per_step.push(positions.as_slice()),
                            _ => return no("rope tables differ"),
                        }
                    }
                    let Ok(Some(i)) = input_of(&per_step, &inputs) else {
                        return no("a rope table's positions are not an input");
                    };
                    writes.push(PlanWrite {
                        buffer: buffer.clone(),
                        fill: Fill::Rope(recipe.clone(), i),
                    });
                }
            }
        }
        if launch_events.is_empty() {
            return no("no launches");
        }
        // This is the last recorded step, whose frame buffers are still handed out.
        let mut frame: rustc_hash::FxHashMap<u64, Arc<GpuBuf>> = self
            .lock()
            .frame
            .in_use()
            .map(|b| (b.id, b.clone()))
            .collect();
        let bound = launch_events.iter().flat_map(|l| l.2.iter().map(|b| b.0));
        let written = first.events.iter().filter_map(|e| match e {
            Event::Write { id, .. } | Event::Rope { id, .. } => Some(*id),
            Event::Launch(_) => None,
        });
        let reserved = bound
            .chain(written)
            .filter_map(|id| frame.remove(&id))
            .collect();
        let params = self.create(
            stride * launch_events.len() as u64,
            BufferUsage::Uniform,
            crate::memory::MemKind::Other,
        )?;
        let launches = launch_events
            .into_iter()
            .enumerate()
            .map(|(i, (key, kernel, bufs, groups))| {
                let bind = self.bind_group(&kernel, &params, i as u64 * stride, &bufs);
                PlanLaunch {
                    key,
                    kernel,
                    bind,
                    groups,
                }
            })
            .collect();
        let input_lens = inputs
            .last()
            .map(|i| i.iter().map(Vec::len).collect())
            .unwrap_or_default();
        Ok(Some(Box::new(Plan {
            writes,
            launches,
            params,
            words,
            deltas,
            input_lens,
            output: output.clone(),
            _reserved: reserved,
            prebuilt: std::sync::Mutex::default(),
        })))
    }

    /// See `Backend::replay`.
    pub(crate) fn run_plan(
        &self,
        plan: &Recording,
        steps: i64,
        inputs: &[&[u8]],
    ) -> Result<Tensor> {
        let plan = plan
            .downcast_ref::<Plan>()
            .ok_or_else(|| Error::invalid("wgpu replay", "not a plan of this backend"))?;
        let lens: Vec<usize> = inputs.iter().map(|i| i.len()).collect();
        if lens != plan.input_lens {
            return Err(Error::invalid(
                "wgpu replay",
                format!(
                    "inputs of {lens:?} bytes for a step recorded with {:?}",
                    plan.input_lens
                ),
            ));
        }
        let mut st = self.lock();
        self.flush(&mut st);
        let mut writes: Vec<(&wgpu::Buffer, std::borrow::Cow<'_, [u8]>)> = Vec::new();
        for w in &plan.writes {
            let bytes = match &w.fill {
                Fill::Input(i) => inputs[*i].into(),
                Fill::Const(b) => b.as_slice().into(),
                Fill::Rope(recipe, i) => bytemuck::cast_slice(&recipe.table(inputs[*i])?)
                    .to_vec()
                    .into(),
            };
            writes.push((&w.buffer, bytes));
        }
        let mut words = plan.words.clone();
        // Wrapping arithmetic: a word that grows by d per step is w0 + d·steps modulo 2^32,
        // also for steps before the first recorded one.
        let s = steps as u32;
        for &(i, d) in &plan.deltas {
            words[i] = words[i].wrapping_add(d.wrapping_mul(s));
        }
        writes.push((&plan.params.buffer, bytemuck::cast_slice(&words).into()));
        // Timed or profiled steps take the launch path, which times them.
        let prebuild = st.gpu_time.is_none() && self.profile.is_none();
        if !prebuild {
            for (buffer, bytes) in &writes {
                self.write(buffer, bytes);
            }
            for l in &plan.launches {
                self.encode(&mut st, &l.key, &l.kernel, &l.bind, l.groups)?;
            }
        } else {
            let ready = plan
                .prebuilt
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            let commands = ready.unwrap_or_else(|| self.plan_commands(plan));
            // The writes and the submission run here, not on the submission thread, which is
            // idle at a step's beginning and would first have to wake up: every microsecond
            // of this delays the GPU's start.
            let mut jobs: Vec<Job> = writes
                .into_iter()
                .map(|(buffer, bytes)| Job::Write(buffer.clone(), padded_vec(&bytes)))
                .collect();
            jobs.push(Job::SubmitFinished(commands));
            self.submitter.run_here(jobs);
            st.submitted_in_step = true;
            self.launches.fetch_add(
                plan.launches.len() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
            drop(st);
            // The next replay's commands, finished while the GPU runs this one's.
            let next = self.plan_commands(plan);
            *plan
                .prebuilt
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(next);
        }
        self.replayed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(plan.output.clone())
    }

    /// The plan's launches in one compute pass of one finished command buffer. Every replay
    /// of a plan runs the same commands on the same buffers (only the bytes written before
    /// them change), so they are finished ahead: wgpu's `finish` (its validation, buffer
    /// state tracking and barriers, ~7 µs per launch on the H200's host) then runs while the
    /// GPU is busy with the step before, and a replay submits the whole step at once.
    fn plan_commands(&self, plan: &Plan) -> wgpu::CommandBuffer {
        let mut enc = self
            .ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: None,
            });
            for l in &plan.launches {
                self.dispatch_in(&mut pass, &l.kernel, &l.bind, l.groups);
            }
        }
        enc.finish()
    }
}

//! The dispatcher of spec/execution-contract: for each op, the first backend of the chain that
//! supports it runs it; the chain always ends at the CPU reference, which supports every op.
//! Every decision is counted, and every fallback is recorded and traced (`--verbose` shows it).

use crate::{Backend, ExecContext, ReferenceBackend};
use cyb_ops::Op;
use cyb_tensor::{Error, Result, Tensor, TensorInfo};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

/// One fallback: `op` could not run on `from` and went to `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispatchRecord {
    pub op: String,
    pub from: String,
    pub to: String,
    pub reason: String,
}

/// Counts of where ops ran, and the fallbacks that happened.
#[derive(Clone, Debug, Default)]
pub struct DispatchLog {
    /// (op, backend) → how many times it ran there.
    pub executed: BTreeMap<(String, String), u64>,
    /// (op, from, to) → how many times it fell back.
    pub fallbacks: BTreeMap<(String, String, String), u64>,
    /// The first fallback of each (op, from, to), with its reason.
    pub first_fallbacks: Vec<DispatchRecord>,
}

impl DispatchLog {
    /// A human-readable table: where each op ran, then the fallbacks with their reasons.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        for ((op, backend), n) in &self.executed {
            let _ = writeln!(s, "{op:<12} on {backend:<10} {n:>8}x");
        }
        for r in &self.first_fallbacks {
            let n = self
                .fallbacks
                .get(&(r.op.clone(), r.from.clone(), r.to.clone()))
                .copied()
                .unwrap_or(0);
            let _ = writeln!(
                s,
                "fallback {} {} -> {} ({n}x): {}",
                r.op, r.from, r.to, r.reason
            );
        }
        s
    }
}

/// Routes ops along a backend chain that ends at the CPU reference.
pub struct Dispatcher {
    chain: Vec<Arc<dyn Backend>>,
    log: Mutex<DispatchLog>,
    /// (op name, index in `chain`) → runs: counted without allocating (a decode step runs
    /// hundreds of ops); named into `DispatchLog::executed` when the log is read.
    executed: Mutex<HashMap<(&'static str, usize), u64>>,
}

impl Dispatcher {
    /// A chain of `preferred` backends, in order, followed by the CPU reference (added unless
    /// already last).
    pub fn new(preferred: Vec<Arc<dyn Backend>>) -> Dispatcher {
        let mut chain = preferred;
        if chain.last().map(|b| b.name()) != Some("reference") {
            chain.push(Arc::new(ReferenceBackend));
        }
        Dispatcher {
            chain,
            log: Mutex::new(DispatchLog::default()),
            executed: Mutex::new(HashMap::new()),
        }
    }

    /// Only the CPU reference.
    pub fn reference() -> Dispatcher {
        Dispatcher::new(Vec::new())
    }

    /// The backends in fallback order (the last is always the reference).
    pub fn chain(&self) -> &[Arc<dyn Backend>] {
        &self.chain
    }

    /// The first (preferred) backend.
    pub fn primary(&self) -> &Arc<dyn Backend> {
        // The constructor guarantees at least the reference is present.
        &self.chain[0]
    }

    /// A copy of the log so far.
    pub fn log(&self) -> DispatchLog {
        let mut log = self
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let counts = self.executed.lock().unwrap_or_else(PoisonError::into_inner);
        for (&(op, b), &n) in counts.iter() {
            let backend = self.chain.get(b).map_or("?", |b| b.name());
            *log.executed
                .entry((op.to_string(), backend.to_string()))
                .or_insert(0) += n;
        }
        log
    }

    /// Runs `op` with a fresh context.
    pub fn run(&self, op: &Op, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.run_with(op, inputs, &mut ExecContext::default())
    }

    /// Runs `op` on the first backend of the chain that supports it, moving inputs to that
    /// backend's memory first.
    pub fn run_with(
        &self,
        op: &Op,
        inputs: &[Tensor],
        ctx: &mut ExecContext,
    ) -> Result<Vec<Tensor>> {
        let infos: Vec<TensorInfo> = inputs.iter().map(Tensor::info).collect();
        let mut declined: Option<(String, String)> = None;
        for (index, backend) in self.chain.iter().enumerate() {
            let is_last = backend.name() == "reference";
            if !is_last && !backend.supports(op, &infos) {
                declined.get_or_insert((backend.name().to_string(), "not supported".into()));
                continue;
            }
            let moved = self.move_inputs(backend.as_ref(), inputs)?;
            match backend.execute(op, &moved, ctx) {
                Ok(out) => {
                    self.record(op, index, declined.take());
                    return Ok(out);
                }
                Err(Error::UnsupportedOp { .. }) if !is_last => {
                    declined.get_or_insert((backend.name().to_string(), "execute declined".into()));
                }
                Err(e) => return Err(e),
            }
        }
        // Unreachable in practice: the reference is last and either runs or returns its error.
        Err(Error::UnsupportedOp {
            op: op.name().into(),
            backend: "reference".into(),
            input_dtype: infos
                .first()
                .map(|i| i.dtype)
                .unwrap_or(cyb_tensor::DType::F32),
        })
    }

    /// Tells every backend to free its copies of weights nobody holds any more
    /// (`Backend::release_unowned`).
    pub fn release_unowned(&self) {
        self.chain.iter().for_each(|b| b.release_unowned());
    }

    /// Tells every backend a forward step begins.
    pub fn begin_step(&self, ctx: &mut ExecContext) -> Result<()> {
        ctx.step += 1;
        self.chain.iter().try_for_each(|b| b.begin_step(ctx))
    }

    /// Tells every backend a forward step ended.
    pub fn end_step(&self, ctx: &mut ExecContext) -> Result<()> {
        self.chain.iter().try_for_each(|b| b.end_step(ctx))
    }

    /// Host bytes of `t`, downloading from the backend that owns it when needed.
    pub fn to_host(&self, t: &Tensor) -> Result<Tensor> {
        if t.host_bytes().is_some() {
            return Ok(t.clone());
        }
        self.owner(t)?.download(t)
    }

    /// The values of `t` as f32 on the host (as `to_host(t)?.to_f32_vec()`, without the
    /// intermediate host tensor where the owning backend can convert as it reads).
    pub fn to_host_f32(&self, t: &Tensor) -> Result<Vec<f32>> {
        if t.host_bytes().is_some() {
            return t.to_f32_vec();
        }
        self.owner(t)?.download_f32(t)
    }

    /// The backend of this chain that holds `t`.
    fn owner(&self, t: &Tensor) -> Result<&Arc<dyn Backend>> {
        let owner = t.storage().location();
        self.chain
            .iter()
            .find(|b| b.name() == owner)
            .ok_or_else(|| Error::BackendInit {
                backend: owner.to_string(),
                reason: "tensor belongs to a backend that is not in this dispatcher's chain".into(),
            })
    }

    fn move_inputs(&self, backend: &dyn Backend, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let host_backend = backend.host_memory();
        inputs
            .iter()
            .map(|t| {
                let here = t.storage().location() == backend.name();
                let on_host = t.host_bytes().is_some();
                if here || (host_backend && on_host) {
                    return Ok(t.clone());
                }
                let host = self.to_host(t)?;
                if host_backend {
                    return Ok(host);
                }
                backend.upload_tensor(&host)
            })
            .collect()
    }

    fn record(&self, op: &Op, index: usize, declined: Option<(String, String)>) {
        *self
            .executed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((op.name(), index))
            .or_insert(0) += 1;
        if let Some((from, reason)) = declined {
            let ran_on = self.chain.get(index).map_or("?", |b| b.name());
            let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
            let key = (op.name().to_string(), from.clone(), ran_on.to_string());
            let n = log.fallbacks.entry(key).or_insert(0);
            *n += 1;
            if *n == 1 {
                tracing::info!(op = op.name(), from = %from, to = ran_on, %reason, "op fell back");
                log.first_fallbacks.push(DispatchRecord {
                    op: op.name().to_string(),
                    from,
                    to: ran_on.to_string(),
                    reason,
                });
            }
        }
    }
}

//! `CYB_CPU_PROFILE=1`: wall time per op kind (op name and output dims; for a matmul also its
//! weight's dims and dtype), printed to stderr as a table when the backend is dropped. For
//! finding where a model's time goes; off by default (one `Option` check per op).

use cyb_ops::Op;
use cyb_tensor::Tensor;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// An op kind: its name, output dims and (matmuls) the weight's dims and dtype.
type Kind = (&'static str, Vec<usize>, String);

#[derive(Default)]
pub(crate) struct OpProfile {
    /// Calls and total time per kind.
    times: Mutex<HashMap<Kind, (u64, Duration)>>,
}

impl OpProfile {
    pub(crate) fn from_env() -> Option<OpProfile> {
        std::env::var("CYB_CPU_PROFILE")
            .is_ok_and(|v| !matches!(v.trim(), "" | "0"))
            .then(OpProfile::default)
    }

    pub(crate) fn add(&self, op: &Op, inputs: &[Tensor], out: &[Tensor], took: Duration) {
        let dims = out.first().map(|t| t.dims().to_vec()).unwrap_or_default();
        let weight = match (op, inputs) {
            (Op::MatMul { .. }, [_, w, ..]) => format!("{:?} {}", w.dims(), w.dtype()),
            _ => String::new(),
        };
        let mut times = self.times.lock().unwrap_or_else(|e| e.into_inner());
        let e = times.entry((op.name(), dims, weight)).or_default();
        e.0 += 1;
        e.1 += took;
    }
}

impl Drop for OpProfile {
    fn drop(&mut self) {
        let times = self.times.get_mut().unwrap_or_else(|e| e.into_inner());
        let total: Duration = times.values().map(|v| v.1).sum();
        let mut rows: Vec<_> = times.iter().collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
        eprintln!(
            "cpu op profile: {:.1} ms in {} ops",
            total.as_secs_f64() * 1e3,
            times.values().map(|v| v.0).sum::<u64>()
        );
        for ((name, dims, weight), (calls, t)) in rows {
            eprintln!(
                "{:>6.2}% {:>10.3} ms {:>7} × {:<12} {:?} {}",
                100.0 * t.as_secs_f64() / total.as_secs_f64().max(1e-12),
                t.as_secs_f64() * 1e3,
                calls,
                name,
                dims,
                weight
            );
        }
    }
}

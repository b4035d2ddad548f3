//! `CpuOptions::profile` (`CYB_CPU_PROFILE=1`): wall time per op kind (op name and output
//! dims; for a matmul also its weight's dims and dtype, for a convolution its kernel's dims),
//! printed to stderr as a table when the backend is dropped. For
//! finding where a model's time goes; off by default (one `Option` check per op). First calls
//! (of each kind; for matmuls, of each weight, which repack it and fault its pages in) are
//! counted apart; later calls show their median and longest time, and a matmul's also its rate
//! over them all: GB/s of weights read for one activation row (decode), GMAC/s for more
//! (prefill). The totals (and shares) include every later call, those of a bench's warm-up
//! run too, where lazily repacked weights take spare buffers and the ops after them fault in
//! fresh memory: a total far above `median × calls` (a long "max") points there, not at the op.

use cyb_ops::Op;
use cyb_tensor::Tensor;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

/// An op kind: its name, output dims and (matmuls, convolutions) the weight's dims.
type Kind = (&'static str, Vec<usize>, String);

/// One kind's calls: first calls (see the module doc) and later ones, their times, and
/// (matmuls) the weight's bytes.
#[derive(Default)]
struct Calls {
    firsts: u64,
    first: Duration,
    later: u64,
    rest: Duration,
    /// The later calls' times, for the median.
    each: Vec<Duration>,
    weight_bytes: usize,
    /// Multiply-adds of one call and its activation rows (matmuls).
    macs: usize,
    rows: usize,
}

#[derive(Default)]
struct Seen {
    kinds: HashMap<Kind, Calls>,
    /// Addresses of the weights matmuls have met.
    weights: HashSet<usize>,
}

#[derive(Default)]
pub(crate) struct OpProfile {
    times: Mutex<Seen>,
}

impl OpProfile {
    pub(crate) fn add(&self, op: &Op, inputs: &[Tensor], out: &[Tensor], took: Duration) {
        let dims = out.first().map(|t| t.dims().to_vec()).unwrap_or_default();
        let rows = dims.iter().rev().skip(1).product();
        let (weight, weight_bytes, addr, macs) = match (op, inputs) {
            (Op::MatMul { .. }, [_, w, ..]) => (
                format!("{:?} {}", w.dims(), w.dtype()),
                w.dtype().bytes_for(w.numel()).unwrap_or(0),
                w.host_bytes().map(|b| b.as_ptr() as usize),
                dims.iter().product::<usize>() * w.dims().last().copied().unwrap_or(0),
            ),
            // A convolution: its kernel's dims; multiply-adds per output value are the
            // kernel's values per output channel.
            (Op::Conv { .. }, [_, w, ..]) if w.dims().first().is_some_and(|&c| c > 0) => (
                format!("{:?}", w.dims()),
                w.dtype().bytes_for(w.numel()).unwrap_or(0),
                None,
                dims.iter().product::<usize>() * (w.numel() / w.dims()[0]),
            ),
            _ => (String::new(), 0, None, 0),
        };
        let mut seen = self.times.lock().unwrap_or_else(|e| e.into_inner());
        let new_weight = addr.is_some_and(|a| seen.weights.insert(a));
        let e = seen.kinds.entry((op.name(), dims, weight)).or_default();
        if new_weight || e.firsts == 0 {
            e.firsts += 1;
            e.first += took;
            e.weight_bytes = weight_bytes;
            e.macs = macs;
            e.rows = rows;
        } else {
            e.later += 1;
            e.rest += took;
            e.each.push(took);
        }
    }
}

impl Drop for OpProfile {
    fn drop(&mut self) {
        let kinds = &self
            .times
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .kinds;
        let rest: Duration = kinds.values().map(|v| v.rest).sum();
        let first: Duration = kinds.values().map(|v| v.first).sum();
        let mut rows: Vec<_> = kinds.iter().collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1.rest));
        eprintln!(
            "cpu op profile: {:.1} ms in {} ops, besides {} first calls ({:.1} ms)",
            rest.as_secs_f64() * 1e3,
            kinds.values().map(|v| v.later).sum::<u64>(),
            kinds.values().map(|v| v.firsts).sum::<u64>(),
            first.as_secs_f64() * 1e3,
        );
        for ((name, dims, weight), c) in rows {
            let mut each = c.each.clone();
            each.sort();
            let median = each.get(each.len() / 2).copied().unwrap_or_default();
            let longest = each.last().copied().unwrap_or_default();
            // One-row matmuls read their weights at a rate, many-row ones compute at one.
            let rate = if c.later == 0 || c.rest.is_zero() || c.weight_bytes == 0 {
                " ".repeat(11)
            } else if c.rows == 1 {
                let gbs = c.weight_bytes as f64 * c.later as f64 / c.rest.as_secs_f64() / 1e9;
                format!("{gbs:>7.1} GB/s")
            } else {
                let gmacs = c.macs as f64 * c.later as f64 / c.rest.as_secs_f64() / 1e9;
                format!("{gmacs:>4.0} GMAC/s")
            };
            eprintln!(
                "{:>6.2}% {:>10.3} ms {:>7} × (median {:>9.1} µs, max {:>9.1} µs) {rate}  {:<12} {:?} {}",
                100.0 * c.rest.as_secs_f64() / rest.as_secs_f64().max(1e-12),
                c.rest.as_secs_f64() * 1e3,
                c.later,
                median.as_secs_f64() * 1e6,
                longest.as_secs_f64() * 1e6,
                name,
                dims,
                weight
            );
        }
    }
}

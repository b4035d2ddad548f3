//! `CYB_WGPU_PROFILE=1`: every kernel launch is submitted and waited for on its own, and the
//! wall time per kernel is summed and printed to stderr when the backend is dropped. Launches
//! then run one at a time, so the totals show where a step's GPU time goes, not how fast the
//! pipelined step is.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Default)]
pub(crate) struct Profile {
    /// kernel → (launches, time).
    totals: Mutex<BTreeMap<String, (u64, Duration)>>,
}

impl Profile {
    pub(crate) fn add(&self, kernel: String, t: Duration) {
        let mut m = self
            .totals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let e = m.entry(kernel).or_default();
        e.0 += 1;
        e.1 += t;
    }

    /// The totals, slowest kernel first.
    pub(crate) fn report(&self) -> String {
        let m = self
            .totals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut rows: Vec<_> = m.iter().collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
        let total: Duration = rows.iter().map(|r| r.1 .1).sum();
        let mut s = format!(
            "wgpu profile: {:.1} ms in kernels\n",
            total.as_secs_f64() * 1e3
        );
        for (k, (n, t)) in rows {
            s.push_str(&format!(
                "{:>10.2} ms {:>8}x {:>9.1} us/launch  {k}\n",
                t.as_secs_f64() * 1e3,
                n,
                t.as_secs_f64() * 1e6 / (*n).max(1) as f64
            ));
        }
        s
    }
}

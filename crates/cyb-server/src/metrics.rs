//! Counters and gauges, served as Prometheus text at `GET /metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    prompt_tokens: AtomicU64,
    /// Prompt tokens served from a session's cache instead of being computed.
    cached_prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    /// Decode tokens/s of the last finished generation, as f64 bits.
    last_tps_bits: AtomicU64,
    active_sessions: AtomicU64,
    model_loads: AtomicU64,
    draft_proposed: AtomicU64,
    draft_accepted: AtomicU64,
    /// Unloads by reason: request, idle, budget.
    model_unloads: [AtomicU64; 3],
}

/// One known model's gauges: its id, whether it is in memory, the size of its files.
pub struct ModelGauge {
    pub id: String,
    pub loaded: bool,
    pub bytes: u64,
}

/// Counts a running generation until dropped (on the worker thread, so a cancelled
/// generation counts until its worker has really stopped).
pub struct ActiveSession<'a>(&'a Metrics);

impl Drop for ActiveSession<'_> {
    fn drop(&mut self) {
        self.0.active_sessions.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Metrics {
    pub fn record_request(&self, endpoint: &str, status: u16) {
        let mut map = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry((endpoint.to_string(), status)).or_insert(0) += 1;
    }

    pub fn record_generation(&self, prompt: usize, cached: usize, completion: usize, tps: f64) {
        self.prompt_tokens
            .fetch_add(prompt as u64, Ordering::Relaxed);
        self.cached_prompt_tokens
            .fetch_add(cached as u64, Ordering::Relaxed);
        self.completion_tokens
            .fetch_add(completion as u64, Ordering::Relaxed);
        if tps > 0.0 {
            self.last_tps_bits.store(tps.to_bits(), Ordering::Relaxed);
        }
    }

    /// Tokens a draft (model or prompt lookup) proposed, and how many the model kept.
    pub fn record_draft(&self, proposed: usize, accepted: usize) {
        self.draft_proposed
            .fetch_add(proposed as u64, Ordering::Relaxed);
        self.draft_accepted
            .fetch_add(accepted as u64, Ordering::Relaxed);
    }

    pub fn record_model_load(&self) {
        self.model_loads.fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_model_unload(&self, reason: crate::registry::UnloadReason) {
        self.model_unloads[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn active(&self) -> ActiveSession<'_> {
        self.active_sessions.fetch_add(1, Ordering::SeqCst);
        ActiveSession(self)
    }

    pub fn active_sessions(&self) -> u64 {
        self.active_sessions.load(Ordering::SeqCst)
    }

    /// The Prometheus text exposition; gauges owned elsewhere are passed in (`batches`: the
    /// shared-step counts of each model that batches its generations).
    pub fn render(
        &self,
        queue_depth: usize,
        idle_sessions: usize,
        batches: &[(String, cyb_runtime::BatchStats)],
        models: &[ModelGauge],
    ) -> String {
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, lines: Vec<(String, String)>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in lines {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        let requests = self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|((ep, st), n)| {
                (
                    format!("{{endpoint=\"{ep}\",status=\"{st}\"}}"),
                    n.to_string(),
                )
            })
            .collect();
        let one = |v: String| vec![(String::new(), v)];
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
        metric(
            "cyb_requests_total",
            "counter",
            "HTTP requests by endpoint and status.",
            requests,
        );
        metric(
            "cyb_prompt_tokens_total",
            "counter",
            "Prompt tokens of finished generations.",
            one(load(&self.prompt_tokens)),
        );
        metric(
            "cyb_prompt_tokens_cached_total",
            "counter",
            "Prompt tokens reused from a session's KV cache.",
            one(load(&self.cached_prompt_tokens)),
        );
        metric(
            "cyb_completion_tokens_total",
            "counter",
            "Generated tokens.",
            one(load(&self.completion_tokens)),
        );
        metric(
            "cyb_draft_tokens_total",
            "counter",
            "Speculative decoding: tokens the draft proposed, and those the model kept.",
            vec![
                ("{result=\"proposed\"}".into(), load(&self.draft_proposed)),
                ("{result=\"accepted\"}".into(), load(&self.draft_accepted)),
            ],
        );
        let tps = f64::from_bits(self.last_tps_bits.load(Ordering::Relaxed));
        metric(
            "cyb_tokens_per_second",
            "gauge",
            "Decode tokens/s of the last finished generation.",
            one(format!("{tps:.3}")),
        );
        metric(
            "cyb_queue_depth",
            "gauge",
            "Requests waiting for a generation slot.",
            one(queue_depth.to_string()),
        );
        metric(
            "cyb_active_sessions",
            "gauge",
            "Generations running now.",
            one(self.active_sessions().to_string()),
        );
        metric(
            "cyb_idle_sessions",
            "gauge",
            "Sessions kept idle with their KV cache for reuse.",
            one(idle_sessions.to_string()),
        );
        let gauge = |f: &dyn Fn(&ModelGauge) -> String| {
            models
                .iter()
                .map(|m| (format!("{{model=\"{}\"}}", m.id), f(m)))
                .collect()
        };
        metric(
            "cyb_model_loaded",
            "gauge",
            "Whether a known model is in memory (1) or unloaded until a request names it (0).",
            gauge(&|m| u8::from(m.loaded).to_string()),
        );
        metric(
            "cyb_model_memory_bytes",
            "gauge",
            "The size of a loaded model's files (what it counts against --memory-budget).",
            gauge(&|m| if m.loaded { m.bytes } else { 0 }.to_string()),
        );
        metric(
            "cyb_model_loads_total",
            "counter",
            "Models loaded while serving (by POST /v1/models/load or by a request naming an \
             unloaded model).",
            one(load(&self.model_loads)),
        );
        use crate::registry::UnloadReason as R;
        metric(
            "cyb_model_unloads_total",
            "counter",
            "Models unloaded, by reason: request, idle (--idle-unload), budget (--memory-budget).",
            [R::Request, R::Idle, R::Budget]
                .iter()
                .map(|&r| {
                    (
                        format!("{{reason=\"{}\"}}", r.label()),
                        load(&self.model_unloads[r as usize]),
                    )
                })
                .collect(),
        );
        let per_model = |f: &dyn Fn(&cyb_runtime::BatchStats) -> String| {
            batches
                .iter()
                .map(|(id, b)| (format!("{{model=\"{id}\"}}"), f(b)))
                .collect()
        };
        metric(
            "cyb_batch_steps_total",
            "counter",
            "Forward steps shared by a model's generations.",
            per_model(&|b| b.steps.to_string()),
        );
        metric(
            "cyb_batch_sequences_total",
            "counter",
            "Sequences advanced by the shared steps (a step of four counts four).",
            per_model(&|b| b.sequences.to_string()),
        );
        metric(
            "cyb_batch_tokens_total",
            "counter",
            "Tokens fed by the shared steps.",
            per_model(&|b| b.tokens.to_string()),
        );
        metric(
            "cyb_batch_max_sequences",
            "gauge",
            "The most sequences one shared step took.",
            per_model(&|b| b.max_seqs.to_string()),
        );
        out
    }
}

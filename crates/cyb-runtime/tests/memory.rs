//! Dropping a model returns its memory: loads, runs and drops of SmolLM2-135M on one runtime
//! leave resident memory where the first few left it (no model's mapping or weight copies stay
//! behind).

mod common;
use cyb_runtime::{Runtime, RuntimeOptions};

/// VmRSS of this process in bytes (Linux).
fn resident() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Loads the model, prefills 24 tokens (the repacked prefill kernels) and decodes 4 (the
/// one-row kernels), then drops it.
fn cycle(rt: &Runtime, path: &std::path::Path) {
    let model = rt.load(path).unwrap();
    let mut session = model.bench_session(64).unwrap();
    let ids: Vec<u32> = (0..24).map(|i| 100 + i * 7).collect();
    session.feed(&ids).unwrap();
    for t in 0..4 {
        session.feed(&[200 + t]).unwrap();
    }
}

#[test]
fn twenty_loads_and_drops_return_the_memory() {
    let Some(path) = common::smollm2() else {
        return;
    };
    let rt = Runtime::new(RuntimeOptions {
        backend: Some("cpu".into()),
        ..RuntimeOptions::default()
    })
    .unwrap();
    // Five cycles first: thread pools, allocator arenas and lazily made tables settle.
    for _ in 0..5 {
        cycle(&rt, &path);
    }
    let start = resident();
    for _ in 0..15 {
        cycle(&rt, &path);
    }
    let end = resident();
    let grown = end.saturating_sub(start) as f64 / (1 << 20) as f64;
    eprintln!("resident: {} MiB -> {} MiB", start >> 20, end >> 20);
    // One model's file mapping is 90 MiB and its repacked weights ~60 MiB: keeping either per
    // load would grow this by more than a GiB.
    assert!(
        grown < 32.0,
        "resident memory grew by {grown:.0} MiB over 15 loads"
    );
}

//! Dropping a model returns its memory: loads, runs and drops of SmolLM2-135M on one runtime
//! leave resident memory where the first few left it (no model's mapping or weight copies stay
//! behind), and the cpu backend keeps no derived copy of a dropped model's weights.

mod common;
use cyb_runtime::{Runtime, RuntimeOptions};

/// The tests of this file run one at a time: one's loads would show in the other's RSS.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
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
        grown < 64.0,
        "resident memory grew by {grown:.0} MiB over 15 loads"
    );
}

/// The cpu backend's repacked and panel copies of a model's weights go with the model (before,
/// the last model's stayed until another one was loaded).
#[test]
fn dropping_a_model_frees_its_repacked_weights() {
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(path) = common::smollm2() else {
        return;
    };
    let cpu = std::sync::Arc::new(
        cyb_cpu::CpuBackend::from_options(&cyb_cpu::CpuOptions::default()).unwrap(),
    );
    let rt = Runtime::with_backends(vec![cpu.clone()], RuntimeOptions::default());
    for _ in 0..3 {
        {
            let model = rt.load(&path).unwrap();
            let mut session = model.bench_session(64).unwrap();
            let ids: Vec<u32> = (0..24).map(|i| 100 + i * 7).collect();
            session.feed(&ids).unwrap();
            assert!(
                cpu.cached_weight_bytes() > 10 << 20,
                "prefill repacked the weights"
            );
        }
        assert_eq!(
            cpu.cached_weight_bytes(),
            0,
            "weight copies left after the drop"
        );
    }
}

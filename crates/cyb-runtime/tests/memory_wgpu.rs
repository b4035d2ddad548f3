//! Dropping a model returns its device memory on wgpu (in its own test binary: the resident-memory
//! test of memory.rs must not see another model load at the same time).

mod common;
use cyb_runtime::{Runtime, RuntimeOptions};

/// On wgpu the weights' device copies go with the model: after each drop the backend holds no
/// device memory for weights.
#[cfg(feature = "wgpu")]
#[test]
fn dropping_a_model_frees_its_device_weights() {
    let Some(path) = common::smollm2() else {
        return;
    };
    let Some(gpu) = common::wgpu_backend() else {
        return;
    };
    let cpu = RuntimeOptions::default().cpu_backend().unwrap();
    let rt = Runtime::with_backends(vec![gpu.clone(), cpu], RuntimeOptions::default());
    for _ in 0..3 {
        {
            let model = rt.load(&path).unwrap();
            let mut session = model.bench_session(16).unwrap();
            session.feed(&[100, 200, 300]).unwrap();
            assert!(
                gpu.resident_bytes() > 50 << 20,
                "the weights went to the GPU"
            );
        }
        assert_eq!(
            gpu.resident_bytes(),
            0,
            "device weights left after the drop"
        );
    }
}

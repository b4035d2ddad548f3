//! Shared helpers of the cyb-cpu tests: a seeded generator, the reference oracle, tolerances.
#![allow(dead_code)]

use cyb_backend::{Backend, ExecContext};
use cyb_cpu::{ActPrecision, CpuBackend, KernelSet};
use cyb_ops::Op;
use cyb_tensor::{Shape, Storage, Tensor};
use std::sync::Arc;

/// xorshift64*: reproducible inputs without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.uniform()).collect()
    }
}

/// `max|a - b| / max|b|`, the spec's relative error.
pub fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let scale = want
        .iter()
        .fold(0f32, |m, v| m.max(v.abs()))
        .max(f32::MIN_POSITIVE);
    let diff = got.iter().zip(want).fold(0f32, |m, (a, b)| {
        if (a - b).is_nan() {
            f32::INFINITY
        } else {
            m.max((a - b).abs())
        }
    });
    diff / scale
}

/// Every kernel set of this CPU, each with 1 and 3 threads, with `act` activations.
pub fn backends(act: ActPrecision) -> Vec<(KernelSet, CpuBackend, CpuBackend)> {
    KernelSet::available()
        .into_iter()
        .map(|s| {
            let one = CpuBackend::with_activations(s, 1, act).unwrap();
            let three = CpuBackend::with_activations(s, 3, act).unwrap();
            (s, one, three)
        })
        .collect()
}

pub fn run(b: &dyn Backend, op: &Op, inputs: &[Tensor]) -> Vec<f32> {
    assert!(
        b.supports(op, &inputs.iter().map(Tensor::info).collect::<Vec<_>>()),
        "{op:?} unsupported"
    );
    let out = b.execute(op, inputs, &mut ExecContext::default()).unwrap();
    out[0].to_f32_vec().unwrap()
}

pub fn reference(op: &Op, inputs: &[Tensor]) -> Vec<f32> {
    cyb_ops::reference::execute(op, inputs).unwrap()[0]
        .to_f32_vec()
        .unwrap()
}

/// Runs `op` on every kernel set with 1 and 3 threads: within `tol` of the reference, and the
/// two thread counts bit-identical.
pub fn check(op: &Op, inputs: &[Tensor], tol: f32, what: &str) {
    check_act(op, inputs, tol, what, ActPrecision::default())
}

/// `check` with quantized matmuls on `act` activations.
/// Whether `b` (kernel set `set`) runs `op` on `inputs`; a format may lack kernels in the lesser
/// sets (it then falls back to the reference), never in this CPU's best one.
pub fn runs(set: KernelSet, b: &dyn Backend, op: &Op, inputs: &[Tensor]) -> bool {
    let infos: Vec<_> = inputs.iter().map(Tensor::info).collect();
    let ok = b.supports(op, &infos);
    assert!(
        ok || set != KernelSet::detect().unwrap(),
        "{op:?} unsupported by the best kernel set {}",
        set.name()
    );
    ok
}

pub fn check_act(op: &Op, inputs: &[Tensor], tol: f32, what: &str, act: ActPrecision) {
    let want = reference(op, inputs);
    for (set, one, three) in backends(act) {
        if !runs(set, &one, op, inputs) {
            continue;
        }
        let a = run(&one, op, inputs);
        let b = run(&three, op, inputs);
        let err = rel_err(&a, &want);
        assert!(
            err <= tol,
            "{what} on {} ({}): relative error {err} > {tol}",
            set.name(),
            act.name()
        );
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{what} on {} ({}): 1 and 3 threads differ",
            set.name(),
            act.name()
        );
    }
}

/// The same weight in shared storage, as a GGUF mapping hands it out (where the backend caches
/// repacked and panel copies).
pub fn shared(w: &Tensor) -> Tensor {
    let bytes = w.host_bytes().unwrap().to_vec();
    let len = bytes.len();
    let storage = Storage::Shared {
        owner: Arc::new(bytes),
        offset: 0,
        len,
    };
    Tensor::new(Shape::new(w.dims()).unwrap(), w.dtype(), storage).unwrap()
}

//! The AMX-INT8 prefill kernels against the VNNI kernels they stand in for: bit-identical
//! outputs for every repacked format, both activation precisions, whole and partial 16-row
//! tiles, with 1 and 3 threads. (Both are also checked against the reference by matmul.rs.)

mod common;
use common::{shared, Rng};
use cyb_backend::{Backend, ExecContext};
use cyb_cpu::{ActPrecision, CpuBackend, KernelSet};
use cyb_ops::Op;
use cyb_tensor::{DType, Tensor};

fn run(b: &CpuBackend, inputs: &[Tensor]) -> Vec<f32> {
    let op = Op::MatMul {
        rhs_transposed: true,
    };
    let out = b.execute(&op, inputs, &mut ExecContext::default()).unwrap();
    out[0].to_f32_vec().unwrap()
}

#[test]
fn amx_equals_vnni_bit_for_bit() {
    if !KernelSet::Avx512.is_available() {
        eprintln!("no AVX-512 here: the repacked kernels (VNNI and AMX) do not run");
        return;
    }
    eprintln!("AMX-INT8 available: {}", cyb_cpu::amx_available());
    let mut rng = Rng::new(0x0a3c);
    for act in [ActPrecision::Q8, ActPrecision::Q16] {
        let make = |threads: usize, amx: bool| {
            CpuBackend::with_activations(KernelSet::Avx512, threads, act)
                .unwrap()
                .with_amx(amx)
        };
        let (vnni, amx1, amx3) = (make(1, false), make(1, true), make(3, true));
        for dtype in [
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
            DType::Q8_0,
            DType::Q4_K,
            DType::Q5_K,
            DType::Q6_K,
        ] {
            // 2816: several spans of the repacked layout.
            for (m, n, k) in [
                (8usize, 37usize, 512usize),
                (16, 16, 256),
                (41, 70, 768),
                (19, 37, 2816),
            ] {
                let w = Tensor::from_f32_as(&[n, k], &rng.vec(n * k), dtype).unwrap();
                let a = Tensor::from_f32(&[m, k], &rng.vec(m * k)).unwrap();
                let inputs = [a, shared(&w)];
                let want = run(&vnni, &inputs);
                for (name, b) in [("1 thread", &amx1), ("3 threads", &amx3)] {
                    let got = run(b, &inputs);
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(
                        same,
                        "{dtype} m={m} n={n} k={k} ({}), {name}: AMX differs from VNNI",
                        act.name()
                    );
                }
            }
        }
    }
}

//! Every matmul kernel against the reference on odd sizes, for every weight dtype and kernel
//! set of this CPU, with 1 and 3 threads bit-identical.

mod common;
use common::{check, Rng};
use cyb_ops::Op;
use cyb_tensor::{DType, Tensor};

const OP: Op = Op::MatMul {
    rhs_transposed: true,
};

fn tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 1e-5,
        DType::F16 | DType::BF16 => 1e-3,
        _ => 1e-2,
    }
}

/// Activations that 8-bit block quantization represents exactly (every 32 values share the
/// 256-block's scale and hold a ±127 level), so a quantized kernel must match the reference
/// up to float summation order: a far stricter check than the spec tolerance.
fn exact_activations(rng: &mut Rng, m: usize, k: usize) -> Vec<f32> {
    let mut a = Vec::with_capacity(m * k);
    for _ in 0..m {
        let mut d = 0.01 + rng.uniform().abs();
        for i in 0..k {
            if i % 256 == 0 {
                d = 0.01 + rng.uniform().abs();
            }
            let q = if i % 32 == (i / 32) % 32 {
                127.0
            } else {
                (rng.uniform() * 127.0).round()
            };
            a.push(q * d / 127.0 * 127.0);
        }
    }
    a
}

fn check_dtype(dtype: DType, ks: &[usize]) {
    let mut rng = Rng::new(dtype as u64 + 7);
    for &k in ks {
        for m in [1usize, 3, 7, 17] {
            for n in [1usize, 5, 67, 131] {
                let what = format!("{dtype} m={m} n={n} k={k}");
                let w = Tensor::from_f32_as(&[n, k], &rng.vec(n * k), dtype).unwrap();
                if dtype.is_quantized() {
                    let a = Tensor::from_f32(&[m, k], &exact_activations(&mut rng, m, k)).unwrap();
                    check(
                        &OP,
                        &[a, w.clone()],
                        1e-4,
                        &format!("{what} exact activations"),
                    );
                    if k < 256 || n < 67 {
                        continue; // too few terms for a meaningful relative error below
                    }
                }
                let a = Tensor::from_f32(&[m, k], &rng.vec(m * k)).unwrap();
                check(&OP, &[a, w], tolerance(dtype), &what);
            }
        }
    }
}

#[test]
fn legacy_block_formats() {
    for dtype in [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
    ] {
        check_dtype(dtype, &[32, 96, 576]);
    }
}

#[test]
fn k_quant_formats() {
    for dtype in [DType::Q2_K, DType::Q4_K, DType::Q5_K, DType::Q6_K] {
        check_dtype(dtype, &[256, 768]);
    }
}

#[test]
fn float_formats() {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        check_dtype(dtype, &[1, 7, 37, 200]);
    }
}

#[test]
fn batched_activations_share_the_weight() {
    let mut rng = Rng::new(3);
    let a = Tensor::from_f32(&[2, 3, 64], &rng.vec(2 * 3 * 64)).unwrap();
    let w = Tensor::from_f32_as(&[5, 64], &rng.vec(5 * 64), DType::Q4_1).unwrap();
    check(&OP, &[a, w], 1e-2, "batched");
}

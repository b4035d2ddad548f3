//! Matrix products: `MatMul` for every weight dtype, `Linear`, `MatMulInteger`.

use crate::{Case, Rng};
use cyb_ops::{GeluApprox, LinearAct, Op};
use cyb_tensor::{DType, Tensor};

/// Every dtype a matmul weight may have (`Op::MatMul`'s doc).
pub const WEIGHT_DTYPES: [DType; 16] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::TQ1_0,
    DType::TQ2_0,
    DType::IQ4_NL,
];

const NT: Op = Op::MatMul {
    rhs_transposed: true,
};

pub fn cases() -> Vec<Case> {
    let mut rng = Rng::new(1);
    let mut v = Vec::new();
    for dt in WEIGHT_DTYPES {
        // k odd for the scalar formats, an odd number of blocks for the others.
        let k = match dt.block_elems() {
            1 => 37,
            b => 3 * b,
        };
        // One row (decode), a few rows, and enough rows for the tiled prefill kernels (tiles
        // of 64 cut in both directions).
        for (m, n, shape) in [(1, 13, "one row"), (7, 13, "odd"), (70, 67, "prefill")] {
            let w = rng.values(&[n, k], dt);
            let a = rng.f32(&[m, k], 1.0);
            v.push(Case::new(NT, vec![a, w], shape).listed_as(dt));
        }
        // Batched activations over one weight.
        let w = rng.values(&[11, k], dt);
        v.push(Case::new(NT, vec![rng.f32(&[2, 3, k], 1.0), w], "batched").listed_as(dt));
    }
    // Long rows: many blocks per row (the float GEMM's k blocking, K-quant super-blocks).
    for dt in [DType::F32, DType::F16, DType::Q8_0, DType::Q4_K] {
        let k = 2304;
        let w = rng.values(&[19, k], dt);
        v.push(Case::new(NT, vec![rng.f32(&[9, k], 1.0), w], "long rows").listed_as(dt));
    }
    // Not transposed, with broadcast batch dims.
    let plain = Op::MatMul {
        rhs_transposed: false,
    };
    v.push(Case::new(
        plain.clone(),
        vec![rng.f32(&[7, 37], 1.0), rng.f32(&[37, 13], 1.0)],
        "not transposed",
    ));
    v.push(Case::new(
        plain,
        vec![rng.f32(&[2, 3, 7, 37], 1.0), rng.f32(&[3, 37, 13], 1.0)],
        "not transposed, broadcast",
    ));
    for (dt, act) in [
        (DType::F32, LinearAct::None),
        (DType::F32, LinearAct::Gelu(GeluApprox::Erf)),
        (DType::F16, LinearAct::Silu),
        (DType::Q8_0, LinearAct::Relu),
    ] {
        let k = if dt.block_elems() > 1 { 96 } else { 37 };
        let op = Op::Linear {
            rhs_transposed: true,
            act,
        };
        for (m, shape) in [(1, "one row"), (9, "odd")] {
            let inputs = vec![
                rng.f32(&[m, k], 1.0),
                rng.values(&[21, k], dt),
                rng.f32(&[21], 1.0),
            ];
            v.push(Case::new(op.clone(), inputs, shape).listed_as(dt));
        }
    }
    for dt in [DType::U8, DType::I8] {
        let ints = |rng: &mut Rng, dims: &[usize]| {
            let n: usize = dims.iter().product();
            let vals: Vec<i64> = (0..n)
                .map(|_| (rng.next_u64() % 256) as i64 - if dt == DType::I8 { 128 } else { 0 })
                .collect();
            Tensor::from_i64_as(dims, &vals, dt).expect("valid")
        };
        let inputs = vec![ints(&mut rng, &[5, 19]), ints(&mut rng, &[19, 7])];
        v.push(Case::new(Op::MatMulInteger, inputs, "odd"));
    }
    v
}

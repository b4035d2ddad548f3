//! Threads split outputs, never reductions: the reference gives the same bits for any
//! thread count.

use cyb_ops::{reference, GeluApprox, Op, RopeLayout, RopeScaling, SdpaLayout};
use cyb_tensor::{DType, Tensor};

/// Deterministic pseudo-random values in [-2, 2) (a small LCG; no dependency needed).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn run_in_pool(threads: usize, op: &Op, inputs: &[Tensor]) -> Vec<Vec<u8>> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool");
    let outs = pool
        .install(|| reference::execute(op, inputs))
        .expect("op runs");
    outs.iter()
        .map(|t| t.host_bytes().expect("host output").to_vec())
        .collect()
}

#[test]
fn one_and_four_threads_give_identical_bits() {
    let f = |dims: &[usize], seed| {
        let n = dims.iter().product();
        Tensor::from_f32(dims, &values(n, seed)).expect("tensor")
    };
    let q8 = Tensor::from_f32_as(&[37, 96], &values(37 * 96, 9), DType::Q8_0).expect("q8_0");
    let cases: Vec<(Op, Vec<Tensor>)> = vec![
        (
            Op::MatMul {
                rhs_transposed: true,
            },
            vec![f(&[3, 17, 96], 1), q8],
        ),
        (
            Op::MatMul {
                rhs_transposed: false,
            },
            vec![f(&[2, 19, 53], 2), f(&[53, 29], 3)],
        ),
        (
            Op::Sdpa {
                layout: SdpaLayout::HeadMajor,
                scale: 0.2,
                causal: true,
                sliding_window: Some(9),
                softcap: Some(30.0),
                alibi_max_bias: Some(8.0),
            },
            vec![
                f(&[2, 6, 13, 21], 4),
                f(&[2, 3, 17, 21], 5),
                f(&[2, 3, 17, 11], 6),
            ],
        ),
        (
            Op::RmsNorm {
                eps: 1e-6,
                weight_offset: 0.0,
            },
            vec![f(&[41, 333], 7), f(&[333], 8)],
        ),
        (Op::Softmax { axis: 1 }, vec![f(&[5, 77, 9], 10)]),
        (
            Op::Rope {
                layout: RopeLayout::Neox,
                rot_dims: 16,
                base: 10000.0,
                scaling: RopeScaling::None,
            },
            vec![
                f(&[2, 7, 5, 18], 11),
                Tensor::from_i64(&[7], &[0, 1, 2, 3, 40, 41, 42]).expect("ids"),
            ],
        ),
        (
            Op::GeGlu {
                approx: GeluApprox::Erf,
            },
            vec![f(&[31, 46], 12)],
        ),
    ];
    for (op, inputs) in &cases {
        let one = run_in_pool(1, op, inputs);
        let four = run_in_pool(4, op, inputs);
        assert_eq!(one, four, "{} differs between 1 and 4 threads", op.name());
    }
}

//! Element-wise ops: arithmetic with broadcasting, activations, gated units, softmax, the
//! graph-level unary/binary functions, `Where`, `Cast` and linear (de)quantization.

use crate::case::TRANSCENDENTAL;
use crate::{Case, Rng};
use cyb_ops::{BinaryFn, GeluApprox, Op, UnaryFn};
use cyb_tensor::{DType, Tensor};

pub fn cases() -> Vec<Case> {
    let mut rng = Rng::new(2);
    let mut v = Vec::new();
    for op in [Op::Add, Op::Sub, Op::Mul, Op::Div] {
        let a = rng.f32(&[7, 67], 1.0);
        v.push(Case::new(
            op.clone(),
            vec![a.clone(), rng.f32(&[7, 67], 1.0)],
            "odd",
        ));
        v.push(Case::new(
            op.clone(),
            vec![a.clone(), rng.f32(&[67], 1.0)],
            "broadcast row",
        ));
        v.push(Case::new(
            op.clone(),
            vec![a, rng.f32(&[7, 1], 1.0)],
            "broadcast column",
        ));
        let both = vec![rng.f32(&[3, 1, 5], 1.0), rng.f32(&[4, 5], 1.0)];
        v.push(Case::new(op.clone(), both, "broadcast both"));
        // Large enough to be split over threads.
        let big = [67, 517];
        v.push(Case::new(
            op,
            vec![rng.f32(&big, 1.0), rng.f32(&big, 1.0)],
            "long rows",
        ));
    }
    for dt in [DType::F16, DType::BF16] {
        let inputs = vec![rng.values(&[7, 67], dt), rng.values(&[7, 67], dt)];
        v.push(Case::new(Op::Add, inputs, "odd"));
    }
    v.push(Case::new(
        Op::Scale { factor: 0.37 },
        vec![rng.f32(&[7, 67], 1.0)],
        "odd",
    ));
    let activations = [
        Op::Silu,
        Op::Relu,
        Op::Tanh,
        Op::Gelu {
            approx: GeluApprox::Erf,
        },
        Op::Gelu {
            approx: GeluApprox::Tanh,
        },
    ];
    for op in activations {
        // Wide inputs: exp under- and overflows, erf's tails.
        v.push(Case::new(op.clone(), vec![rng.f32(&[7, 67], 6.0)], "odd").tol(TRANSCENDENTAL));
        v.push(Case::new(op, vec![rng.f32(&[67, 517], 30.0)], "long rows").tol(TRANSCENDENTAL));
    }
    let (tanh, erf) = (GeluApprox::Tanh, GeluApprox::Erf);
    for op in [
        Op::SwiGlu,
        Op::GeGlu { approx: tanh },
        Op::GeGlu { approx: erf },
    ] {
        let pair = vec![rng.f32(&[7, 67], 4.0), rng.f32(&[7, 67], 4.0)];
        v.push(Case::new(op.clone(), pair, "odd").tol(TRANSCENDENTAL));
        let fused = vec![rng.f32(&[3, 134], 4.0)];
        v.push(Case::new(op.clone(), fused, "one input").tol(TRANSCENDENTAL));
        let long = vec![rng.f32(&[67, 517], 4.0), rng.f32(&[67, 517], 4.0)];
        v.push(Case::new(op, long, "long rows").tol(TRANSCENDENTAL));
    }
    for axis in [-1, 0] {
        let shape = if axis == -1 {
            "last axis"
        } else {
            "first axis"
        };
        let x = rng.f32(&[7, 67], 8.0);
        v.push(Case::new(Op::Softmax { axis }, vec![x.clone()], shape).tol(TRANSCENDENTAL));
        v.push(Case::new(Op::LogSoftmax { axis }, vec![x], shape).tol(TRANSCENDENTAL));
    }
    v.push(
        Case::new(
            Op::Softmax { axis: -1 },
            vec![rng.f32(&[3, 4099], 8.0)],
            "long rows",
        )
        .tol(TRANSCENDENTAL),
    );
    for f in [
        UnaryFn::Exp,
        UnaryFn::Sigmoid,
        UnaryFn::Neg,
        UnaryFn::Abs,
        UnaryFn::Floor,
        UnaryFn::Erf,
    ] {
        let op = Op::Unary { f };
        v.push(Case::new(op, vec![rng.f32(&[5, 33], 3.0)], "odd").tol(TRANSCENDENTAL));
    }
    let pos = Tensor::from_f32(
        &[5, 33],
        &rng.vec(165)
            .iter()
            .map(|x| x.abs() + 0.1)
            .collect::<Vec<_>>(),
    )
    .expect("valid");
    for f in [UnaryFn::Sqrt, UnaryFn::Log] {
        v.push(Case::new(Op::Unary { f }, vec![pos.clone()], "odd").tol(TRANSCENDENTAL));
    }
    let ints = Tensor::from_i64(&[6], &[-3, 0, 5, -7, 2, 9]).expect("valid");
    v.push(Case::new(
        Op::Unary { f: UnaryFn::Abs },
        vec![ints.clone()],
        "integers",
    ));
    for f in [
        BinaryFn::Max,
        BinaryFn::Min,
        BinaryFn::Pow,
        BinaryFn::Equal,
        BinaryFn::Less,
    ] {
        let a = if f == BinaryFn::Pow {
            pos.clone()
        } else {
            rng.f32(&[5, 33], 2.0)
        };
        let inputs = vec![a, rng.f32(&[33], 2.0)];
        v.push(Case::new(Op::Binary { f }, inputs, "broadcast").tol(TRANSCENDENTAL));
    }
    let b = Tensor::from_i64(&[6], &[4, 0, -5, 7, 2, 3]).expect("valid");
    v.push(Case::new(
        Op::Binary { f: BinaryFn::Add },
        vec![ints.clone(), b],
        "integers",
    ));
    let cond = Tensor::from_i64_as(&[5, 1], &[1, 0, 1, 1, 0], DType::Bool).expect("valid");
    let inputs = vec![cond, rng.f32(&[5, 33], 1.0), rng.f32(&[33], 1.0)];
    v.push(Case::new(Op::Where, inputs, "broadcast"));
    for to in [DType::F16, DType::BF16, DType::I64, DType::Q8_0] {
        let x = rng.f32(&[3, 64], 50.0);
        v.push(Case::new(Op::Cast { to }, vec![x], "odd"));
    }
    v.push(Case::new(
        Op::Cast { to: DType::F32 },
        vec![ints],
        "integers",
    ));
    let scale = Tensor::from_f32(&[1], &[0.05]).expect("valid");
    let zero = Tensor::from_i64_as(&[1], &[3], DType::U8).expect("valid");
    let x = rng.f32(&[4, 9], 5.0);
    let inputs = vec![x, scale.clone(), zero.clone()];
    v.push(Case::new(
        Op::QuantizeLinear { axis: 1 },
        inputs,
        "per tensor",
    ));
    let q = Tensor::from_i64_as(&[2, 5], &[0, 3, 7, 255, 128, 1, 2, 3, 4, 5], DType::U8)
        .expect("valid");
    let inputs = vec![q, scale, zero];
    v.push(Case::new(
        Op::DequantizeLinear { axis: 1 },
        inputs,
        "per tensor",
    ));
    // Half-precision inputs (computed in f32, F32 out).
    for dt in [DType::F16, DType::BF16] {
        for op in [
            Op::Silu,
            Op::Relu,
            Op::Tanh,
            Op::Gelu {
                approx: GeluApprox::Erf,
            },
            Op::Scale { factor: 0.37 },
            Op::Softmax { axis: -1 },
        ] {
            v.push(Case::new(op, vec![rng.values(&[7, 67], dt)], "odd"));
        }
        let pair = vec![rng.values(&[7, 67], dt), rng.values(&[7, 67], dt)];
        v.push(Case::new(Op::SwiGlu, pair.clone(), "odd"));
        v.push(Case::new(Op::Mul, pair, "odd"));
    }
    v
}

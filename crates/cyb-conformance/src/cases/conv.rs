//! Convolutions and pooling (the CNN and Whisper-stem ops).

use crate::{Case, Rng};
use cyb_ops::{LinearAct, Op, PadSpec, PoolKind};

pub fn cases() -> Vec<Case> {
    let mut rng = Rng::new(8);
    let mut v = Vec::new();
    let with = |strides: Vec<usize>, pads: PadSpec, group, act| Op::Conv {
        strides,
        dilations: vec![],
        pads,
        group,
        act,
    };
    let conv = |strides, pads, group| with(strides, pads, group, LinearAct::None);
    // 2-D, odd sizes, bias, padding, stride.
    let x = rng.f32(&[1, 4, 11, 9], 1.0);
    let inputs = vec![x.clone(), rng.f32(&[6, 4, 3, 3], 1.0), rng.f32(&[6], 1.0)];
    v.push(Case::new(
        conv(vec![2, 1], PadSpec::Explicit(vec![1, 1, 1, 1]), 1),
        inputs,
        "2-D, stride, pad",
    ));
    // Depthwise (group = channels), same padding.
    let inputs = vec![x.clone(), rng.f32(&[4, 1, 3, 3], 1.0)];
    v.push(Case::new(
        conv(vec![1, 1], PadSpec::SameUpper, 4),
        inputs,
        "depthwise",
    ));
    // Pointwise 1x1 (a matmul in disguise).
    let inputs = vec![x.clone(), rng.f32(&[5, 4, 1, 1], 1.0)];
    v.push(Case::new(
        conv(vec![], PadSpec::Explicit(vec![]), 1),
        inputs,
        "1x1",
    ));
    // 1-D (Whisper's stem: kernel 3, pad 1, stride 2).
    let inputs = vec![
        rng.f32(&[1, 8, 30], 1.0),
        rng.f32(&[6, 8, 3], 1.0),
        rng.f32(&[6], 1.0),
    ];
    v.push(Case::new(
        conv(vec![2], PadSpec::Explicit(vec![1, 1]), 1),
        inputs,
        "1-D",
    ));
    // Fused activations: a SiLU after a 2-D conv with bias, a ReLU after a depthwise one.
    let inputs = vec![x.clone(), rng.f32(&[6, 4, 3, 3], 1.0), rng.f32(&[6], 1.0)];
    v.push(Case::new(
        with(
            vec![1, 1],
            PadSpec::Explicit(vec![1, 1, 1, 1]),
            1,
            LinearAct::Silu,
        ),
        inputs,
        "2-D, SiLU",
    ));
    let inputs = vec![x.clone(), rng.f32(&[4, 1, 3, 3], 1.0)];
    v.push(Case::new(
        with(vec![2, 2], PadSpec::SameUpper, 4, LinearAct::Relu),
        inputs,
        "depthwise, ReLU",
    ));
    let op = Op::ConvTranspose {
        strides: vec![2, 2],
        dilations: vec![1, 1],
        pads: vec![1, 0, 1, 0],
        output_padding: vec![1, 0],
        group: 1,
    };
    let inputs = vec![
        rng.f32(&[1, 3, 5, 4], 1.0),
        rng.f32(&[3, 2, 3, 3], 1.0),
        rng.f32(&[2], 1.0),
    ];
    v.push(Case::new(op, inputs, "2-D, stride"));
    for (kind, shape) in [
        (PoolKind::Max, "max"),
        (
            PoolKind::Avg {
                count_include_pad: false,
            },
            "average",
        ),
    ] {
        let op = Op::Pool {
            kind,
            kernel: vec![3, 3],
            strides: vec![2, 2],
            dilations: vec![],
            pads: PadSpec::Explicit(vec![1, 1, 1, 1]),
            ceil_mode: false,
        };
        v.push(Case::new(op, vec![x.clone()], shape));
    }
    v
}

//! Ops that move values without arithmetic: reshape, permute, slice, concat, split, expand,
//! tile, pad, triangle masks.

use crate::{Case, Rng};
use cyb_ops::{Op, PadMode};
use cyb_tensor::DType;

pub fn cases() -> Vec<Case> {
    let mut rng = Rng::new(5);
    let mut v = Vec::new();
    let x = rng.f32(&[5, 3, 67], 1.0);
    let ints = rng.ids(&[5, 3, 7], 100, DType::I32);
    v.push(Case::new(
        Op::Reshape { dims: vec![15, -1] },
        vec![x.clone()],
        "odd",
    ));
    v.push(Case::new(
        Op::Reshape {
            dims: vec![-1, 2, 64],
        },
        vec![rng.values(&[4, 128], DType::Q8_0)],
        "blocks",
    ));
    for (perm, shape) in [(vec![1, 0, 2], "swap leading"), (vec![2, 0, 1], "rotate")] {
        v.push(Case::new(
            Op::Permute { perm: perm.clone() },
            vec![x.clone()],
            shape,
        ));
        v.push(Case::new(Op::Permute { perm }, vec![ints.clone()], shape));
    }
    let four = rng.f32(&[2, 3, 4, 5], 1.0);
    v.push(Case::new(
        Op::Permute {
            perm: vec![0, 2, 1, 3],
        },
        vec![four.clone()],
        "rank 4",
    ));
    v.push(Case::new(
        Op::Transpose { a: 0, b: -1 },
        vec![x.clone()],
        "odd",
    ));
    let unit = rng.f32(&[1, 3, 2, 5], 1.0);
    v.push(Case::new(
        Op::Transpose { a: 0, b: 1 },
        vec![unit],
        "size-1 axis",
    ));
    for (axis, start, end, step, shape) in [
        (-1, 3, 50, 1, "odd"),
        (1, -2, 3, 1, "negative start"),
        (2, 1, 67, 3, "step"),
    ] {
        let op = Op::Slice {
            axis,
            start,
            end,
            step,
        };
        v.push(Case::new(op, vec![x.clone()], shape));
    }
    v.push(Case::new(
        Op::Slice {
            axis: 0,
            start: 1,
            end: 4,
            step: 1,
        },
        vec![ints.clone()],
        "odd",
    ));
    for axis in [0, -1] {
        let shape = if axis == 0 { "first axis" } else { "last axis" };
        let other = if axis == 0 {
            rng.f32(&[2, 3, 67], 1.0)
        } else {
            rng.f32(&[5, 3, 9], 1.0)
        };
        v.push(Case::new(
            Op::Concat { axis },
            vec![x.clone(), other],
            shape,
        ));
        let sizes = if axis == 0 { vec![2, 3] } else { vec![60, 7] };
        v.push(Case::new(Op::Split { axis, sizes }, vec![x.clone()], shape));
    }
    v.push(Case::new(
        Op::Concat { axis: 1 },
        vec![ints.clone(), ints.clone()],
        "odd",
    ));
    let col = rng.f32(&[3, 1], 1.0);
    v.push(Case::new(
        Op::Expand {
            dims: vec![2, 3, 5],
        },
        vec![col.clone()],
        "broadcast",
    ));
    v.push(Case::new(
        Op::Tile {
            repeats: vec![2, 3],
        },
        vec![col],
        "odd",
    ));
    let y = rng.f32(&[3, 5], 1.0);
    for (mode, shape) in [
        (PadMode::Constant { value: 0.5 }, "constant"),
        (PadMode::Reflect, "reflect"),
        (PadMode::Edge, "edge"),
    ] {
        let op = Op::Pad {
            pads: vec![1, 2, 0, 1],
            mode,
        };
        v.push(Case::new(op, vec![y.clone()], shape));
    }
    let op = Op::SliceNd {
        starts: vec![4, 1],
        ends: vec![0, 60],
        axes: vec![0, 2],
        steps: vec![-2, 7],
    };
    v.push(Case::new(op, vec![x.clone()], "negative step"));
    let sq = rng.f32(&[2, 6, 7], 1.0);
    for (upper, k) in [(true, 1), (false, -1)] {
        let shape = if upper { "upper" } else { "lower" };
        v.push(Case::new(Op::Trilu { upper, k }, vec![sq.clone()], shape));
    }
    let small = rng.f32(&[2, 3, 5], 1.0);
    for (start, end, step, shape) in [
        (0, 5, 2, "step 2"),
        (-3, 5, 1, "negative start"),
        (1, 2, 1, "one element"),
        (4, -1, 3, "negative end"),
    ] {
        let op = Op::Slice {
            axis: -1,
            start,
            end,
            step,
        };
        v.push(Case::new(op, vec![small.clone()], shape));
    }
    let three = vec![
        small.clone(),
        rng.f32(&[2, 4, 5], 1.0),
        rng.f32(&[2, 1, 5], 1.0),
    ];
    v.push(Case::new(Op::Concat { axis: 1 }, three, "three inputs"));
    let op = Op::Split {
        axis: -1,
        sizes: vec![2, 1, 2],
    };
    v.push(Case::new(op, vec![small], "three pieces"));
    v
}

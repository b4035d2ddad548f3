//! Reductions and selections: argmax, top-k, cumulative sums, `Reduce`, `ArgReduce`.

use crate::case::TRANSCENDENTAL;
use crate::{Case, Rng};
use cyb_ops::{Op, ReduceFn};
use cyb_tensor::{DType, Tensor};

pub fn cases() -> Vec<Case> {
    let mut rng = Rng::new(7);
    let mut v = Vec::new();
    let x = rng.f32(&[7, 67], 1.0);
    // Ties and a NaN: the first largest wins, NaN counts as largest.
    let mut tied = vec![0.5f32; 3 * 9];
    tied[4] = 2.0;
    tied[7] = 2.0;
    tied[9 + 3] = f32::NAN;
    let tied = Tensor::from_f32(&[3, 9], &tied).expect("valid");
    v.push(Case::new(Op::ArgMax { axis: -1 }, vec![x.clone()], "odd"));
    v.push(Case::new(
        Op::ArgMax { axis: -1 },
        vec![tied],
        "ties and NaN",
    ));
    v.push(Case::new(
        Op::ArgMax { axis: -1 },
        vec![rng.f32(&[1, 49152], 1.0)],
        "long rows",
    ));
    v.push(Case::new(
        Op::ArgMax { axis: 0 },
        vec![x.clone()],
        "first axis",
    ));
    for largest in [true, false] {
        let op = Op::TopK {
            k: 5,
            axis: -1,
            largest,
        };
        v.push(Case::new(
            op,
            vec![x.clone()],
            if largest { "largest" } else { "smallest" },
        ));
    }
    for (exclusive, reverse, shape) in [(false, false, "odd"), (true, true, "exclusive, reverse")] {
        let op = Op::CumSum {
            axis: 1,
            exclusive,
            reverse,
        };
        v.push(Case::new(op, vec![x.clone()], shape));
    }
    let ints = rng.ids(&[4, 6], 9, DType::I64);
    v.push(Case::new(
        Op::CumSum {
            axis: 0,
            exclusive: false,
            reverse: false,
        },
        vec![ints.clone()],
        "integers",
    ));
    for (f, axes, keepdims) in [
        (ReduceFn::Sum, vec![1], false),
        (ReduceFn::Mean, vec![0], true),
        (ReduceFn::Max, vec![], false),
        (ReduceFn::LogSumExp, vec![-1], true),
        (ReduceFn::SumSquare, vec![0, 1], false),
    ] {
        let op = Op::Reduce { f, axes, keepdims };
        v.push(Case::new(op, vec![x.clone()], "odd").tol(TRANSCENDENTAL));
    }
    v.push(Case::new(
        Op::Reduce {
            f: ReduceFn::Prod,
            axes: vec![1],
            keepdims: false,
        },
        vec![ints],
        "integers",
    ));
    for (max, select_last) in [(true, false), (false, true)] {
        let op = Op::ArgReduce {
            axis: 1,
            keepdims: true,
            max,
            select_last,
        };
        v.push(Case::new(
            op,
            vec![x.clone()],
            if max { "max" } else { "min, last" },
        ));
    }
    v
}

//! Lookups and scatters: `Embedding` for every table dtype, the ONNX gathers and scatters.

use crate::{Case, Rng};
use cyb_ops::{Op, ScatterReduction};
use cyb_tensor::{DType, Tensor};

pub fn cases() -> Vec<Case> {
    let mut rng = Rng::new(6);
    let mut v = Vec::new();
    for dt in super::matmul::WEIGHT_DTYPES {
        let dim = match dt.block_elems() {
            1 => 37,
            b => 2 * b,
        };
        let table = rng.values(&[50, dim], dt);
        for (ids, shape) in [(&[1][..], "one row"), (&[2, 7][..], "odd")] {
            let ids = rng.ids(ids, 50, DType::I32);
            v.push(Case::new(Op::Embedding, vec![table.clone(), ids], shape).listed_as(dt));
        }
    }
    let x = rng.f32(&[6, 5, 4], 1.0);
    let idx = Tensor::from_i64(&[2, 3], &[0, 5, -1, 2, 2, 3]).expect("valid");
    v.push(Case::new(
        Op::Gather { axis: 0 },
        vec![x.clone(), idx.clone()],
        "negative indices",
    ));
    let idx1 = Tensor::from_i64(&[3], &[4, 0, 2]).expect("valid");
    v.push(Case::new(
        Op::Gather { axis: 1 },
        vec![x.clone(), idx1],
        "middle axis",
    ));
    let ge_idx = rng.ids(&[6, 2, 4], 5, DType::I64);
    v.push(Case::new(
        Op::GatherElements { axis: 1 },
        vec![x.clone(), ge_idx.clone()],
        "odd",
    ));
    let nd_idx = Tensor::from_i64(&[2, 2], &[1, 3, 5, 0]).expect("valid");
    v.push(Case::new(
        Op::GatherNd { batch_dims: 0 },
        vec![x.clone(), nd_idx.clone()],
        "odd",
    ));
    for reduction in [ScatterReduction::None, ScatterReduction::Add] {
        let shape = if reduction == ScatterReduction::None {
            "replace"
        } else {
            "add"
        };
        // Distinct indices per position along the axis, so replacement order does not matter.
        let idx = Tensor::from_i64(
            &[6, 2, 4],
            &(0..48).map(|i| (i / 4 % 2) as i64 * 3).collect::<Vec<_>>(),
        )
        .expect("valid");
        let upd = rng.f32(&[6, 2, 4], 1.0);
        let op = Op::ScatterElements { axis: 1, reduction };
        v.push(Case::new(op, vec![x.clone(), idx, upd], shape));
        let upd = rng.f32(&[2, 4], 1.0);
        let op = Op::ScatterNd { reduction };
        v.push(Case::new(op, vec![x.clone(), nd_idx.clone(), upd], shape));
    }
    v
}

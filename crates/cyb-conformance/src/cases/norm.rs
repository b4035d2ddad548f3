//! Normalizations, and the fused residual-add + norm ops.

use crate::{Case, Rng};
use cyb_ops::Op;
use cyb_tensor::DType;

pub fn cases() -> Vec<Case> {
    let mut rng = Rng::new(3);
    let mut v = Vec::new();
    for weight_offset in [0.0, 1.0] {
        let op = Op::RmsNorm {
            eps: 1e-5,
            weight_offset,
        };
        let x = rng.f32(&[5, 3, 67], 2.0);
        v.push(Case::new(
            op.clone(),
            vec![x.clone(), rng.f32(&[67], 1.0)],
            "odd",
        ));
        v.push(Case::new(op.clone(), vec![x], "no weight"));
        let long = vec![rng.f32(&[67, 517], 2.0), rng.f32(&[517], 1.0)];
        v.push(Case::new(op.clone(), long, "long rows"));
        v.push(Case::new(
            op.clone(),
            vec![rng.f32(&[1, 2048], 2.0), rng.f32(&[2048], 1.0)],
            "one row",
        ));
        // Rows longer than one pass of a GPU workgroup's loads (2048 values).
        let past = vec![rng.f32(&[2, 2500], 2.0), rng.f32(&[2500], 1.0)];
        v.push(Case::new(op.clone(), past, "rows past 2048"));
        let fused = Op::AddRmsNorm {
            eps: 1e-6,
            weight_offset,
        };
        let inputs = vec![
            rng.f32(&[7, 67], 2.0),
            rng.f32(&[7, 67], 2.0),
            rng.f32(&[67], 1.0),
        ];
        v.push(Case::new(fused.clone(), inputs, "odd"));
        for (d, shape) in [(577, "long rows"), (2500, "rows past 2048")] {
            let inputs = vec![
                rng.f32(&[3, 5, d], 2.0),
                rng.f32(&[3, 5, d], 2.0),
                rng.f32(&[d], 1.0),
            ];
            v.push(Case::new(fused.clone(), inputs, shape));
        }
    }
    let ln = Op::LayerNorm { eps: 1e-12 };
    let x = rng.f32(&[7, 67], 3.0);
    let (w, b) = (rng.f32(&[67], 1.0), rng.f32(&[67], 1.0));
    v.push(Case::new(
        ln.clone(),
        vec![x.clone(), w.clone(), b.clone()],
        "odd",
    ));
    v.push(Case::new(ln.clone(), vec![x.clone()], "no weight"));
    v.push(Case::new(
        ln.clone(),
        vec![x.clone(), w.clone()],
        "weight only",
    ));
    v.push(Case::new(
        ln,
        vec![
            rng.f32(&[67, 517], 3.0),
            rng.f32(&[517], 1.0),
            rng.f32(&[517], 1.0),
        ],
        "long rows",
    ));
    let add_ln = Op::AddLayerNorm { eps: 1e-5 };
    v.push(Case::new(
        add_ln,
        vec![x.clone(), rng.f32(&[7, 67], 3.0), w.clone(), b.clone()],
        "odd",
    ));
    let f16 = vec![rng.values(&[7, 67], DType::F16), rng.f32(&[67], 1.0)];
    v.push(Case::new(
        Op::RmsNorm {
            eps: 1e-5,
            weight_offset: 0.0,
        },
        f16,
        "odd",
    ));
    let gn = Op::GroupNorm {
        groups: 3,
        eps: 1e-5,
    };
    let inputs = vec![
        rng.f32(&[2, 6, 5, 7], 2.0),
        rng.f32(&[6], 1.0),
        rng.f32(&[6], 1.0),
    ];
    v.push(Case::new(gn, inputs, "odd"));
    let bn = Op::BatchNorm { eps: 1e-5 };
    let var = rng
        .f32(&[6], 1.0)
        .to_f32_vec()
        .expect("f32")
        .iter()
        .map(|x| x.abs() + 0.5)
        .collect::<Vec<_>>();
    let var = cyb_tensor::Tensor::from_f32(&[6], &var).expect("valid");
    let inputs = vec![
        rng.f32(&[2, 6, 5, 7], 2.0),
        rng.f32(&[6], 1.0),
        rng.f32(&[6], 1.0),
        rng.f32(&[6], 1.0),
        var,
    ];
    v.push(Case::new(bn, inputs, "odd"));
    let lnd = Op::LayerNormNd {
        axis: -2,
        eps: 1e-5,
    };
    let inputs = vec![
        rng.f32(&[3, 5, 7], 2.0),
        rng.f32(&[5, 7], 1.0),
        rng.f32(&[5, 7], 1.0),
    ];
    v.push(Case::new(lnd, inputs, "odd"));
    // Half-precision inputs (computed in f32, F32 out).
    for dt in [DType::F16, DType::BF16] {
        let inputs = vec![
            rng.values(&[7, 67], dt),
            rng.values(&[67], dt),
            rng.values(&[67], dt),
        ];
        v.push(Case::new(Op::LayerNorm { eps: 1e-5 }, inputs, "odd"));
    }
    let inputs = vec![rng.values(&[7, 67], DType::BF16), rng.f32(&[67], 1.0)];
    let op = Op::RmsNorm {
        eps: 1e-5,
        weight_offset: 0.0,
    };
    v.push(Case::new(op, inputs, "odd"));
    v
}

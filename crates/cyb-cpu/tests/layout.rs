//! `SliceNd` and `Concat` on the cpu backend move the same bytes as the reference, for every
//! dtype with whole elements: positive and negative steps, several axes, clamped bounds, an
//! empty result, concatenation along the first, a middle and the last axis.

mod common;
use common::Rng;
use cyb_backend::{Backend, ExecContext};
use cyb_cpu::CpuBackend;
use cyb_ops::Op;
use cyb_tensor::{DType, Tensor};

/// Random values of `dims` as `dtype` (through f32; integers and booleans from them).
fn t(rng: &mut Rng, dims: &[usize], dtype: DType) -> Tensor {
    let v: Vec<f32> = rng
        .vec(dims.iter().product())
        .iter()
        .map(|x| (x * 100.0).round())
        .collect();
    let x = Tensor::from_f32(dims, &v).unwrap();
    cyb_ops::reference::execute(&Op::Cast { to: dtype }, &[x]).unwrap()[0].clone()
}

fn same_bytes(op: &Op, inputs: &[Tensor], what: &str) {
    let b = CpuBackend::new().unwrap();
    let infos: Vec<_> = inputs.iter().map(Tensor::info).collect();
    assert!(b.supports(op, &infos), "{what}: {op:?} unsupported");
    let got = b.execute(op, inputs, &mut ExecContext::default()).unwrap();
    let want = cyb_ops::reference::execute(op, inputs).unwrap();
    assert_eq!(got[0].dims(), want[0].dims(), "{what}: dims");
    assert_eq!(got[0].dtype(), want[0].dtype(), "{what}: dtype");
    assert_eq!(got[0].host_bytes(), want[0].host_bytes(), "{what}: bytes");
}

fn slice(starts: &[isize], ends: &[isize], axes: &[isize], steps: &[isize]) -> Op {
    Op::SliceNd {
        starts: starts.to_vec(),
        ends: ends.to_vec(),
        axes: axes.to_vec(),
        steps: steps.to_vec(),
    }
}

#[test]
fn slices_move_the_reference_bytes() {
    let mut rng = Rng::new(51);
    for dtype in [DType::F32, DType::F16, DType::I64, DType::I32, DType::Bool] {
        let x = t(&mut rng, &[3, 5, 7], dtype);
        let cases = [
            (slice(&[1], &[4], &[1], &[1]), "middle axis"),
            (
                slice(&[0, 2], &[2, 7], &[0, 2], &[1, 2]),
                "two axes, step 2 last",
            ),
            (
                slice(&[-1], &[isize::MIN], &[-1], &[-1]),
                "last axis reversed",
            ),
            (
                slice(&[4, 6], &[0, -100], &[1, 2], &[-2, -3]),
                "negative steps",
            ),
            (slice(&[-100], &[100], &[0], &[1]), "clamped bounds"),
            (slice(&[3], &[1], &[2], &[1]), "empty"),
        ];
        for (op, what) in cases {
            same_bytes(&op, std::slice::from_ref(&x), &format!("{dtype} {what}"));
        }
    }
}

#[test]
fn concatenations_move_the_reference_bytes() {
    let mut rng = Rng::new(52);
    for dtype in [DType::F32, DType::I64, DType::Bool] {
        let a = t(&mut rng, &[2, 3, 4], dtype);
        let b = t(&mut rng, &[2, 1, 4], dtype);
        let c = t(&mut rng, &[2, 5, 4], dtype);
        same_bytes(
            &Op::Concat { axis: 1 },
            &[a.clone(), b, c],
            &format!("{dtype} middle axis"),
        );
        let d = t(&mut rng, &[1, 3, 4], dtype);
        same_bytes(
            &Op::Concat { axis: 0 },
            &[a.clone(), d],
            &format!("{dtype} first axis"),
        );
        let e = t(&mut rng, &[2, 3, 2], dtype);
        same_bytes(
            &Op::Concat { axis: -1 },
            &[a.clone(), e, a],
            &format!("{dtype} last axis"),
        );
    }
}

#[test]
fn pads_move_the_reference_bytes() {
    use cyb_ops::PadMode;
    let mut rng = Rng::new(53);
    let pad = |pads: &[isize], mode| Op::Pad {
        pads: pads.to_vec(),
        mode,
    };
    let modes = [
        PadMode::Constant { value: -2.5 },
        PadMode::Reflect,
        PadMode::Edge,
    ];
    for dtype in [DType::F32, DType::I64, DType::F16] {
        let x = t(&mut rng, &[2, 3, 5], dtype);
        for mode in modes {
            if dtype != DType::F32 && matches!(mode, PadMode::Constant { .. }) {
                continue;
            }
            for pads in [
                [0, 1, 2, 0, 2, 3],
                [1, 0, 0, 1, 0, 0],
                [0, -1, 1, 0, 0, -2],
                [0, 0, 7, 0, 0, 9],
            ] {
                same_bytes(
                    &pad(&pads, mode),
                    std::slice::from_ref(&x),
                    &format!("{dtype} {mode:?} {pads:?}"),
                );
            }
        }
    }
    let one = t(&mut rng, &[3, 1], DType::F32);
    same_bytes(
        &pad(&[1, 2, 0, 3], PadMode::Reflect),
        &[one],
        "reflect a dim of one",
    );
}

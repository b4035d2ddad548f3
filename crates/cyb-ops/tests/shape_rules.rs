//! Bad inputs give a specific error naming the op, never a panic; edge cases of the spec that
//! the PyTorch fixtures do not reach.

use cyb_ops::{output_infos, reference, GeluApprox, Op, RopeLayout, RopeScaling, SdpaLayout};
use cyb_tensor::{DType, Error, Shape, Tensor, TensorInfo};

fn info(dims: &[usize], dtype: DType) -> TensorInfo {
    TensorInfo {
        shape: Shape::new(dims).expect("shape"),
        dtype,
    }
}

fn f32s(dims: &[usize]) -> TensorInfo {
    info(dims, DType::F32)
}

fn is_shape(e: &Error, op: &str) -> bool {
    matches!(e, Error::ShapeMismatch { op: o, .. } if o == op)
}

fn is_invalid(e: &Error, op: &str) -> bool {
    matches!(e, Error::InvalidArgument { op: o, .. } if o == op)
}

fn err(op: &Op, inputs: &[TensorInfo]) -> Error {
    match output_infos(op, inputs) {
        Ok(o) => panic!("{} accepted {inputs:?} and gave {o:?}", op.name()),
        Err(e) => e,
    }
}

#[test]
fn shapes_that_do_not_fit_are_shape_mismatch() {
    let mm = Op::MatMul {
        rhs_transposed: true,
    };
    assert!(is_shape(
        &err(&mm, &[f32s(&[3, 7]), f32s(&[5, 6])]),
        "matmul"
    ));
    assert!(is_shape(
        &err(&mm, &[f32s(&[2, 3, 7]), f32s(&[3, 5, 7])]),
        "matmul"
    ));
    assert!(is_shape(
        &err(&Op::Add, &[f32s(&[3, 7]), f32s(&[4, 7])]),
        "add"
    ));
    let rms = Op::RmsNorm {
        eps: 1e-6,
        weight_offset: 0.0,
    };
    assert!(is_shape(
        &err(&rms, &[f32s(&[3, 7]), f32s(&[6])]),
        "rms_norm"
    ));
    let sdpa = Op::Sdpa {
        layout: SdpaLayout::HeadMajor,
        scale: 1.0,
        causal: false,
        sliding_window: None,
        softcap: None,
        alibi_max_bias: None,
    };
    // 5 query heads cannot share 2 kv heads.
    let (k, v) = (f32s(&[1, 2, 4, 8]), f32s(&[1, 2, 4, 8]));
    assert!(is_shape(
        &err(&sdpa, &[f32s(&[1, 5, 3, 8]), k.clone(), v.clone()]),
        "sdpa"
    ));
    // A mask that does not broadcast to [1, 4, 3, 4].
    let q = f32s(&[1, 4, 3, 8]);
    assert!(is_shape(
        &err(&sdpa, &[q.clone(), k.clone(), v.clone(), f32s(&[3, 5])]),
        "sdpa"
    ));
    assert!(output_infos(&sdpa, &[q, k, v, f32s(&[3, 4])]).is_ok());
    // Token-major: q [1, 3, 4, 8] against k, v [1, 5, 2, 8] gives [1, 3, 4, 6]; the mask still
    // broadcasts to the scores [1, 4, 3, 5]; a head-major k no longer fits.
    let tokens = Op::Sdpa {
        layout: SdpaLayout::TokenMajor,
        scale: 1.0,
        causal: false,
        sliding_window: None,
        softcap: None,
        alibi_max_bias: None,
    };
    let (q, k, v) = (
        f32s(&[1, 3, 4, 8]),
        f32s(&[1, 5, 2, 8]),
        f32s(&[1, 5, 2, 6]),
    );
    let out = output_infos(
        &tokens,
        &[q.clone(), k.clone(), v.clone(), f32s(&[4, 1, 5])],
    );
    assert_eq!(out.expect("token-major sdpa")[0].shape.dims(), [1, 3, 4, 6]);
    assert!(is_shape(
        &err(
            &tokens,
            &[q.clone(), k.clone(), v.clone(), f32s(&[3, 4, 5])]
        ),
        "sdpa"
    ));
    assert!(is_shape(
        &err(&tokens, &[q, f32s(&[1, 2, 5, 8]), v]),
        "sdpa"
    ));
    let reshape = Op::Reshape { dims: vec![4, -1] };
    assert!(is_shape(&err(&reshape, &[f32s(&[3, 7])]), "reshape"));
    let rope = Op::Rope {
        layout: RopeLayout::Normal,
        rot_dims: 8,
        base: 1e4,
        scaling: RopeScaling::None,
    };
    assert!(is_shape(
        &err(&rope, &[f32s(&[5, 2, 8]), info(&[4], DType::I64)]),
        "rope"
    ));
    let concat = Op::Concat { axis: 0 };
    assert!(is_shape(
        &err(&concat, &[f32s(&[2, 3]), f32s(&[2, 4])]),
        "concat"
    ));
}

#[test]
fn bad_axes_counts_dtypes_and_parameters_are_invalid_argument() {
    let cases: Vec<(Op, Vec<TensorInfo>)> = vec![
        (Op::Softmax { axis: 2 }, vec![f32s(&[3, 4])]),
        (Op::Softmax { axis: -3 }, vec![f32s(&[3, 4])]),
        (Op::ArgMax { axis: 0 }, vec![f32s(&[])]),
        (Op::Add, vec![f32s(&[3])]),
        (Op::Silu, vec![f32s(&[3]), f32s(&[3])]),
        (Op::Silu, vec![info(&[3], DType::I32)]),
        (Op::Add, vec![f32s(&[3]), info(&[3], DType::Q8_0)]),
        (
            Op::MatMul {
                rhs_transposed: false,
            },
            vec![f32s(&[2, 32]), info(&[32, 32], DType::Q8_0)],
        ),
        (Op::Embedding, vec![f32s(&[10, 4]), f32s(&[3])]),
        (Op::Embedding, vec![f32s(&[10]), info(&[3], DType::I64)]),
        (
            Op::GroupNorm {
                groups: 4,
                eps: 1e-5,
            },
            vec![f32s(&[2, 6, 3])],
        ),
        (
            Op::Rope {
                layout: RopeLayout::Neox,
                rot_dims: 7,
                base: 1e4,
                scaling: RopeScaling::None,
            },
            vec![f32s(&[5, 2, 8]), info(&[5], DType::I64)],
        ),
        (
            Op::Rope {
                layout: RopeLayout::Neox,
                rot_dims: 8,
                base: 1e4,
                scaling: RopeScaling::Linear { factor: f32::NAN },
            },
            vec![f32s(&[5, 2, 8]), info(&[5], DType::I64)],
        ),
        (Op::SwiGlu, vec![f32s(&[3, 7])]),
        (
            Op::Split {
                axis: 1,
                sizes: vec![2, 2],
            },
            vec![f32s(&[3, 5])],
        ),
        (
            Op::Permute {
                perm: vec![0, 0, 1],
            },
            vec![f32s(&[3, 5, 2])],
        ),
        (Op::Permute { perm: vec![1, 0] }, vec![f32s(&[3, 5, 2])]),
        (Op::Reshape { dims: vec![-1, -1] }, vec![f32s(&[3, 5])]),
        (
            Op::Slice {
                axis: 0,
                start: 0,
                end: 2,
                step: 0,
            },
            vec![f32s(&[3])],
        ),
        (
            Op::TopK {
                k: 4,
                axis: -1,
                largest: true,
            },
            vec![f32s(&[2, 3])],
        ),
        (
            Op::Transpose { a: 0, b: 3 },
            vec![info(&[2, 32], DType::F16)],
        ),
        (
            Op::Transpose { a: 0, b: 1 },
            vec![info(&[2, 32], DType::Q4_0)],
        ),
        (Op::Cast { to: DType::Q8_0 }, vec![f32s(&[2, 31])]),
        (Op::Concat { axis: 0 }, vec![]),
        (
            Op::Concat { axis: 0 },
            vec![f32s(&[2, 3]), info(&[2, 3], DType::F16)],
        ),
    ];
    for (op, inputs) in cases {
        let e = err(&op, &inputs);
        assert!(is_invalid(&e, op.name()), "{}: {e:?}", op.name());
    }
}

#[test]
fn execute_rejects_before_touching_data() {
    let a = Tensor::from_f32(&[2, 3], &[0.0; 6]).expect("a");
    let b = Tensor::from_f32(&[4, 3], &[0.0; 12]).expect("b");
    let e = reference::execute(&Op::Add, &[a.clone(), b]).unwrap_err();
    assert!(is_shape(&e, "add"), "{e:?}");
    let table = Tensor::from_f32(&[3, 2], &[0.0; 6]).expect("table");
    for bad in [3i64, -1] {
        let ids = Tensor::from_i64(&[2], &[0, bad]).expect("ids");
        let e = reference::execute(&Op::Embedding, &[table.clone(), ids]).unwrap_err();
        assert!(is_invalid(&e, "embedding"), "{e:?}");
    }
}

fn run(op: &Op, inputs: &[Tensor]) -> Vec<f32> {
    reference::execute(op, inputs).expect("op runs")[0]
        .to_f32_vec()
        .expect("f32")
}

#[test]
fn edge_cases_of_the_spec() {
    let t = |d: &[usize], v: &[f32]| Tensor::from_f32(d, v).expect("tensor");
    let inf = f32::INFINITY;
    // Softmax of an all -inf row is NaN, as in PyTorch.
    let y = run(
        &Op::Softmax { axis: -1 },
        &[t(&[2, 2], &[-inf, -inf, 0.0, 0.0])],
    );
    assert!(y[0].is_nan() && y[1].is_nan());
    assert_eq!(&y[2..], &[0.5, 0.5]);
    // IEEE division.
    let y = run(&Op::Div, &[t(&[3], &[1.0, -1.0, 0.0]), t(&[1], &[0.0])]);
    assert_eq!(&y[..2], &[inf, -inf]);
    assert!(y[2].is_nan());
    // argmax: first of ties; NaN counts as largest.
    let am = |v: &[f32]| {
        reference::execute(&Op::ArgMax { axis: 0 }, &[t(&[v.len()], v)]).expect("argmax")[0]
            .to_i64_vec()
            .expect("i64")
    };
    assert_eq!(am(&[1.0, 3.0, 3.0]), vec![1]);
    assert_eq!(am(&[1.0, f32::NAN, 5.0]), vec![1]);
    // SDPA: a query row whose keys are all masked to -inf gives zeros, as does a causal row
    // with no key at or before its position.
    let sdpa = Op::Sdpa {
        layout: SdpaLayout::HeadMajor,
        scale: 1.0,
        causal: false,
        sliding_window: None,
        softcap: None,
        alibi_max_bias: None,
    };
    let (q, k, v) = (
        t(&[1, 2, 1], &[1.0, 2.0]),
        t(&[1, 2, 1], &[1.0, -1.0]),
        t(&[1, 2, 1], &[3.0, 5.0]),
    );
    let mask = t(&[2, 2], &[-inf, -inf, 0.0, -inf]);
    assert_eq!(
        run(&sdpa, &[q.clone(), k.clone(), v.clone(), mask]),
        [0.0, 3.0]
    );
    let causal = Op::Sdpa {
        layout: SdpaLayout::HeadMajor,
        scale: 1.0,
        causal: true,
        sliding_window: None,
        softcap: None,
        alibi_max_bias: None,
    };
    let q3 = t(&[1, 3, 1], &[1.0, 1.0, 1.0]);
    let y = run(&causal, &[q3, k, v]);
    let p0 = 1.0 / (1.0 + (-2.0f32).exp()); // softmax of scores (1, -1)
    let want = [0.0, 3.0, 3.0 * p0 + 5.0 * (1.0 - p0)];
    assert!(
        y.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6),
        "{y:?}"
    );
    // Cast: float → integer truncates toward zero and saturates; I64 → I8 saturates.
    let c = reference::execute(
        &Op::Cast { to: DType::I32 },
        &[t(&[4], &[-2.7, 2.7, 1e10, f32::NAN])],
    )
    .expect("cast");
    assert_eq!(c[0].to_i64_vec().expect("i64"), [-2, 2, i32::MAX as i64, 0]);
    let big = Tensor::from_i64(&[2], &[300, -300]).expect("i64");
    let c = reference::execute(&Op::Cast { to: DType::I8 }, &[big]).expect("cast");
    assert_eq!(c[0].to_i64_vec().expect("i64"), [127, -128]);
    // GELU at 0 and the gated forms with one fused input.
    let g = run(
        &Op::GeGlu {
            approx: GeluApprox::Tanh,
        },
        &[t(&[1, 2], &[0.0, 9.0])],
    );
    assert_eq!(g, [0.0]);
}

#[test]
fn kv_append_writes_rows_head_major_and_refuses_what_does_not_fit() {
    // cache [2 heads, 3 positions, 2]; two new tokens at position 1.
    let cache = Tensor::from_f32(&[2, 3, 2], &[-1.0; 12]).unwrap();
    let new = Tensor::from_f32(&[2, 2, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]).unwrap();
    let out = reference::execute(&Op::KvAppend { start: 1 }, &[cache, new]).unwrap();
    let y = out[0].to_f32_vec().unwrap();
    // head 0: untouched row, token 0 head 0, token 1 head 0; then head 1.
    let want = [-1., -1., 1., 2., 5., 6., -1., -1., 3., 4., 7., 8.];
    assert_eq!(y, want);
    let op = Op::KvAppend { start: 2 };
    assert!(is_invalid(
        &err(&op, &[f32s(&[2, 3, 2]), f32s(&[2, 2, 2])]),
        "kv_append"
    ));
    assert!(err(&op, &[f32s(&[2, 3, 2]), f32s(&[1, 3, 2])])
        .to_string()
        .contains("kv_append"));
    assert!(is_invalid(
        &err(&op, &[f32s(&[2, 3, 2]), info(&[1, 2, 2], DType::F16)]),
        "kv_append"
    ));
}

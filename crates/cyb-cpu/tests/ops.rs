//! The small decode ops and fused attention against the reference on odd sizes, with 1 and 3
//! threads bit-identical.

mod common;
use common::{check, Rng};
use cyb_backend::Backend;
use cyb_cpu::{ActPrecision, CpuBackend, CpuOptions, KernelSet};
use cyb_ops::{Op, RopeLayout, RopeScaling, SdpaLayout};
use cyb_tensor::{DType, Tensor};

fn t(rng: &mut Rng, dims: &[usize]) -> Tensor {
    Tensor::from_f32(dims, &rng.vec(dims.iter().product())).unwrap()
}

#[test]
fn elementwise_and_activations() {
    let mut rng = Rng::new(11);
    let (a, b, row) = (
        t(&mut rng, &[7, 67]),
        t(&mut rng, &[7, 67]),
        t(&mut rng, &[67]),
    );
    for op in [Op::Add, Op::Sub, Op::Mul, Op::Div] {
        check(&op, &[a.clone(), b.clone()], 1e-5, op.name());
        check(&op, &[a.clone(), row.clone()], 1e-5, op.name());
    }
    // Any numpy broadcast: a per-channel scale (the squeeze-excite product of CNNs), both
    // operands repeating, the first operand repeating, ranks that differ, size-1 dims at the
    // end, a scalar, and one large enough to split over the threads.
    for (x, y) in [
        (vec![2, 6, 9, 11], vec![1, 6, 1, 1]),
        (vec![2, 1, 4, 1], vec![1, 3, 1, 5]),
        (vec![3, 1], vec![4]),
        (vec![5], vec![2, 3, 5]),
        (vec![1, 6, 1, 1], vec![2, 6, 9, 11]),
        (vec![4, 3, 1], vec![4, 1, 1]),
        (vec![1], vec![2, 3]),
        (vec![7, 1, 5], vec![1, 1, 1]),
        (vec![1, 96, 80, 80], vec![1, 96, 1, 1]),
        // One value against a large tensor, on either side (the constants of a clip or a
        // hard-swish), split over the threads.
        (vec![1, 96, 80, 80], vec![1]),
        (vec![1, 1, 1], vec![2, 48, 80, 80]),
    ] {
        let (x, y) = (t(&mut rng, &x), t(&mut rng, &y));
        for op in [Op::Add, Op::Sub, Op::Mul, Op::Div] {
            check(&op, &[x.clone(), y.clone()], 1e-5, "broadcast");
        }
        // The graph path's binary ops: the reference's own scalar math.
        use cyb_ops::BinaryFn as B;
        for f in [B::Add, B::Sub, B::Mul, B::Div, B::Max, B::Min, B::PRelu] {
            check(&Op::Binary { f }, &[x.clone(), y.clone()], 1e-6, "binary");
        }
        let positive = Tensor::from_f32(
            x.dims(),
            &x.to_f32_vec()
                .unwrap()
                .iter()
                .map(|v| v.abs() + 0.1)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        check(&Op::Binary { f: B::Pow }, &[positive, y], 1e-6, "pow");
        let two = Tensor::from_f32(&[1], &[2.0]).unwrap();
        check(&Op::Binary { f: B::Pow }, &[x.clone(), two], 1e-6, "square");
    }
    // Inference batch norm per channel, large enough to split over the threads; a positive
    // variance.
    for dims in [vec![2, 5, 7, 9], vec![1, 96, 80, 80], vec![3, 4]] {
        let c = dims[1];
        let var = Tensor::from_f32(
            &[c],
            &rng.vec(c).iter().map(|v| v.abs() + 0.5).collect::<Vec<_>>(),
        )
        .unwrap();
        let inputs = [
            t(&mut rng, &dims),
            t(&mut rng, &[c]),
            t(&mut rng, &[c]),
            t(&mut rng, &[c]),
            var,
        ];
        check(&Op::BatchNorm { eps: 1e-5 }, &inputs, 1e-6, "batch norm");
    }
    use cyb_ops::UnaryFn as U;
    let big = t(&mut rng, &[3, 67, 131]);
    for f in [
        U::Abs,
        U::Neg,
        U::Exp,
        U::Sigmoid,
        U::Tanh,
        U::Relu,
        U::HardSwish,
        U::LeakyRelu { alpha: 0.1 },
        U::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        },
        U::Erf,
        U::Softplus,
        U::Floor,
        U::Round,
        U::Sin,
        U::Elu { alpha: 1.0 },
    ] {
        check(&Op::Unary { f }, std::slice::from_ref(&big), 1e-6, "unary");
    }
    for op in [Op::Silu, Op::Tanh, Op::Relu, Op::Scale { factor: 0.37 }] {
        check(&op, std::slice::from_ref(&a), 1e-5, op.name());
    }
    // GELU over a wide range (the erf form uses a closed-form erf, |error| ≤ 1.5e-7).
    let wide = Tensor::from_f32(
        &[7, 67],
        &a.to_f32_vec()
            .unwrap()
            .iter()
            .map(|v| v * 6.0)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for approx in [cyb_ops::GeluApprox::Erf, cyb_ops::GeluApprox::Tanh] {
        let op = Op::Gelu { approx };
        check(&op, std::slice::from_ref(&a), 1e-6, "gelu");
        check(&op, std::slice::from_ref(&wide), 1e-6, "gelu wide");
    }
    check(&Op::SwiGlu, &[a.clone(), b.clone()], 1e-5, "swiglu");
    check(&Op::SwiGlu, &[t(&mut rng, &[3, 134])], 1e-5, "swiglu fused");
    // Large enough to split over the threads (rows of the fused form, elements of the other),
    // with inputs wide enough that exp under- and overflows.
    let wide = |rng: &mut Rng, dims: &[usize]| {
        let v: Vec<f32> = rng
            .vec(dims.iter().product())
            .iter()
            .map(|x| x * 120.0)
            .collect();
        Tensor::from_f32(dims, &v).unwrap()
    };
    let (g, u) = (wide(&mut rng, &[67, 517]), wide(&mut rng, &[67, 517]));
    check(&Op::SwiGlu, &[g, u], 1e-5, "swiglu, many rows");
    check(
        &Op::SwiGlu,
        &[wide(&mut rng, &[67, 1034])],
        1e-5,
        "swiglu fused, many rows",
    );
    check(
        &Op::Silu,
        &[wide(&mut rng, &[67, 517])],
        1e-5,
        "silu, many rows",
    );
    // Reductions over trailing dims (the layer norms of exported transformers), rows split
    // over the threads; all dims; kept and dropped dims.
    {
        use cyb_ops::ReduceFn as R;
        let x = wide(&mut rng, &[2, 40, 3, 120]);
        for f in [R::Sum, R::Mean, R::Max, R::Min] {
            for (axes, keepdims) in [(vec![-1], true), (vec![3, 2], false), (vec![], false)] {
                let op = Op::Reduce { f, axes, keepdims };
                check(&op, std::slice::from_ref(&x), 1e-5, "reduce");
            }
        }
    }
    // Softmax over the last axis: rows split over the threads, values wide enough that the
    // exponentials span many orders of magnitude.
    for dims in [vec![40, 6625], vec![2, 8, 40, 40], vec![3, 1]] {
        for axis in [-1, dims.len() as isize - 1] {
            check(
                &Op::Softmax { axis },
                &[wide(&mut rng, &dims)],
                1e-5,
                "softmax",
            );
        }
    }
    for f in [
        U::Sigmoid,
        U::HardSwish,
        U::LeakyRelu { alpha: 0.01 },
        U::Sqrt,
    ] {
        let x = wide(&mut rng, &[67, 517]);
        let x = if f == U::Sqrt {
            cyb_ops::reference::execute(&Op::Unary { f: U::Abs }, &[x])
                .unwrap()
                .remove(0)
        } else {
            x
        };
        check(&Op::Unary { f }, &[x], 1e-6, "unary, wide inputs");
    }
}

#[test]
fn norms_layout_and_embedding() {
    let mut rng = Rng::new(12);
    let x = t(&mut rng, &[5, 3, 67]);
    let w = t(&mut rng, &[67]);
    for offset in [0.0, 1.0] {
        let op = Op::RmsNorm {
            eps: 1e-5,
            weight_offset: offset,
        };
        check(&op, &[x.clone(), w.clone()], 1e-5, "rms_norm");
        check(
            &op,
            std::slice::from_ref(&x),
            1e-5,
            "rms_norm without weight",
        );
        let many = t(&mut rng, &[67, 517]);
        let wm = t(&mut rng, &[517]);
        check(&op, &[many, wm], 1e-5, "rms_norm, many rows");
    }
    check(
        &Op::Permute {
            perm: vec![1, 0, 2],
        },
        std::slice::from_ref(&x),
        0.0,
        "permute",
    );
    check(
        &Op::Permute {
            perm: vec![2, 0, 1],
        },
        std::slice::from_ref(&x),
        0.0,
        "permute 3",
    );
    check(
        &Op::Transpose { a: 0, b: -1 },
        std::slice::from_ref(&x),
        0.0,
        "transpose",
    );
    // Size-1 axes moved (a decode step's heads): the values keep their order; and one where
    // they do not although a size-1 axis moves too.
    let one = Tensor::from_f32(
        &[1, 3, 2, 5],
        &(0..30).map(|i| i as f32).collect::<Vec<_>>(),
    )
    .unwrap();
    for perm in [
        vec![1, 0, 2, 3],
        vec![1, 2, 0, 3],
        vec![2, 0, 1, 3],
        vec![0, 2, 1, 3],
    ] {
        let what = format!("permute {perm:?} of [1, 3, 2, 5]");
        check(
            &Op::Permute { perm },
            std::slice::from_ref(&one),
            0.0,
            &what,
        );
    }
    check(
        &Op::Reshape { dims: vec![15, -1] },
        std::slice::from_ref(&x),
        0.0,
        "reshape",
    );
    let ids = Tensor::from_i64(&[2, 3], &[0, 4, 130, 7, 7, 1]).unwrap();
    for dtype in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_1,
        DType::Q4_K,
    ] {
        let table = Tensor::from_f32_as(&[131, 256], &rng.vec(131 * 256), dtype).unwrap();
        check(
            &Op::Embedding,
            &[table, ids.clone()],
            0.0,
            &format!("embedding {dtype}"),
        );
    }
}

/// Both outputs of the residual add + RMS norm (the sum and its norm) on enough rows to split
/// over the threads.
#[test]
fn add_rms_norm_many_rows() {
    use cyb_backend::{Backend, ExecContext};
    let mut rng = Rng::new(15);
    let (a, b, w) = (
        t(&mut rng, &[67, 517]),
        t(&mut rng, &[67, 517]),
        t(&mut rng, &[517]),
    );
    let op = Op::AddRmsNorm {
        eps: 1e-5,
        weight_offset: 1.0,
    };
    let inputs = [a, b, w];
    let want = cyb_ops::reference::execute(&op, &inputs).unwrap();
    for (set, one, three) in common::backends(cyb_cpu::ActPrecision::default()) {
        let x = one
            .execute(&op, &inputs, &mut ExecContext::default())
            .unwrap();
        let y = three
            .execute(&op, &inputs, &mut ExecContext::default())
            .unwrap();
        for i in 0..2 {
            let (xi, yi) = (x[i].to_f32_vec().unwrap(), y[i].to_f32_vec().unwrap());
            let err = common::rel_err(&xi, &want[i].to_f32_vec().unwrap());
            assert!(
                err <= 1e-5,
                "output {i} on {}: relative error {err}",
                set.name()
            );
            assert!(
                xi.iter().zip(&yi).all(|(p, q)| p.to_bits() == q.to_bits()),
                "output {i} on {}: 1 and 3 threads differ",
                set.name()
            );
        }
    }
}

#[test]
fn rope_both_layouts() {
    let mut rng = Rng::new(13);
    let x = t(&mut rng, &[3, 5, 16]);
    let pos = Tensor::from_i64(&[3], &[0, 9, 1000]).unwrap();
    for layout in [RopeLayout::Normal, RopeLayout::Neox] {
        for (rot, scaling) in [
            (16, RopeScaling::None),
            (10, RopeScaling::Linear { factor: 4.0 }),
        ] {
            let op = Op::Rope {
                layout,
                rot_dims: rot,
                base: 10000.0,
                scaling,
            };
            check(&op, &[x.clone(), pos.clone()], 1e-5, "rope");
        }
    }
    let factors = t(&mut rng, &[8]);
    let op = Op::Rope {
        layout: RopeLayout::Normal,
        rot_dims: 16,
        base: 500000.0,
        scaling: RopeScaling::None,
    };
    check(&op, &[x, pos, factors], 1e-5, "rope with freq factors");
    // Enough rows to split over the threads, odd head and position counts, partial rotation.
    let x = t(&mut rng, &[37, 9, 128]);
    let pos: Vec<i64> = (0..37).map(|p| 3 * p + 5).collect();
    let pos = Tensor::from_i64(&[37], &pos).unwrap();
    for layout in [RopeLayout::Normal, RopeLayout::Neox] {
        let op = Op::Rope {
            layout,
            rot_dims: 96,
            base: 10000.0,
            scaling: RopeScaling::None,
        };
        check(&op, &[x.clone(), pos.clone()], 1e-5, "rope, many rows");
    }
}

#[test]
fn fused_attention() {
    let mut rng = Rng::new(14);
    for (hq, hkv, lq, lk, d) in [
        (9, 3, 1, 37, 16),
        (4, 4, 5, 5, 24),
        (6, 2, 3, 131, 8),
        (3, 1, 1, 1, 5),
    ] {
        let q = t(&mut rng, &[hq, lq, d]);
        let k = t(&mut rng, &[hkv, lk, d]);
        let v = t(&mut rng, &[hkv, lk, d + 3]);
        for (causal, window, softcap) in [
            (true, None, None),
            (true, Some(4), None),
            (false, None, Some(0.5)),
            (true, Some(1), Some(20.0)),
        ] {
            let op = Op::Sdpa {
                layout: SdpaLayout::HeadMajor,
                scale: 0.3,
                causal,
                sliding_window: window,
                softcap,
                alibi_max_bias: None,
            };
            check(
                &op,
                &[q.clone(), k.clone(), v.clone()],
                1e-5,
                &format!("sdpa {hq}/{hkv} {lq}x{lk} {op:?}"),
            );
        }
    }
}

/// Decode-sized attention (few query rows per KV head) over caches longer than one chunk of
/// keys (the chunks run on different threads and merge per row), in both layouts: windows that
/// end inside a chunk or hide whole chunks, a mask that hides a whole chunk of one row, softcap,
/// head sizes that are not multiples of 16, a row with every key hidden.
#[test]
fn decode_attention_over_long_caches() {
    let mut rng = Rng::new(15);
    for (hq, hkv, lq, lk, d, dv) in [
        (8, 2, 1, 600, 64, 64),
        (9, 3, 2, 517, 24, 27),
        (4, 1, 3, 257, 5, 7),
        (2, 2, 1, 1030, 16, 16),
    ] {
        let (q, k, v) = (
            t(&mut rng, &[lq, hq, d]),
            t(&mut rng, &[lk, hkv, d]),
            t(&mut rng, &[lk, hkv, dv]),
        );
        // Row 0 of the queries sees nothing in keys 256..512; the last row sees no key at all.
        let mut mask = vec![0f32; lq * lk];
        for (i, m) in mask.iter_mut().enumerate() {
            let (row, key) = (i / lk, i % lk);
            if (row == 0 && (256..512).contains(&key)) || (lq > 1 && row == lq - 1) {
                *m = f32::NEG_INFINITY;
            }
        }
        let mask = Tensor::from_f32(&[lq, lk], &mask).unwrap();
        for (causal, window, softcap, masked) in [
            (true, None, None, false),
            (true, Some(300), None, false),
            (true, Some(40), Some(20.0), false),
            (false, None, Some(0.5), true),
            (true, Some(700), None, true),
        ] {
            let op = |layout| Op::Sdpa {
                layout,
                scale: 0.3,
                causal,
                sliding_window: window,
                softcap,
                alibi_max_bias: None,
            };
            let mut tokens = vec![q.clone(), k.clone(), v.clone()];
            let swap = |x: &Tensor| {
                let dims = x.dims();
                let y = common::reference(
                    &Op::Permute {
                        perm: vec![1, 0, 2],
                    },
                    std::slice::from_ref(x),
                );
                Tensor::from_f32(&[dims[1], dims[0], dims[2]], &y).unwrap()
            };
            let mut heads: Vec<Tensor> = tokens.iter().map(swap).collect();
            if masked {
                tokens.push(mask.clone());
                heads.push(mask.clone());
            }
            let what = format!(
                "decode sdpa {hq}/{hkv} {lq}x{lk} d {d}/{dv} {:?}",
                op(SdpaLayout::TokenMajor)
            );
            check(
                &op(SdpaLayout::TokenMajor),
                &tokens,
                1e-5,
                &format!("{what}, token-major"),
            );
            check(
                &op(SdpaLayout::HeadMajor),
                &heads,
                1e-5,
                &format!("{what}, head-major"),
            );
        }
    }
}

/// Keys and values in f16 (a half-precision cache): where the cpu backend takes them (AVX-512),
/// the result is bit for bit that of the same backend on their values widened to f32, on the
/// decode path (read in place, one chunk or several, masked, causal, grouped, both layouts) and
/// on the paths that widen them first (many query rows per KV head, batch-invariant); keys in
/// f16 with values in f32 are refused.
#[test]
fn half_keys_and_values_attend_as_their_widened_values() {
    let mut rng = Rng::new(16);
    for (hq, hkv, lq, lk, d, causal) in [
        (6, 6, 5, 1500, 64, false),
        (8, 2, 1, 600, 64, true),
        (9, 3, 2, 517, 24, true),
        (4, 1, 20, 70, 16, true),
    ] {
        let half = |x: &Tensor| {
            let v = x.to_f32_vec().unwrap();
            Tensor::from_f32_as(x.dims(), &v, DType::F16).unwrap()
        };
        let widen = |x: &Tensor| Tensor::from_f32(x.dims(), &x.to_f32_vec().unwrap()).unwrap();
        for layout in [SdpaLayout::TokenMajor, SdpaLayout::HeadMajor] {
            let (qd, kd) = match layout {
                SdpaLayout::TokenMajor => ([lq, hq, d], [lk, hkv, d]),
                SdpaLayout::HeadMajor => ([hq, lq, d], [hkv, lk, d]),
            };
            let q = t(&mut rng, &qd);
            let (k16, v16) = (half(&t(&mut rng, &kd)), half(&t(&mut rng, &kd)));
            let op = Op::Sdpa {
                layout,
                scale: 0.125,
                causal,
                sliding_window: None,
                softcap: None,
                alibi_max_bias: None,
            };
            let halves = [q.clone(), k16.clone(), v16.clone()];
            let widened = [q.clone(), widen(&k16), widen(&v16)];
            let mixed: Vec<_> = [q.clone(), k16.clone(), widen(&v16)]
                .iter()
                .map(Tensor::info)
                .collect();
            for (set, one, three) in common::backends(ActPrecision::default()) {
                let infos: Vec<_> = halves.iter().map(Tensor::info).collect();
                assert!(
                    !one.supports(&op, &mixed),
                    "{set:?}: f16 keys with f32 values"
                );
                if !one.supports(&op, &infos) {
                    assert_ne!(set, KernelSet::Avx512, "AVX-512 takes f16 keys and values");
                    continue;
                }
                for b in [&one, &three] {
                    let (got, want) = (common::run(b, &op, &halves), common::run(b, &op, &widened));
                    assert_eq!(
                        got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        "{set:?} {hq}/{hkv} {lq}x{lk} {layout:?}"
                    );
                }
                let invariant = CpuBackend::from_options(&CpuOptions {
                    threads: Some(2),
                    batch_invariant: true,
                    ..CpuOptions::default()
                })
                .unwrap();
                let (got, want) = (
                    common::run(&invariant, &op, &halves),
                    common::run(&invariant, &op, &widened),
                );
                assert_eq!(got, want, "batch-invariant {hq}/{hkv} {lq}x{lk} {layout:?}");
            }
        }
    }
}

/// f32 → f16 → f32 casts equal the reference's bit for bit (round to nearest even, overflow to
/// infinity, subnormals), and other casts are left to it.
#[test]
fn casts_between_f32_and_f16_equal_the_reference() {
    let mut rng = Rng::new(17);
    let mut v: Vec<f32> = rng.vec(1000).iter().map(|x| x * 300.0).collect();
    v.extend([
        70000.0,
        -1e-7,
        6e-8,
        0.0,
        -0.0,
        65519.0,
        65520.0,
        1.0 + 1.0 / 2048.0,
    ]);
    let x = Tensor::from_f32(&[v.len()], &v).unwrap();
    let be = CpuBackend::new().unwrap();
    let to_half = Op::Cast { to: DType::F16 };
    let half = be
        .execute(&to_half, std::slice::from_ref(&x), &mut Default::default())
        .unwrap()
        .remove(0);
    let want = cyb_ops::reference::execute(&to_half, std::slice::from_ref(&x)).unwrap();
    assert_eq!(half.dtype(), DType::F16);
    assert_eq!(half.host_bytes(), want[0].host_bytes());
    let back = Op::Cast { to: DType::F32 };
    let got = common::run(&be, &back, std::slice::from_ref(&half));
    assert_eq!(got, common::reference(&back, std::slice::from_ref(&half)));
    let i64s = Op::Cast { to: DType::I64 };
    assert!(!be.supports(&i64s, &[x.info()]));
}

//! The encoder-sized ops (large enough to run on the pool) against the reference: layer norm,
//! the fused residual add + layer norm (both outputs), element-wise ops, permutes, the
//! `Linear` epilogue, and attention with additive masks; 1 and 3 threads bit-identical.

mod common;
use common::{backends, check, reference, rel_err, Rng};
use cyb_backend::{Backend, ExecContext};
use cyb_ops::{GeluApprox, LinearAct, Op, SdpaLayout};
use cyb_tensor::{DType, Tensor, TensorInfo};

fn t(rng: &mut Rng, dims: &[usize]) -> Tensor {
    Tensor::from_f32(dims, &rng.vec(dims.iter().product())).unwrap()
}

#[test]
fn layer_norm_small_and_large() {
    let mut rng = Rng::new(21);
    // 67 (odd, below one 16-lane chunk ×5) and a 130×387 tensor that takes the pool.
    for dims in [vec![5, 3, 67], vec![130, 387]] {
        let d = dims[dims.len() - 1];
        let x = Tensor::from_f32(
            &dims,
            &rng.vec(dims.iter().product())
                .iter()
                .map(|v| v * 3.0 + 0.7)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let (w, b) = (t(&mut rng, &[d]), t(&mut rng, &[d]));
        let op = Op::LayerNorm { eps: 1e-12 };
        check(&op, &[x.clone(), w.clone(), b.clone()], 1e-5, "layer_norm");
        check(
            &op,
            &[x.clone(), w.clone()],
            1e-5,
            "layer_norm without bias",
        );
        check(
            &op,
            std::slice::from_ref(&x),
            1e-5,
            "layer_norm without weight",
        );
    }
}

#[test]
fn add_layer_norm_both_outputs() {
    let mut rng = Rng::new(22);
    for dims in [vec![7, 67], vec![131, 384]] {
        let d = dims[1];
        let (a, b) = (t(&mut rng, &dims), t(&mut rng, &dims));
        let (w, bias) = (t(&mut rng, &[d]), t(&mut rng, &[d]));
        let op = Op::AddLayerNorm { eps: 1e-5 };
        let inputs = [a, b, w, bias];
        let want = cyb_ops::reference::execute(&op, &inputs).unwrap();
        let infos: Vec<TensorInfo> = inputs.iter().map(Tensor::info).collect();
        for (set, one, three) in backends(Default::default()) {
            let mut got = Vec::new();
            for be in [&one, &three] {
                assert!(be.supports(&op, &infos));
                let out = be
                    .execute(&op, &inputs, &mut ExecContext::default())
                    .unwrap();
                assert_eq!(out.len(), 2);
                got.push(
                    out.iter()
                        .map(|o| o.to_f32_vec().unwrap())
                        .collect::<Vec<_>>(),
                );
            }
            for (i, w) in want.iter().enumerate() {
                let w = w.to_f32_vec().unwrap();
                let err = rel_err(&got[0][i], &w);
                assert!(err <= 1e-5, "output {i} on {}: {err}", set.name());
                assert_eq!(got[0][i], got[1][i], "1 and 3 threads on {}", set.name());
            }
        }
    }
}

#[test]
fn large_elementwise_and_linear_epilogue() {
    let mut rng = Rng::new(23);
    let (a, b, row) = (
        t(&mut rng, &[131, 387]),
        t(&mut rng, &[131, 387]),
        t(&mut rng, &[387]),
    );
    for op in [Op::Add, Op::Sub, Op::Mul] {
        check(&op, &[a.clone(), b.clone()], 1e-6, op.name());
        check(&op, &[a.clone(), row.clone()], 1e-6, op.name());
    }
    let wide = Tensor::from_f32(
        &[131, 387],
        &a.to_f32_vec()
            .unwrap()
            .iter()
            .map(|v| v * 9.0)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for approx in [GeluApprox::Erf, GeluApprox::Tanh] {
        check(
            &Op::Gelu { approx },
            std::slice::from_ref(&wide),
            1e-6,
            "gelu",
        );
    }
    // Head splits of an encoder (contiguous rows) and a permute moving the last axis.
    let heads = t(&mut rng, &[2, 131, 12, 33]);
    for perm in [vec![0, 2, 1, 3], vec![3, 1, 0, 2]] {
        check(
            &Op::Permute { perm },
            std::slice::from_ref(&heads),
            0.0,
            "permute",
        );
    }
    // act(x·wᵀ + bias) on 131 rows of 67 → 387.
    let x = t(&mut rng, &[131, 67]);
    let w = t(&mut rng, &[387, 67]);
    for act in [
        LinearAct::None,
        LinearAct::Gelu(GeluApprox::Erf),
        LinearAct::Relu,
    ] {
        let op = Op::Linear {
            rhs_transposed: true,
            act,
        };
        check(&op, &[x.clone(), w.clone(), row.clone()], 1e-4, "linear");
    }
    // The epilogue fused into the float GEMM's store (F16 weights) and applied after the
    // quantized kernels (Q8_0, k = 64: two blocks).
    let x = t(&mut rng, &[37, 64]);
    for (dtype, tol) in [(DType::F16, 1e-4), (DType::Q8_0, 3e-2)] {
        let w = Tensor::from_f32_as(&[387, 64], &rng.vec(387 * 64), dtype).unwrap();
        for act in [LinearAct::None, LinearAct::Gelu(GeluApprox::Tanh)] {
            let op = Op::Linear {
                rhs_transposed: true,
                act,
            };
            let inputs = [x.clone(), w.clone(), row.clone()];
            check(&op, &inputs, tol, &format!("linear {dtype} {act:?}"));
        }
    }
}

#[test]
fn masked_attention() {
    let mut rng = Rng::new(24);
    // [batch, heads, len, d] with a padding mask [batch, 1, 1, len] (0 or -inf), a full
    // [len, len] additive mask, and a per-head mask [batch, heads, 1, len].
    for (b, h, l, d, dv) in [(2, 3, 37, 16, 16), (1, 12, 70, 32, 35), (3, 2, 5, 7, 3)] {
        let (q, k, v) = (
            t(&mut rng, &[b, h, l, d]),
            t(&mut rng, &[b, h, l, d]),
            t(&mut rng, &[b, h, l, dv]),
        );
        let mut pad = vec![0f32; b * l];
        for (i, m) in pad.iter_mut().enumerate() {
            // Sequence i/l keeps its first l - 2·(i/l) keys.
            if i % l >= l - 2 * (i / l) {
                *m = f32::NEG_INFINITY;
            }
        }
        let pad = Tensor::from_f32(&[b, 1, 1, l], &pad).unwrap();
        let full = t(&mut rng, &[l, l]);
        let per_head = t(&mut rng, &[b, h, 1, l]);
        for (causal, window) in [(false, None), (true, None), (true, Some(3))] {
            let op = Op::Sdpa {
                layout: SdpaLayout::HeadMajor,
                scale: 0.3,
                causal,
                sliding_window: window,
                softcap: None,
                alibi_max_bias: None,
            };
            for (mask, name) in [(&pad, "padding"), (&full, "full"), (&per_head, "per head")] {
                let inputs = [q.clone(), k.clone(), v.clone(), mask.clone()];
                check(
                    &op,
                    &inputs,
                    1e-5,
                    &format!("sdpa {name} {b}x{h}x{l}x{d} {op:?}"),
                );
            }
        }
        // Every key masked: the row is zeros, as in the reference.
        let all = Tensor::from_f32(&[1, 1, 1, l], &vec![f32::NEG_INFINITY; l]).unwrap();
        let op = Op::Sdpa {
            layout: SdpaLayout::HeadMajor,
            scale: 1.0,
            causal: false,
            sliding_window: None,
            softcap: Some(5.0),
            alibi_max_bias: None,
        };
        let inputs = [q.clone(), k.clone(), v.clone(), all];
        assert!(reference(&op, &inputs).iter().all(|&y| y == 0.0));
        check(&op, &inputs, 0.0, "sdpa all masked");
    }
}

/// Swaps the head and sequence axes of a rank-4 tensor.
fn swap_heads(x: &Tensor) -> Tensor {
    let d = x.dims();
    let y = reference(
        &Op::Permute {
            perm: vec![0, 2, 1, 3],
        },
        std::slice::from_ref(x),
    );
    Tensor::from_f32(&[d[0], d[2], d[1], d[3]], &y).unwrap()
}

#[test]
fn token_major_attention() {
    let mut rng = Rng::new(25);
    // q `[batch, lq, hq, d]`, k and v `[batch, lk, hkv, ..]`: whole sequences (encoder sized,
    // the tile path), grouped-query heads, and a few rows after a KV cache (the decode path).
    let shapes = [
        (2, 37, 37, 4, 2, 16, 16),
        (1, 70, 70, 12, 12, 32, 32),
        (2, 3, 9, 6, 3, 8, 5),
        (1, 1, 20, 4, 1, 16, 16),
    ];
    for (b, lq, lk, hq, hkv, d, dv) in shapes {
        let (q, k, v) = (
            t(&mut rng, &[b, lq, hq, d]),
            t(&mut rng, &[b, lk, hkv, d]),
            t(&mut rng, &[b, lk, hkv, dv]),
        );
        let pad: Vec<f32> = (0..b * lk)
            .map(|i| {
                if i % lk + i / lk >= lk {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        let pad = Tensor::from_f32(&[b, 1, 1, lk], &pad).unwrap();
        for causal in [false, true] {
            let op = |layout| Op::Sdpa {
                layout,
                scale: 0.25,
                causal,
                sliding_window: None,
                softcap: None,
                alibi_max_bias: None,
            };
            let tokens = op(SdpaLayout::TokenMajor);
            let inputs = [q.clone(), k.clone(), v.clone(), pad.clone()];
            let what = format!("token-major sdpa {b}x{lq}x{lk}x{hq}/{hkv} causal {causal}");
            check(&tokens, &inputs, 1e-5, &what);
            // The reference's token-major attention is its head-major one with the axes swapped.
            let heads = [swap_heads(&q), swap_heads(&k), swap_heads(&v), pad.clone()];
            let y = cyb_ops::reference::execute(&op(SdpaLayout::HeadMajor), &heads).unwrap();
            assert_eq!(
                reference(&tokens, &inputs),
                swap_heads(&y[0]).to_f32_vec().unwrap(),
                "{what}: reference layouts disagree"
            );
        }
    }
}

/// Non-finite queries, keys or values (a broken checkpoint's) never make the kernels panic,
/// whatever the layout and path: the result is computed (NaN where it must be) or an error.
#[test]
fn non_finite_attention_inputs_do_not_panic() {
    let mut rng = Rng::new(26);
    let shapes = [
        (1, 20, 20, 12, 12, 32, 32),
        (2, 37, 37, 4, 2, 16, 16),
        (1, 1, 20, 4, 1, 16, 16),
        (2, 3, 9, 6, 3, 8, 5),
    ];
    for (b, lq, lk, hq, hkv, d, dv) in shapes {
        for (which, bad) in [(0, f32::NAN), (1, f32::INFINITY), (2, f32::NAN)] {
            let mut qkv = [
                t(&mut rng, &[b, lq, hq, d]).to_f32_vec().unwrap(),
                t(&mut rng, &[b, lk, hkv, d]).to_f32_vec().unwrap(),
                t(&mut rng, &[b, lk, hkv, dv]).to_f32_vec().unwrap(),
            ];
            for x in qkv[which].iter_mut().step_by(7) {
                *x = bad;
            }
            let q = Tensor::from_f32(&[b, lq, hq, d], &qkv[0]).unwrap();
            let k = Tensor::from_f32(&[b, lk, hkv, d], &qkv[1]).unwrap();
            let v = Tensor::from_f32(&[b, lk, hkv, dv], &qkv[2]).unwrap();
            for (layout, causal) in [
                (SdpaLayout::TokenMajor, false),
                (SdpaLayout::TokenMajor, true),
                (SdpaLayout::HeadMajor, false),
            ] {
                let (q, k, v) = match layout {
                    SdpaLayout::HeadMajor => (swap_heads(&q), swap_heads(&k), swap_heads(&v)),
                    _ => (q.clone(), k.clone(), v.clone()),
                };
                let op = Op::Sdpa {
                    layout,
                    scale: 0.25,
                    causal,
                    sliding_window: None,
                    softcap: None,
                    alibi_max_bias: None,
                };
                for (set, one, three) in backends(Default::default()) {
                    for be in [&one, &three] {
                        let inputs = [q.clone(), k.clone(), v.clone()];
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            be.execute(&op, &inputs, &mut ExecContext::default())
                        }));
                        assert!(
                            r.is_ok(),
                            "{set:?} {layout:?} causal {causal} {b}x{lq}x{lk}x{hq}/{hkv}x{d}/{dv}: \
                             input {which} = {bad} panicked"
                        );
                    }
                }
            }
        }
    }
}

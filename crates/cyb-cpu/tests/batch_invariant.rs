//! `CpuOptions::batch_invariant`: a row's result does not depend on how many rows came with
//! it. Matmuls over weights of every format (in shared storage, as loaders hand them out) and
//! causal attention give each row bit-identically whether it is computed alone, in a small
//! piece or in the whole batch, on every kernel set and thread count; results stay within the
//! usual tolerance of the reference.

mod common;
use common::{reference, rel_err, run, shared, Rng};
use cyb_cpu::{ActPrecision, CpuBackend, CpuOptions, KernelSet};
use cyb_ops::{Op, SdpaLayout};
use cyb_tensor::{DType, Tensor};

fn invariant(set: KernelSet, threads: usize, act: ActPrecision) -> CpuBackend {
    CpuBackend::from_options(&CpuOptions {
        kernels: Some(set),
        threads: Some(threads),
        activations: Some(act),
        batch_invariant: true,
        ..CpuOptions::default()
    })
    .unwrap()
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Row pieces of `m` rows: each alone, then pieces of 3 and 5, then all at once.
fn pieces(m: usize) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = (0..m).map(|r| (r, r + 1)).collect();
    for size in [3, 5] {
        out.extend((0..m).step_by(size).map(|r| (r, (r + size).min(m))));
    }
    out
}

#[test]
fn matmul_rows_do_not_depend_on_the_row_count() {
    let mut rng = Rng::new(31);
    let op = Op::MatMul {
        rhs_transposed: true,
    };
    // k = 2304 takes the float GEMM's blocked form for many rows and the panels' one-row
    // kernel (or the streaming decode kernel) for one row in the default mode.
    let (m, n, k) = (13usize, 70usize, 2304usize);
    let a = rng.vec(m * k);
    for dtype in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q8_0,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ] {
        let w = shared(&Tensor::from_f32_as(&[n, k], &rng.vec(n * k), dtype).unwrap());
        for set in KernelSet::available() {
            for act in [ActPrecision::Q8, ActPrecision::Q16] {
                for threads in [1, 3] {
                    let b = invariant(set, threads, act);
                    let all = Tensor::from_f32(&[m, k], &a).unwrap();
                    let want = run(&b, &op, &[all.clone(), w.clone()]);
                    let what = format!("{dtype} {} {act:?} {threads} threads", set.name());
                    let r = reference(&op, &[all, w.clone()]);
                    assert!(rel_err(&want, &r) < 0.05, "{what}: far from the reference");
                    for (r0, r1) in pieces(m) {
                        let part = Tensor::from_f32(&[r1 - r0, k], &a[r0 * k..r1 * k]).unwrap();
                        let got = run(&b, &op, &[part, w.clone()]);
                        assert!(
                            same_bits(&got, &want[r0 * n..r1 * n]),
                            "{what}: rows {r0}..{r1}"
                        );
                    }
                }
            }
        }
    }
}

/// Causal attention over a cache longer than one chunk of keys (token-major, as the KV cache
/// hands it out): rows fed alone (decode), in pieces (prompt chunks) or all together (a whole
/// prompt, which the default mode runs on the transposed-key GEMM path) agree bit for bit.
#[test]
fn attention_rows_do_not_depend_on_the_row_count() {
    let mut rng = Rng::new(37);
    for (hq, hkv, lq, past, d) in [(8, 2, 40, 560, 64), (9, 3, 21, 250, 24), (4, 4, 17, 0, 16)] {
        let lk = past + lq;
        let q = rng.vec(lq * hq * d);
        let k = rng.vec(lk * hkv * d);
        let v = rng.vec(lk * hkv * d);
        for (window, softcap) in [(None, None), (Some(300), None), (None, Some(20.0))] {
            let op = Op::Sdpa {
                layout: SdpaLayout::TokenMajor,
                scale: 0.3,
                causal: true,
                sliding_window: window,
                softcap,
                alibi_max_bias: None,
            };
            // Query rows r0..r1 see the keys up to past + r1.
            let inputs = |r0: usize, r1: usize| {
                let keys = past + r1;
                vec![
                    Tensor::from_f32(&[r1 - r0, hq, d], &q[r0 * hq * d..r1 * hq * d]).unwrap(),
                    Tensor::from_f32(&[keys, hkv, d], &k[..keys * hkv * d]).unwrap(),
                    Tensor::from_f32(&[keys, hkv, d], &v[..keys * hkv * d]).unwrap(),
                ]
            };
            let r = reference(&op, &inputs(0, lq));
            for set in KernelSet::available() {
                for threads in [1, 3] {
                    let b = invariant(set, threads, ActPrecision::default());
                    let what = format!(
                        "{hq}/{hkv} {lq}x{lk} {window:?} {softcap:?} {} {threads} threads",
                        set.name()
                    );
                    let want = run(&b, &op, &inputs(0, lq));
                    assert!(rel_err(&want, &r) < 1e-5, "{what}: far from the reference");
                    let row = hq * d;
                    for (r0, r1) in pieces(lq) {
                        let got = run(&b, &op, &inputs(r0, r1));
                        assert!(
                            same_bits(&got, &want[r0 * row..r1 * row]),
                            "{what}: rows {r0}..{r1}"
                        );
                    }
                }
            }
        }
    }
}

//! Rotary embeddings, scaled dot-product attention and the KV-cache append.

use crate::case::TRANSCENDENTAL;
use crate::{Case, Rng};
use cyb_ops::{Op, RopeLayout, RopeScaling, SdpaLayout};
use cyb_tensor::{DType, Tensor};

pub fn cases() -> Vec<Case> {
    let mut rng = Rng::new(4);
    let mut v = Vec::new();
    let scalings = [
        ("no scaling", RopeScaling::None),
        ("linear scaling", RopeScaling::Linear { factor: 2.0 }),
        (
            "llama3 scaling",
            RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position: 64,
            },
        ),
        (
            "yarn scaling",
            RopeScaling::Yarn {
                factor: 4.0,
                original_max_position: 64,
                beta_fast: 32.0,
                beta_slow: 1.0,
                attn_factor: None,
            },
        ),
    ];
    for layout in [RopeLayout::Normal, RopeLayout::Neox] {
        for (shape, scaling) in scalings {
            let op = Op::Rope {
                layout,
                rot_dims: 16,
                base: 10000.0,
                scaling,
            };
            let pos = Tensor::from_i64(&[5], &[0, 1, 2, 300, 4097]).expect("valid");
            let inputs = vec![rng.f32(&[5, 3, 16], 2.0), pos];
            v.push(Case::new(op, inputs, shape).tol(TRANSCENDENTAL));
        }
        // Partial rotation (Phi-3), I32 positions, freq_factors (GGUF's rope_freqs).
        let op = Op::Rope {
            layout,
            rot_dims: 12,
            base: 500000.0,
            scaling: RopeScaling::None,
        };
        let pos = Tensor::from_i32(&[4], &[7, 8, 9, 10]).expect("valid");
        let factors = Tensor::from_f32(&[6], &[1.0, 1.0, 2.0, 4.0, 8.0, 8.0]).expect("valid");
        let inputs = vec![rng.f32(&[2, 4, 5, 20], 2.0), pos, factors];
        v.push(Case::new(op, inputs, "partial, factors").tol(TRANSCENDENTAL));
    }
    let sdpa = |causal, sliding_window, softcap, alibi_max_bias, layout| Op::Sdpa {
        layout,
        scale: 0.25,
        causal,
        sliding_window,
        softcap,
        alibi_max_bias,
    };
    let head = SdpaLayout::HeadMajor;
    // (op, hq, hkv, lq, lk, d, shape class)
    let shapes = [
        (
            sdpa(true, None, None, None, head),
            4,
            2,
            7,
            7,
            16,
            "causal prefill, GQA",
        ),
        (
            sdpa(true, None, None, None, head),
            4,
            4,
            1,
            37,
            16,
            "one row",
        ),
        (sdpa(false, None, None, None, head), 3, 3, 5, 9, 12, "odd"),
        (
            sdpa(true, Some(4), None, None, head),
            4,
            2,
            9,
            13,
            16,
            "sliding window",
        ),
        (
            sdpa(true, None, Some(5.0), None, head),
            4,
            2,
            6,
            6,
            16,
            "softcap",
        ),
        (
            sdpa(false, None, None, Some(8.0), head),
            6,
            6,
            5,
            5,
            8,
            "alibi",
        ),
        (
            sdpa(true, None, None, None, head),
            2,
            1,
            3,
            300,
            64,
            "long context",
        ),
        (
            sdpa(true, None, None, None, SdpaLayout::TokenMajor),
            4,
            2,
            7,
            7,
            16,
            "token major",
        ),
    ];
    for (op, hq, hkv, lq, lk, d, shape) in shapes {
        let token_major = matches!(
            op,
            Op::Sdpa {
                layout: SdpaLayout::TokenMajor,
                ..
            }
        );
        let (q, k) = if token_major {
            ([lq, hq, d], [lk, hkv, d])
        } else {
            ([hq, lq, d], [hkv, lk, d])
        };
        let inputs = vec![rng.f32(&q, 2.0), rng.f32(&k, 2.0), rng.f32(&k, 1.0)];
        v.push(Case::new(op, inputs, shape).tol(TRANSCENDENTAL));
    }
    // An additive mask broadcast over the heads (padding: -inf for the last keys), batched.
    let (b, hq, lq, lk, d) = (2, 4, 5, 6, 8);
    let mut mask = vec![0f32; b * lq * lk];
    for (i, m) in mask.iter_mut().enumerate() {
        if i % lk >= lk - 1 - (i / (lq * lk)) {
            *m = f32::NEG_INFINITY;
        } else if i % 3 == 0 {
            *m = -0.5;
        }
    }
    let mask = Tensor::from_f32(&[b, 1, lq, lk], &mask).expect("valid");
    let inputs = vec![
        rng.f32(&[b, hq, lq, d], 2.0),
        rng.f32(&[b, 2, lk, d], 2.0),
        rng.f32(&[b, 2, lk, d], 1.0),
        mask,
    ];
    let op = sdpa(false, None, None, None, head);
    v.push(Case::new(op, inputs, "mask, batched").tol(TRANSCENDENTAL));
    let inputs = vec![
        rng.f32(&[3, 3, 8], 2.0),
        rng.f32(&[3, 4, 8], 2.0),
        rng.values(&[3, 4, 8], DType::F16),
    ];
    v.push(Case::new(sdpa(true, None, None, None, head), inputs, "f16 values").tol(TRANSCENDENTAL));
    let cache = rng.f32(&[3, 10, 8], 1.0);
    let new = rng.f32(&[2, 3, 8], 1.0);
    v.push(Case::new(Op::KvAppend { start: 4 }, vec![cache, new], "odd").tol(0.0));
    // Rope with GGUF's rope_freqs factors on top of each scaling.
    let factors = Tensor::from_f32(&[4], &[1.0, 2.0, 4.0, 8.0]).expect("valid");
    for layout in [RopeLayout::Normal, RopeLayout::Neox] {
        for (_, scaling) in scalings {
            let op = Op::Rope {
                layout,
                rot_dims: 8,
                base: 10000.0,
                scaling,
            };
            let pos = Tensor::from_i64(&[7], &[5, 6, 7, 8, 9, 10, 11]).expect("valid");
            let inputs = vec![rng.f32(&[7, 3, 10], 2.0), pos, factors.clone()];
            v.push(Case::new(op, inputs, "scaling and factors").tol(TRANSCENDENTAL));
        }
    }
    let causal = |sliding_window, softcap| Op::Sdpa {
        layout: SdpaLayout::HeadMajor,
        scale: 0.3,
        causal: true,
        sliding_window,
        softcap,
        alibi_max_bias: None,
    };
    // (op, q, k, v dims, shape class): dv ≠ d; a window with a softcap; decode over a batch
    // of caches; a head size past a GPU score loop's eight four-value loads (68 = 2 · 32 + 4);
    // value rows wider than 256 over 300 keys; thousands of keys with a window and a softcap.
    type Dims = [usize; 4];
    let shapes: [(Op, Dims, Dims, Dims, &str); 6] = [
        (
            causal(None, None),
            [1, 4, 5, 9],
            [1, 2, 11, 9],
            [1, 2, 11, 7],
            "dv ≠ d",
        ),
        (
            causal(Some(2), Some(0.5)),
            [1, 4, 5, 9],
            [1, 2, 11, 9],
            [1, 2, 11, 9],
            "window and softcap",
        ),
        (
            causal(None, None),
            [2, 6, 1, 16],
            [2, 3, 131, 16],
            [2, 3, 131, 16],
            "batched decode",
        ),
        (
            causal(None, None),
            [1, 4, 1, 68],
            [1, 2, 45, 68],
            [1, 2, 45, 68],
            "head size 68",
        ),
        (
            causal(None, None),
            [1, 2, 1, 8],
            [1, 1, 300, 8],
            [1, 1, 300, 260],
            "value rows past 256",
        ),
        (
            causal(Some(1500), Some(4.0)),
            [1, 2, 3, 8],
            [1, 1, 2500, 8],
            [1, 1, 2500, 8],
            "2500 keys, window",
        ),
    ];
    for (op, q, k, val, shape) in shapes {
        let inputs = vec![rng.f32(&q, 2.0), rng.f32(&k, 2.0), rng.f32(&val, 1.0)];
        v.push(Case::new(op, inputs, shape).tol(TRANSCENDENTAL));
    }
    // Half-precision activations.
    for dt in [DType::F16, DType::BF16] {
        let op = Op::Rope {
            layout: RopeLayout::Neox,
            rot_dims: 16,
            base: 10000.0,
            scaling: RopeScaling::None,
        };
        let pos = Tensor::from_i64(&[5], &[0, 1, 2, 3, 4]).expect("valid");
        v.push(Case::new(op, vec![rng.values(&[5, 3, 16], dt), pos], "odd"));
    }
    v
}

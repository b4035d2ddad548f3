//! What the conformance suite (crates/cyb-conformance, which runs every op case on wgpu) cannot
//! express: kernel variants chosen by backend settings (float-only matmuls, cooperative
//! matrices, integer dot products, unchecked shaders, no subgroups), in-place writes, the
//! device-side checks and uploads, each against the CPU reference.
//!
//! Tolerances (max|gpu - ref| / max|ref|): 1e-5 for ops whose math is the reference's up to
//! summation order; 1e-4 where the GPU's `exp`/`tanh`/`sqrt` differ from Rust's libm in the last
//! bits (softmax, attention, the activations, rope's rotation of large values).
#![allow(clippy::cloned_ref_to_slice_refs)] // cloned inputs read better in tables of cases

mod common;

use common::{gpu, random, rel_err};
use cyb_backend::{Backend, ExecContext};
use cyb_ops::{Op, SdpaLayout};
use cyb_tensor::{DType, Tensor};

/// Runs `op` on the GPU (which must support it) and on the reference; returns the error of each
/// output.
fn check(op: &Op, inputs: &[Tensor], tol: f32) {
    let Some(gpu) = gpu() else { return };
    check_on(&gpu, op, inputs, tol);
}

/// `check` on a given backend.
fn check_on(gpu: &cyb_wgpu::WgpuBackend, op: &Op, inputs: &[Tensor], tol: f32) {
    let infos: Vec<_> = inputs.iter().map(Tensor::info).collect();
    assert!(
        gpu.supports(op, &infos),
        "wgpu should support {op:?} {infos:?}"
    );
    let dev: Vec<Tensor> = inputs
        .iter()
        .map(|t| {
            gpu.upload(t.host_bytes().unwrap(), t.dims(), t.dtype())
                .unwrap()
        })
        .collect();
    let got = gpu.execute(op, &dev, &mut ExecContext::default()).unwrap();
    let want = cyb_ops::reference::execute(op, inputs).unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.dims(), w.dims(), "{op:?}");
        assert_eq!(g.dtype(), w.dtype(), "{op:?}");
        let g = gpu.download_f32(g).unwrap();
        let w = w.to_f32_vec().unwrap();
        let e = rel_err(&g, &w);
        assert!(e <= tol, "{op:?}: relative error {e:e} > {tol:e}");
    }
}

fn f32t(dims: &[usize], seed: u64) -> Tensor {
    let n = dims.iter().product();
    Tensor::from_f32(dims, &random(n, seed)).unwrap()
}

use cyb_wgpu::WEIGHT_DTYPES;

#[test]
fn matmul_every_weight_format() {
    let op = Op::MatMul {
        rhs_transposed: true,
    };
    // f32 arithmetic throughout: no integer dot products for vocabularies, no cooperative
    // matrices (f16 operands) for prefill (`matmul_on_cooperative_matrices`).
    let float_only = gpu().map(|_| {
        let b = cyb_wgpu::WgpuBackend::new().unwrap();
        b.set_matvec_q16_rows(None);
        b.set_coop_matmul(false);
        b
    });
    for dt in WEIGHT_DTYPES {
        // k is odd for the scalar formats, an odd number of blocks for the others.
        let k = match dt.block_elems() {
            1 => 37,
            b => 3 * b,
        };
        // 70 rows take the tiled prefill kernel (tiles of 64 cut in both directions).
        for (m, n) in [(1, 13), (7, 13), (70, 67)] {
            let w = Tensor::from_f32_as(&[n, k], &random(n * k, 7 + k as u64), dt).unwrap();
            let Some(gpu) = float_only.as_ref() else {
                return;
            };
            check_on(gpu, &op, &[f32t(&[m, k], 3), w.clone()], 1e-5);
            // Batched activations share the weight.
            check_on(gpu, &op, &[f32t(&[2, m, k], 5), w], 1e-5);
        }
        // One activation row takes `mv` (four neighbouring values per lane and step) where rows are
        // whole groups of four: rows longer than one unrolled loop turn and not a multiple
        // of it (1004 % 8 == 4 for F16), odd block counts (rows at 2-byte-aligned offsets),
        // and rows that leave its last workgroup part empty; 13 and 3 rows take 128 or 256
        // lanes per row, 4100 rows 64 (ops::matmul::mv_lanes).
        let k = match dt.block_elems() {
            1 => 1004,
            32 => 37 * 32,
            b => 9 * b,
        };
        for n in [13, 3, 4100] {
            let w = Tensor::from_f32_as(&[n, k], &random(n * k, 11 + n as u64), dt).unwrap();
            check(&op, &[f32t(&[1, k], 9), w], 1e-5);
        }
        // 8200 rows take the fewest lanes per row (32; 64 for 256-value blocks), rows long
        // enough for the unrolled loop.
        let k = match dt.block_elems() {
            1 => 516,
            32 => 16 * 32,
            b => 4 * b,
        };
        let n = 8200;
        let w = Tensor::from_f32_as(&[n, k], &random(n * k, 12), dt).unwrap();
        check(&op, &[f32t(&[1, k], 10), w], 1e-5);
        // From 65536 rows (a vocabulary) a lane of the quantized formats computes two rows
        // (ops::matmul::mv_rows_per_lane); an odd count leaves the last lane one row. Q8_0,
        // Q4_0 and Q6_K take integer dot products there (`matvec_on_integer_dot_products`)
        // unless those are off, as on this backend of its own.
        if let (true, Some(float_only)) = (dt.block_elems() > 1, &float_only) {
            let k = 2 * dt.block_elems();
            let n = 65_537;
            let w = Tensor::from_f32_as(&[n, k], &random(n * k, 13), dt).unwrap();
            check_on(float_only, &op, &[f32t(&[1, k], 14), w], 1e-5);
        }
    }
}

/// Prefill matmuls on cooperative matrices (matmul_coop.wgsl: activations and weights rounded
/// to f16, products summed in f32), where the adapter has them (an NVIDIA GPU through Vulkan;
/// lavapipe has none, and there the same cases take the f32 tiled kernel). Rounding both
/// operands to f16 (≤ 2^-11 relative each) left less than 5e-4 of the output's largest value on
/// these random inputs on an H200; 2e-3 still fails on any misplaced tile, row, column or
/// block.
#[test]
fn matmul_on_cooperative_matrices() {
    let Some(gpu) = gpu() else { return };
    if !gpu.coop_matmul() {
        eprintln!(
            "no cooperative matrices on this adapter: the f32 tiled kernel takes these cases"
        );
    }
    // `CYB_TEST_COOP_TOL` sets another (to see how close it comes).
    let tol = std::env::var("CYB_TEST_COOP_TOL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2e-3f32);
    let op = Op::MatMul {
        rhs_transposed: true,
    };
    for dt in WEIGHT_DTYPES {
        // Rows of odd lengths (37 values: a step of 32 cut short), several steps, odd block
        // counts; tiles cut at the edges in both directions; one tile exactly; a grid of many.
        let ks: &[usize] = match dt.block_elems() {
            1 => &[37, 200],
            b => &[3 * b, 5 * b],
        };
        for &k in ks {
            for (m, n) in [(16, 64), (70, 67), (130, 200)] {
                let w = Tensor::from_f32_as(&[n, k], &random(n * k, 17 + k as u64), dt).unwrap();
                check(&op, &[f32t(&[m, k], 19), w], tol);
            }
        }
    }
}

/// The decode matvec on integer dot products (matvec_q16.wgsl: the activation row quantized to
/// 16-bit levels per weight block, as the CPU backend does), forced on for every row count:
/// the same shapes as `matmul_every_weight_format`'s one-row cases. The levels' rounding
/// (≤ amax / 65278 per value) bounds the error at ~2e-5 of the output's largest value on these
/// random inputs; 1e-4 still fails on any misread level or scale.
#[test]
fn matvec_on_integer_dot_products() {
    // A backend of its own: the shared one's other tests expect the float matvec.
    if gpu().is_none() {
        return;
    }
    let gpu = cyb_wgpu::WgpuBackend::new().unwrap();
    gpu.set_matvec_q16_rows(Some(0));
    let op = Op::MatMul {
        rhs_transposed: true,
    };
    for dt in [DType::Q8_0, DType::Q4_0, DType::Q6_K] {
        let b = dt.block_elems();
        // Odd block counts (rows at 2-byte-aligned offsets); 13 and 3 rows take 128 or 256
        // lanes per row, 4100 and 8200 fewer (ops::matmul::mv_lanes); rows of more than
        // 2048 values take several `qact` workgroups.
        let cases = [
            (13, 37 * 32),
            (3, 9 * b),
            (4100, 9 * b),
            (8200, 16 * 32),
            (5, 33 * b),
            (65_537, 2 * b),
        ];
        for (i, (n, k)) in cases.into_iter().enumerate() {
            let k = k.div_ceil(b) * b;
            let w = Tensor::from_f32_as(&[n, k], &random(n * k, 21 + i as u64), dt).unwrap();
            check_on(&gpu, &op, &[f32t(&[1, k], 22 + i as u64), w], 1e-4);
        }
        // A block of zeros (scale 0) and one far larger than the rest.
        let k = 4 * b;
        let mut a = random(k, 23);
        a[..b].fill(0.0);
        a[2 * b..3 * b].iter_mut().for_each(|v| *v *= 1e4);
        let n = 300;
        let w = Tensor::from_f32_as(&[n, k], &random(n * k, 24), dt).unwrap();
        check_on(
            &gpu,
            &op,
            &[Tensor::from_f32(&[1, k], &a).unwrap(), w],
            1e-4,
        );
    }
}

/// Kernels compiled without wgpu's runtime checks (the default) give bit-identical results to
/// kernels compiled with them: the checks only guard, they never change arithmetic.
#[test]
fn unchecked_kernels_match_checked_ones() {
    let Some(fast) = gpu() else { return };
    let checked = cyb_wgpu::WgpuBackend::new()
        .expect("a second device on the same adapter")
        .with_shader_checks(true);
    let run = |b: &cyb_wgpu::WgpuBackend, op: &Op, inputs: &[Tensor]| -> Vec<f32> {
        let dev: Vec<Tensor> = inputs.iter().map(|t| b.upload_tensor(t).unwrap()).collect();
        let out = b.execute(op, &dev, &mut ExecContext::default()).unwrap();
        b.download_f32(&out[0]).unwrap()
    };
    let matmul = Op::MatMul {
        rhs_transposed: true,
    };
    let k = 9 * 256;
    for (m, n, dt) in [
        (1, 13, DType::Q4_K),
        (70, 67, DType::Q6_K),
        (1, 4100, DType::Q4_0),
    ] {
        let w = Tensor::from_f32_as(&[n, k], &random(n * k, 21), dt).unwrap();
        let a = f32t(&[m, k], 22);
        let inputs = [a, w];
        assert_eq!(
            run(&fast, &matmul, &inputs),
            run(&checked, &matmul, &inputs),
            "{dt} {m}x{n}"
        );
    }
    let sdpa = Op::Sdpa {
        layout: SdpaLayout::HeadMajor,
        scale: 0.3,
        causal: true,
        sliding_window: None,
        softcap: Some(20.0),
        alibi_max_bias: None,
    };
    // GQA: 4 query heads on 2 kv heads, 3 new rows after 34 cached ones.
    let inputs = [
        f32t(&[4, 3, 8], 23),
        f32t(&[2, 37, 8], 24),
        f32t(&[2, 37, 8], 25),
    ];
    assert_eq!(run(&fast, &sdpa, &inputs), run(&checked, &sdpa, &inputs));
}

/// Reductions over a row's lanes and over a workgroup (the decode matvecs, attention) use
/// subgroup operations where the adapter has them (lavapipe: subgroups of 8, so CI runs that
/// path in every other test) and workgroup memory where it has none: that path against the
/// reference too, on a second device with subgroups off.
#[test]
fn reductions_without_subgroups() {
    let Some(gpu) = gpu() else { return };
    if std::env::var_os("CI").is_some() {
        assert!(
            gpu.subgroup_size() > 0,
            "CI's adapter should run the subgroup reductions: {}",
            gpu.adapter().summary()
        );
    }
    let plain = cyb_wgpu::WgpuBackend::new()
        .expect("a second device on the same adapter")
        .with_subgroups(false);
    assert_eq!(plain.subgroup_size(), 0);
    let matmul = Op::MatMul {
        rhs_transposed: true,
    };
    for dt in [
        DType::F16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q6_K,
    ] {
        let k = 4 * dt.block_elems().max(64);
        // 13 rows take 256 lanes per row, 8200 rows 32.
        for n in [13, 8200] {
            let w = Tensor::from_f32_as(&[n, k], &random(n * k, 31 + n as u64), dt).unwrap();
            check_on(&plain, &matmul, &[f32t(&[1, k], 32), w], 1e-5);
        }
    }
    for lq in [1, 3] {
        let sdpa = Op::Sdpa {
            layout: SdpaLayout::HeadMajor,
            scale: 0.3,
            causal: true,
            sliding_window: None,
            softcap: None,
            alibi_max_bias: None,
        };
        let inputs = [
            f32t(&[4, lq, 8], 33),
            f32t(&[2, 300, 8], 34),
            f32t(&[2, 300, 8], 35),
        ];
        check_on(&plain, &sdpa, &inputs, 1e-4);
    }
}

#[test]
fn embedding_tables() {
    for dt in [
        DType::F32,
        DType::F16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_K,
    ] {
        let dim = if dt.block_elems() == 256 { 256 } else { 64 };
        let table = Tensor::from_f32_as(&[11, dim], &random(11 * dim, 9), dt).unwrap();
        let ids64 = Tensor::from_i64(&[5], &[3, 0, 10, 3, 7]).unwrap();
        check(&Op::Embedding, &[table.clone(), ids64], 1e-6);
        let ids32 = Tensor::from_i32(&[2, 2], &[1, 2, 9, 4]).unwrap();
        check(&Op::Embedding, &[table, ids32], 1e-6);
    }
}

#[test]
fn embedding_rejects_out_of_range_ids() {
    let Some(gpu) = gpu() else { return };
    let table = f32t(&[4, 8], 1);
    let ids = Tensor::from_i64(&[2], &[1, 4]).unwrap();
    let t = gpu
        .upload(table.host_bytes().unwrap(), table.dims(), table.dtype())
        .unwrap();
    let i = gpu
        .upload(ids.host_bytes().unwrap(), ids.dims(), ids.dtype())
        .unwrap();
    let err = gpu
        .execute(&Op::Embedding, &[t, i], &mut ExecContext::default())
        .unwrap_err();
    assert!(err.to_string().contains("outside"), "{err}");
}

#[test]
fn kv_append_writes_in_place() {
    // Odd sizes: 3 heads, capacity 7, head dim 5; two appends, the second ending at capacity.
    check(
        &Op::KvAppend { start: 2 },
        &[f32t(&[3, 7, 5], 51), f32t(&[4, 3, 5], 52)],
        0.0,
    );
    let Some(gpu) = gpu() else { return };
    let host = f32t(&[3, 7, 5], 53);
    let cache = gpu
        .upload(host.host_bytes().unwrap(), host.dims(), host.dtype())
        .unwrap();
    let mut want = vec![host];
    let mut cache = cache;
    for (start, n, seed) in [(0, 6, 54), (6, 1, 55)] {
        let new = f32t(&[n, 3, 5], seed);
        let dev = gpu
            .upload(new.host_bytes().unwrap(), new.dims(), new.dtype())
            .unwrap();
        let op = Op::KvAppend { start };
        let w = cyb_ops::reference::execute(&op, &[want.pop().unwrap(), new]).unwrap();
        want = w;
        cache = gpu
            .execute(&op, &[cache, dev], &mut ExecContext::default())
            .unwrap()
            .pop()
            .unwrap();
    }
    let got = gpu.download_f32(&cache).unwrap();
    assert_eq!(got, want[0].to_f32_vec().unwrap());
}

#[test]
fn equal_small_uploads_stay_apart_where_written_in_place() {
    let Some(gpu) = gpu() else { return };
    // Two zero-filled caches of equal (small) bytes: appending to one leaves the other zero.
    let zeros = Tensor::from_f32(&[1, 4, 4], &[0.0; 16]).unwrap();
    let up = |t: &Tensor| {
        gpu.upload(t.host_bytes().unwrap(), t.dims(), t.dtype())
            .unwrap()
    };
    let (k, v) = (up(&zeros), up(&zeros));
    let new = up(&f32t(&[1, 1, 4], 56));
    let op = Op::KvAppend { start: 1 };
    gpu.execute(&op, &[k, new], &mut ExecContext::default())
        .unwrap();
    // Read v through a kernel (its own download would return the host copy it was made from).
    let twice = gpu
        .execute(&Op::Add, &[v.clone(), v], &mut ExecContext::default())
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(gpu.download_f32(&twice).unwrap(), vec![0.0; 16]);
    // Equal small integer tensors (positions) read back as uploaded.
    let pos = Tensor::from_i64(&[2], &[7, 8]).unwrap();
    let (a, b) = (up(&pos), up(&pos));
    for t in [a, b] {
        assert_eq!(gpu.download(&t).unwrap().to_i64_vec().unwrap(), vec![7, 8]);
    }
}

#[test]
fn argmax_rows_with_ties_and_nan() {
    // Odd row length, a row longer than the workgroup, batched leading dims.
    check(&Op::ArgMax { axis: -1 }, &[f32t(&[3, 5, 133], 61)], 0.0);
    check(&Op::ArgMax { axis: 1 }, &[f32t(&[2, 1000], 62)], 0.0);
    // Ties: the first index wins; NaN counts as the largest value (first NaN on ties).
    let row = |v: &[f32]| Tensor::from_f32(&[1, v.len()], v).unwrap();
    let inf = f32::INFINITY;
    for v in [
        vec![1.0, 3.0, 3.0, 2.0],
        vec![-inf, -inf, -inf],
        vec![0.5, f32::NAN, 7.0, f32::NAN],
        vec![inf, 1.0, inf],
    ] {
        check(&Op::ArgMax { axis: -1 }, &[row(&v)], 0.0);
    }
}

/// Rows of more than 256 keys are split over chunks of 256 and merged (sdpa_part.wgsl,
/// sdpa_merge.wgsl): chunks past the keys, chunks a sliding window hides entirely, a softcap,
/// grouped heads, several query rows, and value widths with and without four-value loads.
/// Head-major attention at scale 0.2.
fn sdpa_op(causal: bool, window: Option<usize>, softcap: Option<f32>) -> Op {
    Op::Sdpa {
        layout: SdpaLayout::HeadMajor,
        scale: 0.2,
        causal,
        sliding_window: window,
        softcap,
        alibi_max_bias: None,
    }
}

/// Decode rows (one query per head) on the kernel grouped by kv head (sdpa_dec.wgsl, where the
/// adapter has subgroups): groups of 1 to 8 query heads (7: chunks that are not a power of two
/// of the group's keys), heads of sizes that are not multiples of four, one key, keys over
/// many chunks (merged), windows, softcaps and batches.
#[test]
fn decode_attention_grouped_by_kv_head() {
    // (batch, hq, hkv, d, dv, lk, window, softcap)
    for (b, hq, hkv, d, dv, lk, window, softcap) in [
        (1, 8, 1, 64, 64, 1, None, None),
        (1, 32, 8, 64, 64, 700, None, None),
        (1, 6, 2, 12, 4, 37, Some(5), Some(20.0)),
        (1, 7, 1, 16, 20, 300, None, None),
        (2, 4, 2, 8, 8, 90, Some(40), None),
        (1, 2, 1, 64, 64, 5000, None, Some(5.0)),
        (1, 12, 1, 8, 8, 50, None, None),
    ] {
        let sdpa = sdpa_op(true, window, softcap);
        let inputs = [
            f32t(&[b, hq, 1, d], 61),
            f32t(&[b, hkv, lk, d], 62),
            f32t(&[b, hkv, lk, dv], 63),
        ];
        check(&sdpa, &inputs, 1e-4);
    }
}

/// Prompts (16 query rows or more) on the tiled kernel (sdpa_tile.wgsl): partial tiles of
/// queries and keys, earlier context before the prompt, causal and not, windows that start
/// inside a key tile, softcaps, grouped heads, batches, and the largest heads it takes.
#[test]
fn prompt_attention_in_tiles() {
    // (batch, hq, hkv, lq, lk, d, dv, causal, window, softcap)
    for (b, hq, hkv, lq, lk, d, dv, causal, window, softcap) in [
        (1, 4, 2, 16, 16, 8, 8, true, None, None),
        (1, 2, 1, 37, 37, 64, 64, true, None, None),
        (2, 4, 4, 40, 300, 16, 12, true, Some(50), Some(20.0)),
        (1, 2, 2, 20, 20, 128, 128, false, None, None),
        (1, 1, 1, 17, 1000, 32, 32, true, None, None),
        (1, 3, 1, 33, 70, 96, 64, false, Some(9), None),
    ] {
        let sdpa = sdpa_op(causal, window, softcap);
        let inputs = [
            f32t(&[b, hq, lq, d], 71),
            f32t(&[b, hkv, lk, d], 72),
            f32t(&[b, hkv, lk, dv], 73),
        ];
        check(&sdpa, &inputs, 1e-4);
    }
}

#[test]
fn attention_split_over_many_keys() {
    for (lq, lk, d, dv, window, softcap) in [
        (1, 1100, 64, 64, None, None),
        (3, 1100, 16, 12, Some(200), Some(20.0)),
        (2, 700, 8, 6, None, Some(5.0)),
        (1, 4097, 64, 64, Some(1000), None),
    ] {
        let sdpa = sdpa_op(true, window, softcap);
        let inputs = [
            f32t(&[4, lq, d], 41),
            f32t(&[2, lk, d], 42),
            f32t(&[2, lk, dv], 43),
        ];
        check(&sdpa, &inputs, 1e-4);
    }
}

//! Merged launches (src/launch.rs): adjacent independent ops recorded as one kernel launch give
//! the CPU reference's results for every weight format on odd sizes, and a LlamaStyle decode
//! step takes the expected number of launches, with logits equal to the unmerged step's.
//!
//! Tolerance as tests/kernels.rs (max|gpu - ref| / max|ref|): 1e-5 for matmuls and copies,
//! 1e-4 where the GPU's `exp`/`tanh` or rope's rotation differ from Rust's in the last bits.
#![allow(clippy::cloned_ref_to_slice_refs)]

mod common;

use common::{gpu, random, rel_err};
use cyb_backend::{Backend, Dispatcher, ExecContext};
use cyb_models::LlamaModel;
use cyb_ops::{GeluApprox, Op, RopeLayout, RopeScaling, SdpaLayout};
use cyb_tensor::{DType, Tensor};
use std::path::Path;
use std::sync::Arc;

use cyb_wgpu::WEIGHT_DTYPES;

/// Tests of this binary count launches of the one shared backend and toggle its merging, so
/// they take turns.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn f32t(dims: &[usize], seed: u64) -> Tensor {
    let n = dims.iter().product();
    Tensor::from_f32(dims, &random(n, seed)).unwrap()
}

/// One op of a sequence: the op and its inputs, each an index into the host tensors or, when
/// `Err(i)`, the GPU output `i` of an earlier op of the sequence.
type Step = (Op, Vec<std::result::Result<usize, usize>>);

/// Runs `steps` back to back on the GPU (so adjacent launches may merge) and on the reference;
/// checks every output of every step within `tol` and returns the launches they took.
fn run_sequence(host: &[Tensor], steps: &[Step], tol: f32) -> Option<u64> {
    run_sequence_consuming(host, steps, tol, &[])
}

/// As `run_sequence`; the outputs numbered in `consumed` (KV caches later appended to in place)
/// are not compared.
fn run_sequence_consuming(
    host: &[Tensor],
    steps: &[Step],
    tol: f32,
    consumed: &[usize],
) -> Option<u64> {
    let gpu = gpu()?;
    Some(run_sequence_on(&gpu, host, steps, tol, consumed))
}

/// `run_sequence_consuming` on a given backend.
fn run_sequence_on(
    gpu: &cyb_wgpu::WgpuBackend,
    host: &[Tensor],
    steps: &[Step],
    tol: f32,
    consumed: &[usize],
) -> u64 {
    let dev: Vec<Tensor> = host
        .iter()
        .map(|t| {
            gpu.upload(t.host_bytes().unwrap(), t.dims(), t.dtype())
                .unwrap()
        })
        .collect();
    let mut ctx = ExecContext::default();
    let before = gpu.launch_count();
    let (mut gpu_outs, mut ref_outs): (Vec<Tensor>, Vec<Tensor>) = (Vec::new(), Vec::new());
    for (op, ins) in steps {
        let pick = |on_gpu: bool| -> Vec<Tensor> {
            ins.iter()
                .map(|i| match (i, on_gpu) {
                    (Ok(h), true) => dev[*h].clone(),
                    (Ok(h), false) => host[*h].clone(),
                    (Err(o), true) => gpu_outs[*o].clone(),
                    (Err(o), false) => ref_outs[*o].clone(),
                })
                .collect()
        };
        let (g, r) = (pick(true), pick(false));
        let infos: Vec<_> = g.iter().map(Tensor::info).collect();
        assert!(gpu.supports(op, &infos), "wgpu should support {op:?}");
        gpu_outs.extend(gpu.execute(op, &g, &mut ctx).unwrap());
        ref_outs.extend(cyb_ops::reference::execute(op, &r).unwrap());
    }
    // Downloading submits what is held back.
    for (i, (g, w)) in gpu_outs.iter().zip(&ref_outs).enumerate() {
        if consumed.contains(&i) {
            continue;
        }
        assert_eq!(g.dims(), w.dims(), "output {i}");
        let e = rel_err(&gpu.download_f32(g).unwrap(), &w.to_f32_vec().unwrap());
        assert!(
            e <= tol,
            "output {i} of {steps:?}: relative error {e:e} > {tol:e}"
        );
    }
    gpu.launch_count() - before
}

fn k_for(dt: DType) -> usize {
    match dt.block_elems() {
        1 => 37,
        b => 3 * b,
    }
}

fn matmul() -> Op {
    Op::MatMul {
        rhs_transposed: true,
    }
}

#[test]
fn three_matvecs_of_one_activation_are_one_launch() {
    let _turn = serial();
    for dt in WEIGHT_DTYPES {
        let k = k_for(dt);
        // One row (decode) and three (the kernel's 4-row blocks, cut short).
        for m in [1, 3] {
            let w = |n: usize, seed: u64| {
                Tensor::from_f32_as(&[n, k], &random(n * k, seed), dt).unwrap()
            };
            let host = vec![f32t(&[m, k], 3), w(13, 5), w(7, 6), w(9, 7)];
            let steps: Vec<Step> = (1..4).map(|i| (matmul(), vec![Ok(0), Ok(i)])).collect();
            if let Some(n) = run_sequence(&host, &steps, 1e-5) {
                assert_eq!(n, 1, "{dt} m={m}: q, k, v matvecs took {n} launches");
            }
        }
    }
}

#[test]
fn gate_up_and_gated_unit_are_one_launch() {
    let _turn = serial();
    let glus = [
        Op::SwiGlu,
        Op::GeGlu {
            approx: GeluApprox::Tanh,
        },
        Op::GeGlu {
            approx: GeluApprox::Erf,
        },
    ];
    for dt in WEIGHT_DTYPES {
        // Decode rows long enough for the paired loop's main part (one load of activations
        // for the gate and the up row) with the lanes `mv_lanes` gives 11 rows (256 of 8
        // values for the quantized formats, whose blocks of units then take two steps), with
        // F16/F32 rows whole groups of four.
        let long = match dt.block_elems() {
            1 => 1004,
            b => 4096 / b * b,
        };
        for (m, glu, k) in [
            (1, &glus[0], k_for(dt)),
            (3, &glus[1], k_for(dt)),
            (1, &glus[2], k_for(dt)),
            (1, &glus[0], long),
        ] {
            let n = 11;
            let w = |seed: u64| Tensor::from_f32_as(&[n, k], &random(n * k, seed), dt).unwrap();
            let host = vec![f32t(&[m, k], 3), w(8), w(9)];
            let steps: Vec<Step> = vec![
                (matmul(), vec![Ok(0), Ok(1)]),
                (matmul(), vec![Ok(0), Ok(2)]),
                (glu.clone(), vec![Err(0), Err(1)]),
            ];
            if let Some(l) = run_sequence(&host, &steps, 1e-4) {
                assert_eq!(l, 1, "{dt} m={m} {glu:?}: took {l} launches");
            }
        }
    }
}

#[test]
fn residual_norm_goes_into_the_matvecs_around_it() {
    let _turn = serial();
    let Some(shared) = gpu() else { return };
    // Also on a device whose kernels reduce without subgroup operations.
    let plain = cyb_wgpu::WgpuBackend::new()
        .expect("a second device on the same adapter")
        .with_subgroups(false);
    let cases = [
        (&*shared, &WEIGHT_DTYPES[..]),
        (
            &plain,
            &[DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K][..],
        ),
    ];
    for (b, dt) in cases
        .iter()
        .flat_map(|(b, dts)| dts.iter().map(move |dt| (*b, *dt)))
    {
        // Row lengths of whole blocks and groups of four: one vec4 per thread and fewer.
        let long = match dt.block_elems() {
            1 => 4000,
            b => 4096 / b * b,
        };
        for (d, offset) in [(k_for(dt).next_multiple_of(4), 0.0), (long, 1.0)] {
            let k = 64;
            let add_norm = Op::AddRmsNorm {
                eps: 1e-5,
                weight_offset: offset,
            };
            let w = |n: usize, k: usize, seed: u64| {
                let k = if dt.block_elems() == 1 {
                    k
                } else {
                    k.next_multiple_of(dt.block_elems())
                };
                Tensor::from_f32_as(&[n, k], &random(n * k, seed), dt).unwrap()
            };
            let o = w(d, k, 4);
            let k_o = o.dims()[1];
            // o = W_o · a; s = o + r and its norm; then q, k and v of the norm.
            let host = vec![
                f32t(&[1, k_o], 1),
                o,
                f32t(&[1, d], 2),
                f32t(&[d], 3),
                w(13, d, 5),
                w(7, d, 6),
                w(9, d, 7),
            ];
            let mut steps: Vec<Step> = vec![
                (matmul(), vec![Ok(0), Ok(1)]),
                (add_norm.clone(), vec![Err(0), Ok(2), Ok(3)]),
            ];
            steps.extend((4..7).map(|i| (matmul(), vec![Err(2), Ok(i)])));
            let l = run_sequence_on(b, &host, &steps, 1e-4, &[]);
            assert_eq!(l, 2, "{dt} d={d}: o, add+norm, q, k, v took {l} launches");
            // The residual first, then gate, up and the gated unit.
            let host = vec![
                f32t(&[1, k_o], 1),
                w(d, k, 4),
                f32t(&[1, d], 2),
                f32t(&[d], 3),
                w(11, d, 8),
                w(11, d, 9),
            ];
            let steps: Vec<Step> = vec![
                (matmul(), vec![Ok(0), Ok(1)]),
                (add_norm, vec![Ok(2), Err(0), Ok(3)]),
                (matmul(), vec![Err(2), Ok(4)]),
                (matmul(), vec![Err(2), Ok(5)]),
                (Op::SwiGlu, vec![Err(3), Err(4)]),
            ];
            let l = run_sequence_on(b, &host, &steps, 1e-4, &[]);
            assert_eq!(
                l, 2,
                "{dt} d={d}: o, add+norm, gate, up, swiglu took {l} launches"
            );
        }
    }
    // Not merged: rows not a multiple of four; a matvec of the sum instead of the norm.
    let add_norm = Op::AddRmsNorm {
        eps: 1e-5,
        weight_offset: 0.0,
    };
    let m =
        |n: usize, k: usize, seed: u64| Tensor::from_f32(&[n, k], &random(n * k, seed)).unwrap();
    for (d, of_norm) in [(37, true), (64, false)] {
        let host = vec![
            f32t(&[1, 16], 1),
            m(d, 16, 2),
            f32t(&[1, d], 3),
            f32t(&[d], 4),
            m(5, d, 5),
        ];
        let x = if of_norm { Err(2) } else { Err(1) };
        let steps: Vec<Step> = vec![
            (matmul(), vec![Ok(0), Ok(1)]),
            (add_norm.clone(), vec![Err(0), Ok(2), Ok(3)]),
            (matmul(), vec![x, Ok(4)]),
        ];
        if let Some(l) = run_sequence(&host, &steps, 1e-4) {
            assert_eq!(l, 3, "d={d}, of the norm: {of_norm}");
        }
    }
}

#[test]
fn matvecs_that_cannot_merge_stay_separate() {
    let _turn = serial();
    // Different activations, then different weight dtypes: three launches each, still exact.
    let k = 64;
    let w = |dt: DType, seed: u64| Tensor::from_f32_as(&[5, k], &random(5 * k, seed), dt).unwrap();
    let host = vec![
        f32t(&[1, k], 1),
        f32t(&[1, k], 2),
        w(DType::Q8_0, 3),
        w(DType::Q4_0, 4),
    ];
    let steps: Vec<Step> = vec![
        (matmul(), vec![Ok(0), Ok(2)]),
        (matmul(), vec![Ok(1), Ok(2)]),
        (matmul(), vec![Ok(1), Ok(3)]),
    ];
    if let Some(l) = run_sequence(&host, &steps, 1e-5) {
        assert_eq!(l, 3);
    }
    // A matvec of the first one's output depends on it: two launches.
    let host = vec![f32t(&[1, k], 1), w(DType::F32, 3), f32t(&[5, 5], 4)];
    let steps: Vec<Step> = vec![
        (matmul(), vec![Ok(0), Ok(1)]),
        (matmul(), vec![Err(0), Ok(2)]),
    ];
    if let Some(l) = run_sequence(&host, &steps, 1e-5) {
        assert_eq!(l, 2);
    }
}

#[test]
fn rope_of_q_and_k_is_one_launch() {
    let _turn = serial();
    for (layout, rot) in [(RopeLayout::Normal, 10), (RopeLayout::Neox, 6)] {
        let rope = Op::Rope {
            layout,
            rot_dims: rot,
            base: 10000.0,
            scaling: RopeScaling::None,
        };
        let pos = Tensor::from_i64(&[3], &[5, 6, 7]).unwrap();
        let host = vec![f32t(&[3, 5, 10], 1), f32t(&[3, 3, 10], 2), pos];
        let steps: Vec<Step> = vec![
            (rope.clone(), vec![Ok(0), Ok(2)]),
            (rope, vec![Ok(1), Ok(2)]),
        ];
        if let Some(l) = run_sequence(&host, &steps, 1e-4) {
            assert_eq!(l, 1, "{layout:?}");
        }
    }
}

#[test]
fn two_copies_are_one_launch_and_dependent_ones_two() {
    let _turn = serial();
    let t = Op::Transpose { a: 0, b: 1 };
    let host = vec![f32t(&[3, 5, 7], 1), f32t(&[4, 2, 3], 2)];
    let steps: Vec<Step> = vec![(t.clone(), vec![Ok(0)]), (t.clone(), vec![Ok(1)])];
    if let Some(l) = run_sequence(&host, &steps, 0.0) {
        assert_eq!(l, 1);
    }
    // The second reads the first's output: it must see it complete.
    let steps: Vec<Step> = vec![(t.clone(), vec![Ok(0)]), (t, vec![Err(0)])];
    if let Some(l) = run_sequence(&host, &steps, 0.0) {
        assert_eq!(l, 2);
    }
    // A permute that only moves a size-1 axis is a view: no launch.
    let p = Op::Permute {
        perm: vec![1, 0, 2],
    };
    let host = vec![f32t(&[1, 6, 5], 3)];
    if let Some(l) = run_sequence(&host, &[(p, vec![Ok(0)])], 0.0) {
        assert_eq!(l, 0);
    }
}

/// Launches of one decode step of a LlamaStyle fixture, unmerged then merged, with their
/// logits equal; checks that decode steps make no new buffers. Returns (unmerged, merged,
/// layers).
fn decode_step_launches(variant: &str) -> Option<(u64, u64, u64)> {
    let gpu = gpu()?;
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/llama_family")
        .join(variant)
        .join("model-q8_0.gguf");
    let f = cyb_format::open(&path).unwrap();
    let chain: Vec<Arc<dyn Backend>> = vec![gpu.clone()];
    let model = LlamaModel::load(&f, Arc::new(Dispatcher::new(chain))).unwrap();
    let layers = model.config().num_layers as u64;
    let mut per_step = Vec::new();
    for merge in [false, true] {
        gpu.set_launch_merging(merge);
        let mut cache = model.new_cache(16).unwrap();
        model.forward(&[1, 2, 3, 4], &mut cache).unwrap();
        let before = gpu.launch_count();
        let logits = model.forward(&[5], &mut cache).unwrap();
        per_step.push((gpu.launch_count() - before, logits));
        // Later steps make no buffers: the cache's prefix is not copied into a buffer of a
        // new size each step, and attention's scratch grows by powers of two.
        let made = gpu.frame_stats().created;
        for t in [6, 7, 8] {
            model.forward(&[t], &mut cache).unwrap();
        }
        assert_eq!(
            gpu.frame_stats().created,
            made,
            "{variant}: buffers made by decode steps"
        );
    }
    gpu.set_launch_merging(true);
    let (unmerged, merged) = (per_step[0].0, per_step[1].0);
    eprintln!("{variant} fixture, {layers} layers: {unmerged} launches per decode step unmerged, {merged} merged");
    let err = rel_err(&per_step[1].1, &per_step[0].1);
    assert!(err <= 1e-6, "{variant}: merged vs unmerged logits: {err}");
    Some((unmerged, merged, layers))
}

/// The llama3 fixture has the Llama 3.2 1B / SmolLM2 layout (split q/k/v and gate/up, no
/// biases).
#[test]
fn llama_decode_step_launches() {
    let _turn = serial();
    let Some((unmerged, merged, layers)) = decode_step_launches("llama3") else {
        return;
    };
    // Per layer, unmerged: q, k, v, rope q, rope k, append k, append v, sdpa, o, add+norm,
    // gate, up, swiglu, down, add+norm (the permutes around sdpa are views, and sdpa reads the
    // cache's prefix in place); merged: qkv, rope q+k with both appends, sdpa, o, add+norm,
    // gate/up/swiglu, down, add+norm. Plus embedding, first norm, final norm, output
    // projection. Merged further, each add+norm but the last (2 · layers - 1 of them) runs
    // inside the o or down matvec before it (which adds the residual) and the matvecs after it,
    // and each layer's rope + appends run inside its attention.
    // Where the adapter has subgroups, a decode row's attention runs on the grouped kernel
    // (sdpa_dec.wgsl), which the rope and appends do not join.
    let joined = if gpu().is_some_and(|g| g.subgroup_size() > 0) {
        0
    } else {
        layers
    };
    assert_eq!(unmerged, 15 * layers + 4);
    assert_eq!(merged, 8 * layers + 4 - (2 * layers - 1) - joined);
}

/// The other fixtures' layouts (biases, q/k norms, fused projections, extra norms) merge with
/// the same results.
#[test]
fn other_layouts_merge_with_equal_logits() {
    let _turn = serial();
    for variant in ["qwen2", "qwen3", "gemma2", "phi3", "mistral"] {
        if let Some((unmerged, merged, _)) = decode_step_launches(variant) {
            assert!(merged < unmerged, "{variant}");
        }
    }
}

#[test]
fn attention_reads_the_cache_prefix_in_place() {
    let _turn = serial();
    let (hq, hkv, d, cap) = (4, 2, 5, 9);
    let sdpa = Op::Sdpa {
        layout: SdpaLayout::HeadMajor,
        scale: 0.4,
        causal: true,
        sliding_window: None,
        softcap: None,
        alibi_max_bias: None,
    };
    let prefix = Op::Slice {
        axis: 1,
        start: 0,
        end: 4,
        step: 1,
    };
    let host = vec![
        f32t(&[hkv, cap, d], 1),
        f32t(&[1, hkv, d], 2),
        f32t(&[hkv, cap, d], 3),
        f32t(&[1, hkv, d], 4),
        f32t(&[hq, 1, d], 5),
        f32t(&[1, hkv, d], 6),
    ];
    let steps: Vec<Step> = vec![
        (Op::KvAppend { start: 3 }, vec![Ok(0), Ok(1)]),
        (Op::KvAppend { start: 3 }, vec![Ok(2), Ok(3)]),
        (prefix.clone(), vec![Err(0)]),
        (prefix, vec![Err(1)]),
        (sdpa, vec![Ok(4), Err(2), Err(3)]),
        // Overwrites row 1 of the cache, inside the key slice: the slice keeps its values.
        (Op::KvAppend { start: 1 }, vec![Err(0), Ok(5)]),
    ];
    // Launches: both appends, attention, then the key slice's copy before the overwrite and
    // the overwrite, then the value slice's copy when it is read back.
    if let Some(l) = run_sequence_consuming(&host, &steps, 1e-4, &[0]) {
        assert_eq!(l, 5);
    }
}

#[test]
fn rope_and_kv_appends_are_one_launch() {
    let _turn = serial();
    let (hq, hkv, d, cap, n) = (4, 2, 6, 7, 2);
    let rope = Op::Rope {
        layout: RopeLayout::Neox,
        rot_dims: 4,
        base: 500.0,
        scaling: RopeScaling::None,
    };
    let host = vec![
        f32t(&[n, hq, d], 1),
        f32t(&[n, hkv, d], 2),
        f32t(&[n, hkv, d], 3),
        Tensor::from_i64(&[n], &[3, 4]).unwrap(),
        f32t(&[hkv, cap, d], 4),
        f32t(&[hkv, cap, d], 5),
    ];
    let append = Op::KvAppend { start: 3 };
    let mut steps: Vec<Step> = vec![
        (rope.clone(), vec![Ok(0), Ok(3)]),
        (rope, vec![Ok(1), Ok(3)]),
        (append.clone(), vec![Ok(4), Err(1)]),
        (append, vec![Ok(5), Ok(2)]),
    ];
    if let Some(l) = run_sequence(&host, &steps, 1e-4) {
        assert_eq!(l, 1);
    }
    // Without the value append; then a copy of the rotated keys that is no append (it reads
    // them transposed) stays a launch of its own.
    steps.pop();
    steps.push((Op::Transpose { a: 0, b: 1 }, vec![Err(1)]));
    if let Some(l) = run_sequence(&host, &steps, 1e-4) {
        assert_eq!(l, 2);
    }
}

/// One token's rope of q and k, both KV appends, the cache prefixes and attention over them:
/// one launch (sdpa_rope.wgsl) where d and dv are multiples of four, every output (rotated q
/// and k, both caches, attention) equal to the reference's. On an adapter with subgroups a
/// decode row's attention takes the grouped kernel instead, so this runs without them.
#[test]
fn rope_appends_and_attention_are_one_launch() {
    let _turn = serial();
    if gpu().is_none() {
        return;
    }
    let gpu = cyb_wgpu::WgpuBackend::new()
        .expect("a second device on the same adapter")
        .with_subgroups(false);
    // (hq, hkv, d, dv, rot_dims, layout, window, softcap, keys past the appended row,
    // launches). Two launches beyond the step's own: the prefix slices' copies, made when they
    // are read back to be compared.
    let cases = [
        (4, 2, 8, 8, 8, RopeLayout::Normal, None, None, 0, 1 + 2),
        (
            6,
            2,
            12,
            4,
            8,
            RopeLayout::Neox,
            Some(3),
            Some(20.0),
            0,
            1 + 2,
        ),
        (3, 3, 4, 16, 4, RopeLayout::Neox, None, None, 0, 1 + 2),
        (2, 1, 260, 8, 260, RopeLayout::Normal, None, None, 0, 1 + 2),
        // d not a multiple of four: the rope and appends, then attention.
        (4, 2, 6, 8, 6, RopeLayout::Normal, None, None, 0, 2 + 2),
        // Attention over keys past the appended row: it is not the last key, so no merge.
        (4, 2, 8, 8, 8, RopeLayout::Normal, None, None, 2, 2 + 2),
    ];
    for (hq, hkv, d, dv, rot_dims, layout, window, softcap, past, launches) in cases {
        let (cap, start) = (9, 5usize);
        let rope = Op::Rope {
            layout,
            rot_dims,
            base: 1000.0,
            scaling: RopeScaling::None,
        };
        let prefix = Op::Slice {
            axis: 1,
            start: 0,
            end: (start + past) as isize + 1,
            step: 1,
        };
        let sdpa = Op::Sdpa {
            layout: SdpaLayout::HeadMajor,
            scale: 0.3,
            causal: true,
            sliding_window: window,
            softcap,
            alibi_max_bias: None,
        };
        let host = vec![
            f32t(&[1, hq, d], 1),
            f32t(&[1, hkv, d], 2),
            f32t(&[1, hkv, dv], 3),
            Tensor::from_i64(&[1], &[start as i64]).unwrap(),
            f32t(&[hkv, cap, d], 4),
            f32t(&[hkv, cap, dv], 5),
        ];
        let append = Op::KvAppend { start };
        let steps: Vec<Step> = vec![
            (rope.clone(), vec![Ok(0), Ok(3)]),
            (rope, vec![Ok(1), Ok(3)]),
            (append.clone(), vec![Ok(4), Err(1)]),
            (append, vec![Ok(5), Ok(2)]),
            (prefix.clone(), vec![Err(2)]),
            (prefix, vec![Err(3)]),
            (Op::Transpose { a: 0, b: 1 }, vec![Err(0)]),
            (sdpa, vec![Err(6), Err(4), Err(5)]),
        ];
        let l = run_sequence_on(&gpu, &host, &steps, 1e-4, &[]);
        let case = format!("hq {hq} hkv {hkv} d {d} dv {dv} {layout:?}");
        assert_eq!(l, launches, "{case}");
    }
}

#[test]
fn two_norms_or_two_binary_ops_are_one_launch() {
    let _turn = serial();
    // Qwen3's q and k norms: rows of one width, two weights.
    let norm = Op::RmsNorm {
        eps: 1e-6,
        weight_offset: 0.0,
    };
    let host = vec![
        f32t(&[3, 5, 67], 1),
        f32t(&[3, 2, 67], 2),
        f32t(&[67], 3),
        f32t(&[67], 4),
    ];
    let steps: Vec<Step> = vec![
        (norm.clone(), vec![Ok(0), Ok(2)]),
        (norm.clone(), vec![Ok(1), Ok(3)]),
    ];
    if let Some(l) = run_sequence(&host, &steps, 1e-5) {
        assert_eq!(l, 1);
    }
    // Another eps: two launches.
    let other = Op::RmsNorm {
        eps: 1e-5,
        weight_offset: 0.0,
    };
    let steps: Vec<Step> = vec![(norm, vec![Ok(0), Ok(2)]), (other, vec![Ok(1), Ok(3)])];
    if let Some(l) = run_sequence(&host, &steps, 1e-5) {
        assert_eq!(l, 2);
    }
    // Bias adds (a row broadcast over the tokens), and the other binary ops.
    let host = vec![
        f32t(&[3, 70], 5),
        f32t(&[70], 6),
        f32t(&[3, 13], 7),
        f32t(&[13], 8),
    ];
    for op in [Op::Add, Op::Sub, Op::Mul, Op::Div] {
        let steps: Vec<Step> = vec![
            (op.clone(), vec![Ok(0), Ok(1)]),
            (op.clone(), vec![Ok(2), Ok(3)]),
        ];
        if let Some(l) = run_sequence(&host, &steps, 1e-5) {
            assert_eq!(l, 1, "{op:?}");
        }
    }
    // Different ops: two launches.
    let steps: Vec<Step> = vec![(Op::Add, vec![Ok(0), Ok(1)]), (Op::Mul, vec![Ok(2), Ok(3)])];
    if let Some(l) = run_sequence(&host, &steps, 1e-5) {
        assert_eq!(l, 2);
    }
}

/// Within a step, a buffer whose tensor is gone is handed out again to a later op: a chain of
/// 24 ops, each consuming the last one's output, takes a few buffers, not 24, and gives the
/// reference's result; the device memory held comes back down when the step's tensors go.
#[test]
fn a_step_reuses_the_buffers_of_dropped_tensors() {
    let _turn = serial();
    let Some(gpu) = gpu() else {
        return;
    };
    let dims = [64, 1024];
    let (x, y) = (f32t(&dims, 5), f32t(&dims, 6));
    let up = |t: &Tensor| {
        gpu.upload(t.host_bytes().unwrap(), t.dims(), t.dtype())
            .unwrap()
    };
    let mut ctx = ExecContext::default();
    gpu.begin_step(&mut ctx).unwrap();
    let (dx, dy) = (up(&x), up(&y));
    let made = gpu.frame_stats().created;
    let (mut g, mut r) = (dx, x);
    for _ in 0..24 {
        g = gpu
            .execute(&Op::SwiGlu, &[g, dy.clone()], &mut ctx)
            .unwrap()
            .remove(0);
        r = cyb_ops::reference::execute(&Op::SwiGlu, &[r, y.clone()])
            .unwrap()
            .remove(0);
    }
    // (Parameter blocks and the launch held back for merging take a few too.)
    let new = gpu.frame_stats().created - made;
    let got = gpu.download_f32(&g).unwrap();
    gpu.end_step(&mut ctx).unwrap();
    assert!(new <= 8, "24 chained outputs took {new} new buffers");
    let e = rel_err(&got, &r.to_f32_vec().unwrap());
    assert!(e <= 1e-5, "relative error {e:e}");
    let mem = gpu.device_memory().unwrap();
    assert!(mem.peak >= mem.current && mem.current > 0, "{mem:?}");
}

//! Every matmul kernel against the reference on odd sizes, for every weight dtype, kernel set
//! of this CPU and activation precision (8-bit and 16-bit levels), with 1 and 3 threads
//! bit-identical. Each weight is tried in owned memory and in shared (file-mapping-like)
//! memory, which is what the repacked kernels take.

mod common;
use common::{check_act, shared, Rng};
use cyb_cpu::ActPrecision;
use cyb_ops::Op;
use cyb_tensor::{DType, Tensor};

const OP: Op = Op::MatMul {
    rhs_transposed: true,
};

fn tolerance(dtype: DType, act: ActPrecision) -> f32 {
    match (dtype, act) {
        (DType::F32, _) => 1e-5,
        (DType::F16 | DType::BF16, _) => 1e-3,
        // 16-bit levels: a rounding error of at most amax/65534 per activation.
        (_, ActPrecision::Q16) => 1e-4,
        _ => 1e-2,
    }
}

/// Activations that 8-bit block quantization represents exactly (every 32 values share the
/// 256-block's scale and hold a ±127 level), so a quantized kernel must match the reference
/// up to float summation order: a far stricter check than the spec tolerance.
fn exact_activations(rng: &mut Rng, m: usize, k: usize) -> Vec<f32> {
    let mut a = Vec::with_capacity(m * k);
    for _ in 0..m {
        let mut d = 0.01 + rng.uniform().abs();
        for i in 0..k {
            if i % 256 == 0 {
                d = 0.01 + rng.uniform().abs();
            }
            let q = if i % 32 == (i / 32) % 32 {
                127.0
            } else {
                (rng.uniform() * 127.0).round()
            };
            a.push(q * d / 127.0 * 127.0);
        }
    }
    a
}

/// The 16-bit activations' largest level (`quant_act::Q16_MAX`).
const Q16_MAX: f32 = 32639.0;

/// Activations that 16-bit block quantization represents exactly: integer levels with one
/// ±Q16_MAX per 32 values and a shared scale per 256, so only float summation order remains.
fn exact16_activations(rng: &mut Rng, m: usize, k: usize) -> Vec<f32> {
    let mut a = Vec::with_capacity(m * k);
    for _ in 0..m {
        let mut d = 0.01 + rng.uniform().abs();
        for i in 0..k {
            if i % 256 == 0 {
                d = (0.01 + rng.uniform().abs()) / Q16_MAX;
            }
            let q = if i % 32 == (i / 32) % 32 {
                -Q16_MAX
            } else {
                (rng.uniform() * Q16_MAX).round()
            };
            a.push(q * d);
        }
    }
    a
}

/// With activations the kernel's quantization represents exactly, only the order and rounding
/// of float sums may differ from the reference: every output within 2e-5 of `Σ |a_i · w_i|`
/// (the scale such differences have; an output that nearly cancels would make a relative error
/// of the output itself meaningless), and 1 and 3 threads bit-identical.
fn check_summation_order(inputs: &[Tensor], what: &str, act: ActPrecision) {
    let want = common::reference(&OP, inputs);
    let abs = |t: &Tensor| {
        let v: Vec<f32> = t.to_f32_vec().unwrap().iter().map(|x| x.abs()).collect();
        Tensor::from_f32(t.dims(), &v).unwrap()
    };
    let magnitude = common::reference(&OP, &[abs(&inputs[0]), abs(&inputs[1])]);
    for (set, one, three) in common::backends(act) {
        if !common::runs(set, &one, &OP, inputs) {
            continue;
        }
        let got = common::run(&one, &OP, inputs);
        let got3 = common::run(&three, &OP, inputs);
        for (i, ((g, w), m)) in got.iter().zip(&want).zip(&magnitude).enumerate() {
            assert!(
                (g - w).abs() <= 2e-5 * m.max(f32::MIN_POSITIVE),
                "{what} on {} ({}): output {i} is {g}, reference {w}, Σ|terms| {m}",
                set.name(),
                act.name()
            );
        }
        assert!(
            got.iter()
                .zip(&got3)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "{what} on {}: 1 and 3 threads differ",
            set.name()
        );
    }
}

fn check_dtype(dtype: DType, ks: &[usize]) {
    for act in [ActPrecision::Q8, ActPrecision::Q16] {
        // Seeded by the dtype's name, not its enum position, so adding dtypes to the enum does
        // not change these cases.
        let seed = dtype.name().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let mut rng = Rng::new(seed);
        let check = |inputs: &[Tensor], tol: f32, what: &str| {
            check_act(&OP, inputs, tol, what, act);
            let w = shared(&inputs[1]);
            check_act(
                &OP,
                &[inputs[0].clone(), w],
                tol,
                &format!("{what} shared"),
                act,
            );
        };
        let check_exact = |inputs: &[Tensor], what: &str| {
            check_summation_order(inputs, what, act);
            let w = shared(&inputs[1]);
            check_summation_order(&[inputs[0].clone(), w], &format!("{what} shared"), act);
        };
        for &k in ks {
            for m in [1usize, 3, 7, 17] {
                for n in [1usize, 5, 67, 131] {
                    let what = format!("{dtype} m={m} n={n} k={k}");
                    let w = Tensor::from_f32_as(&[n, k], &rng.vec(n * k), dtype).unwrap();
                    if dtype.is_quantized() {
                        let exact = match act {
                            ActPrecision::Q8 => exact_activations(&mut rng, m, k),
                            ActPrecision::Q16 => exact16_activations(&mut rng, m, k),
                        };
                        let a = Tensor::from_f32(&[m, k], &exact).unwrap();
                        check_exact(&[a, w.clone()], &format!("{what} exact activations"));
                        // Too few terms (8-bit) or outputs for a meaningful relative error below.
                        if n < 67 || (act == ActPrecision::Q8 && k < 256) {
                            continue;
                        }
                    }
                    let a = Tensor::from_f32(&[m, k], &rng.vec(m * k)).unwrap();
                    check(&[a, w], tolerance(dtype, act), &what);
                }
            }
        }
        if !dtype.is_quantized() {
            break; // activation precision only concerns the quantized formats
        }
    }
}

#[test]
fn legacy_block_formats() {
    for dtype in [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
    ] {
        // 1440: several spans of the repacked layout (matmul/gemm/repack.rs), the last one shorter.
        check_dtype(dtype, &[32, 96, 576, 1440]);
    }
}

#[test]
fn k_quant_formats() {
    for dtype in [
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ] {
        // 2816: several spans of the repacked layout (matmul/gemm/repack.rs), the last one shorter.
        check_dtype(dtype, &[256, 768, 2816]);
    }
}

#[test]
fn ternary_formats() {
    for dtype in [DType::TQ1_0, DType::TQ2_0] {
        check_dtype(dtype, &[256, 768, 3328]);
    }
}

#[test]
fn float_formats() {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        // 4100: one-row matmuls through the packed panels on AMD CPUs (matmul/mod.rs).
        check_dtype(dtype, &[1, 7, 37, 200, 1100, 4100]);
    }
}

#[test]
fn batched_activations_share_the_weight() {
    let mut rng = Rng::new(3);
    let a = Tensor::from_f32(&[2, 3, 64], &rng.vec(2 * 3 * 64)).unwrap();
    let w = Tensor::from_f32_as(&[5, 64], &rng.vec(5 * 64), DType::Q4_1).unwrap();
    check_act(
        &OP,
        &[a.clone(), w.clone()],
        1e-2,
        "batched",
        ActPrecision::Q8,
    );
    check_act(&OP, &[a, w], 1e-4, "batched", ActPrecision::Q16);
}

/// Float weights in shared storage take the packed-panel GEMM once there are two or more rows;
/// enough rows here to cross its row blocks (and its 12-row tiles, and 32-output panels with a
/// partial last one); rows of 2100 values take its blocked form (`sgemm::BLOCKED_MIN_K`),
/// several blocks of `k` with a shorter last one.
#[test]
fn float_formats_many_rows() {
    let mut rng = Rng::new(11);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (m, n, k) in [
            (181usize, 67usize, 1100usize),
            (2, 33, 3),
            (25, 96, 64),
            (29, 45, 2100),
        ] {
            let w = Tensor::from_f32_as(&[n, k], &rng.vec(n * k), dtype).unwrap();
            let a = Tensor::from_f32(&[m, k], &rng.vec(m * k)).unwrap();
            let what = format!("{dtype} m={m} n={n} k={k} shared");
            check_act(
                &OP,
                &[a, shared(&w)],
                tolerance(dtype, ActPrecision::Q8),
                &what,
                ActPrecision::Q8,
            );
        }
    }
}

/// A one-row matmul over enough weight groups for the repacked GEMM's guided parts
/// (`pool::guided_parts`: 3 threads, small parts of at least 64 KiB), and a many-row one whose
/// rows are 4 KiB apart in the activation planes: exact activations, 1 and 3 threads
/// bit-identical.
#[test]
fn quantized_many_groups() {
    let mut rng = Rng::new(17);
    for dtype in [DType::Q4_0, DType::Q4_K] {
        for act in [ActPrecision::Q8, ActPrecision::Q16] {
            for (m, n, k) in [(1usize, 1601usize, 4096usize), (13, 67, 4096)] {
                let w = Tensor::from_f32_as(&[n, k], &rng.vec(n * k), dtype).unwrap();
                let exact = match act {
                    ActPrecision::Q8 => exact_activations(&mut rng, m, k),
                    ActPrecision::Q16 => exact16_activations(&mut rng, m, k),
                };
                let a = Tensor::from_f32(&[m, k], &exact).unwrap();
                let what = format!("{dtype} m={m} n={n} k={k} shared");
                check_summation_order(&[a, shared(&w)], &what, act);
            }
        }
    }
}

/// A float weight in owned host memory (a graph's constant) is packed once and the copy kept
/// while the weight lives: a second product adds nothing to the cache and gives the same bits,
/// and the copy goes with the weight.
#[test]
fn owned_weights_are_packed_once() {
    use cyb_backend::Backend;
    use cyb_cpu::{CpuBackend, CpuOptions, KernelSet};
    let cpu = CpuBackend::from_options(&CpuOptions::default()).unwrap();
    if !matches!(KernelSet::detect(), Ok(KernelSet::Avx512 | KernelSet::Avx2)) {
        eprintln!("skipped: the packed float GEMM is x86's (AVX2, AVX-512)");
        return;
    }
    let mut rng = Rng::new(7);
    let (m, n, k) = (3, 40, 96);
    let a = Tensor::from_f32(&[m, k], &rng.vec(m * k)).unwrap();
    let w = Tensor::from_f32(&[n, k], &rng.vec(n * k)).unwrap();
    let run = |w: &Tensor| common::run(&cpu, &OP, &[a.clone(), w.clone()]);
    let first = run(&w);
    let held = cpu.cached_weight_bytes();
    assert!(
        held >= n * k * 4,
        "the weight's panels are cached ({held} bytes)"
    );
    assert_eq!(run(&w), first, "the cached panels give the same bits");
    assert_eq!(cpu.cached_weight_bytes(), held, "packed once");
    let want = common::reference(&OP, &[a.clone(), w.clone()]);
    assert!(common::rel_err(&first, &want) < 1e-5);
    drop(w);
    cpu.release_unowned();
    assert_eq!(
        cpu.cached_weight_bytes(),
        0,
        "the copy goes with the weight"
    );
}

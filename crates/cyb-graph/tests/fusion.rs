//! The fusion pass: which chains it fuses, that it asks the backend first, that it leaves
//! chains whose intermediates are read elsewhere alone, and that a fused graph computes what
//! the unfused one computes (bit for bit on the reference, which defines the fused ops as the
//! sequence; within 1e-5 on the fast CPU backend, whose kernels are checked against it).

use cyb_backend::{Backend, Dispatcher, ExecContext, ReferenceBackend};
use cyb_graph::{fuse_for_backend, infer_types, Dim, Executor, Graph, NodeOp, ValueId, ValueType};
use cyb_ops::{GeluApprox, Op};
use cyb_tensor::{DType, Result, Tensor, TensorInfo};
use std::collections::HashMap;
use std::sync::Arc;

fn input(g: &mut Graph, name: &str, dims: &[Dim]) -> ValueId {
    let id = g.add_value(
        name,
        Some(ValueType {
            dtype: DType::F32,
            dims: Some(dims.to_vec()),
        }),
    );
    g.inputs.push(id);
    id
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn constant(g: &mut Graph, name: &str, dims: &[usize], seed: u32) -> ValueId {
    let n = dims.iter().product();
    g.add_constant(name, Tensor::from_f32(dims, &values(n, seed)).unwrap())
}

fn op(g: &mut Graph, name: &str, op: Op, ins: &[ValueId]) -> ValueId {
    g.add_node(
        name,
        NodeOp::Op(op),
        ins.iter().map(|&i| Some(i)).collect(),
        &[name],
    )[0]
}

/// A small transformer-like block over x `[n, 8]`:
/// `h = gelu(x·w1ᵀ + b1)`, `r = x + h·w2ᵀ`, `y = rms_norm(r)`, `z = relu(y·w3ᵀ + b3)`,
/// `o = layer_norm(r + z)`; outputs `o` and `r2 = r + z` (read again, so it must survive).
/// With `leak`, the first matmul's output is also a graph output (no fusion there).
fn block(leak: bool) -> Graph {
    let mut g = Graph::default();
    let x = input(&mut g, "x", &[Dim::Sym("n".into()), Dim::Fixed(8)]);
    let w1 = constant(&mut g, "w1", &[16, 8], 1);
    let b1 = constant(&mut g, "b1", &[16], 2);
    let w2 = constant(&mut g, "w2", &[8, 16], 3);
    let w3 = constant(&mut g, "w3", &[8, 8], 4);
    let b3 = constant(&mut g, "b3", &[8], 5);
    let nw = constant(&mut g, "norm_w", &[8], 6);
    let lw = constant(&mut g, "ln_w", &[8], 7);
    let lb = constant(&mut g, "ln_b", &[8], 8);
    let t = Op::MatMul {
        rhs_transposed: true,
    };
    let m1 = op(&mut g, "m1", t.clone(), &[x, w1]);
    let a1 = op(&mut g, "a1", Op::Add, &[m1, b1]);
    let h = op(
        &mut g,
        "h",
        Op::Gelu {
            approx: GeluApprox::Tanh,
        },
        &[a1],
    );
    let m2 = op(&mut g, "m2", t.clone(), &[h, w2]);
    let r = op(&mut g, "r", Op::Add, &[x, m2]);
    let y = op(
        &mut g,
        "y",
        Op::RmsNorm {
            eps: 1e-6,
            weight_offset: 0.0,
        },
        &[r, nw],
    );
    let m3 = op(&mut g, "m3", t, &[y, w3]);
    let a3 = op(&mut g, "a3", Op::Add, &[b3, m3]);
    let z = op(&mut g, "z", Op::Relu, &[a3]);
    let r2 = op(&mut g, "r2", Op::Add, &[r, z]);
    let o = op(&mut g, "o", Op::LayerNorm { eps: 1e-5 }, &[r2, lw, lb]);
    g.outputs = vec![o, r2];
    if leak {
        g.outputs.push(m1);
    }
    infer_types(&mut g).unwrap();
    g
}

fn run(g: &Graph, d: &Dispatcher, x: &Tensor) -> Vec<Vec<f32>> {
    let inputs = HashMap::from([("x".to_string(), x.clone())]);
    let (outs, _) = Executor::new(g, d).unwrap().run(&inputs).unwrap();
    outs.iter().map(|(_, t)| t.to_f32_vec().unwrap()).collect()
}

fn count(g: &Graph, name: &str) -> usize {
    g.nodes.iter().filter(|n| n.op.name() == name).count()
}

#[test]
fn chains_are_fused_and_compute_what_they_replace() {
    let plain = block(false);
    let mut fused = plain.clone();
    let made = fuse_for_backend(&mut fused, &ReferenceBackend);
    assert_eq!(
        made,
        4,
        "{:?}",
        fused.nodes.iter().map(|n| n.op.name()).collect::<Vec<_>>()
    );
    assert_eq!(count(&fused, "linear"), 2);
    assert_eq!(count(&fused, "add_rms_norm"), 1);
    assert_eq!(count(&fused, "add_layer_norm"), 1);
    // m2 has no bias: it stays a matmul; 11 nodes became 5.
    assert_eq!(count(&fused, "matmul"), 1);
    assert_eq!(fused.nodes.len(), 5);
    fused.validate().unwrap();
    let x = Tensor::from_f32(&[5, 8], &values(40, 9)).unwrap();
    let reference = Dispatcher::reference();
    assert_eq!(run(&fused, &reference, &x), run(&plain, &reference, &x));
}

#[test]
fn intermediates_read_elsewhere_are_not_fused_away() {
    let mut g = block(true);
    fuse_for_backend(&mut g, &ReferenceBackend);
    // m1 is a graph output, so m1 → a1 → h stays as it is.
    assert_eq!(count(&g, "gelu"), 1);
    assert_eq!(count(&g, "linear"), 1);
    let x = Tensor::from_f32(&[3, 8], &values(24, 4)).unwrap();
    let d = Dispatcher::reference();
    assert_eq!(run(&g, &d, &x), run(&block(true), &d, &x));
}

/// The reference, except that it declines every fused op.
struct NoFusedOps;

impl Backend for NoFusedOps {
    fn name(&self) -> &str {
        "no-fused-ops"
    }
    fn supports(&self, op: &Op, inputs: &[TensorInfo]) -> bool {
        !matches!(
            op,
            Op::Linear { .. } | Op::AddRmsNorm { .. } | Op::AddLayerNorm { .. }
        ) && ReferenceBackend.supports(op, inputs)
    }
    fn host_memory(&self) -> bool {
        true
    }
    fn execute(&self, op: &Op, inputs: &[Tensor], ctx: &mut ExecContext) -> Result<Vec<Tensor>> {
        ReferenceBackend.execute(op, inputs, ctx)
    }
    fn alloc(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        ReferenceBackend.alloc(shape, dtype)
    }
    fn upload(&self, data: &[u8], shape: &[usize], dtype: DType) -> Result<Tensor> {
        ReferenceBackend.upload(data, shape, dtype)
    }
    fn download_f32(&self, t: &Tensor) -> Result<Vec<f32>> {
        ReferenceBackend.download_f32(t)
    }
    fn download(&self, t: &Tensor) -> Result<Tensor> {
        ReferenceBackend.download(t)
    }
}

#[test]
fn only_what_the_backend_supports_is_fused() {
    let mut g = block(false);
    assert_eq!(fuse_for_backend(&mut g, &NoFusedOps), 0);
    assert_eq!(g.nodes.len(), 11);
}

#[test]
fn the_fast_cpu_backend_runs_the_fused_graph() {
    cyb_cpu::register();
    let cpu = cyb_backend::create_backend("cpu").unwrap();
    let plain = block(false);
    let mut fused = plain.clone();
    // The cpu backend has Linear, AddRmsNorm and AddLayerNorm kernels: all four fuse.
    assert_eq!(fuse_for_backend(&mut fused, cpu.as_ref()), 4);
    let x = Tensor::from_f32(&[7, 8], &values(56, 3)).unwrap();
    let on_cpu = Dispatcher::new(vec![cpu as Arc<dyn Backend>]);
    let want = run(&plain, &Dispatcher::reference(), &x);
    let got = run(&fused, &on_cpu, &x);
    for (g, w) in got.iter().zip(&want) {
        let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(err <= 1e-5 * scale.max(1.0), "{err}");
    }
    let log = on_cpu.log();
    for op in ["linear", "add_rms_norm", "add_layer_norm"] {
        assert!(
            log.executed
                .contains_key(&(op.to_string(), "cpu".to_string())),
            "{op} did not run on cpu\n{}",
            log.summary()
        );
    }
}

/// `x · clip(x + 3, 0, 6) / 6` over x `[2, 3, n]`, the operands in either order.
fn hard_swish(swap: bool) -> Graph {
    let mut g = Graph::default();
    let x = input(
        &mut g,
        "x",
        &[Dim::Fixed(2), Dim::Fixed(3), Dim::Sym("n".into())],
    );
    let scalar = |g: &mut Graph, name: &str, v: f32| {
        g.add_constant(name, Tensor::from_f32(&[], &[v]).unwrap())
    };
    let (three, zero, six) = (
        scalar(&mut g, "three", 3.0),
        scalar(&mut g, "zero", 0.0),
        scalar(&mut g, "six", 6.0),
    );
    let bin = |f| Op::Binary { f };
    use cyb_ops::BinaryFn as B;
    let ins = if swap { [three, x] } else { [x, three] };
    let s = op(&mut g, "shift", bin(B::Add), &ins);
    let c = g.add_node(
        "clip",
        NodeOp::Host(cyb_graph::HostOp::Clip),
        vec![Some(s), Some(zero), Some(six)],
        &["clip"],
    )[0];
    let ins = if swap { [c, x] } else { [x, c] };
    let m = op(&mut g, "mul", bin(B::Mul), &ins);
    let six_again = scalar(&mut g, "six_again", 6.0);
    let y = op(&mut g, "div", bin(B::Div), &[m, six_again]);
    g.outputs = vec![y];
    infer_types(&mut g).unwrap();
    g
}

#[test]
fn written_out_hard_swish_becomes_one_op() {
    // Inputs over [-5, 5): both sides of the clip.
    let x = Tensor::from_f32(
        &[2, 3, 7],
        &values(42, 11).iter().map(|v| v * 5.0).collect::<Vec<_>>(),
    )
    .unwrap();
    let d = Dispatcher::reference();
    for swap in [false, true] {
        let mut plain = hard_swish(swap);
        if swap {
            // The clip's type is known, so the arithmetic after it becomes curated ops too.
            assert_eq!(cyb_graph::prefer_curated_ops(&mut plain), 3);
        }
        let mut fused = plain.clone();
        assert_eq!(fuse_for_backend(&mut fused, &ReferenceBackend), 1);
        assert_eq!(fused.nodes.len(), 1);
        assert_eq!(count(&fused, "unary"), 1);
        let (want, got) = (run(&plain, &d, &x), run(&fused, &d, &x));
        for (a, b) in got[0].iter().zip(&want[0]) {
            assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
        }
    }
    // A clip to other bounds is not a hard-swish.
    let mut g = hard_swish(false);
    let zero = g.nodes[1].inputs[1].unwrap();
    g.constants
        .insert(zero, Tensor::from_f32(&[], &[-1.0]).unwrap());
    assert_eq!(fuse_for_backend(&mut g, &ReferenceBackend), 0);
}

/// `y = conv(x) · sigmoid(conv(x))` (a YOLO block's conv and SiLU as exported), the product
/// either way round; with `leak`, the conv's output is a graph output too.
fn conv_silu(swap: bool, leak: bool) -> Graph {
    let mut g = Graph::default();
    let x = input(
        &mut g,
        "x",
        &[Dim::Fixed(1), Dim::Fixed(3), Dim::Fixed(6), Dim::Fixed(5)],
    );
    let w = constant(&mut g, "w", &[4, 3, 3, 3], 3);
    let b = constant(&mut g, "b", &[4], 4);
    let conv = Op::Conv {
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pads: cyb_ops::PadSpec::Explicit(vec![1, 1, 1, 1]),
        group: 1,
        act: cyb_ops::LinearAct::None,
    };
    let c = op(&mut g, "conv", conv, &[x, w, b]);
    let s = op(
        &mut g,
        "sigmoid",
        Op::Unary {
            f: cyb_ops::UnaryFn::Sigmoid,
        },
        &[c],
    );
    let ins = if swap { [s, c] } else { [c, s] };
    let y = op(
        &mut g,
        "mul",
        Op::Binary {
            f: cyb_ops::BinaryFn::Mul,
        },
        &ins,
    );
    g.outputs = if leak { vec![y, c] } else { vec![y] };
    infer_types(&mut g).unwrap();
    g
}

#[test]
fn conv_and_written_out_silu_become_one_op() {
    let x = Tensor::from_f32(&[1, 3, 6, 5], &values(90, 12)).unwrap();
    let d = Dispatcher::reference();
    for swap in [false, true] {
        let plain = conv_silu(swap, false);
        let mut fused = plain.clone();
        assert_eq!(fuse_for_backend(&mut fused, &ReferenceBackend), 2);
        assert_eq!(fused.nodes.len(), 1);
        assert!(matches!(
            fused.nodes[0].op,
            NodeOp::Op(Op::Conv {
                act: cyb_ops::LinearAct::Silu,
                ..
            })
        ));
        let (want, got) = (run(&plain, &d, &x), run(&fused, &d, &x));
        for (a, b) in got[0].iter().zip(&want[0]) {
            assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
        }
    }
    // The conv's output read elsewhere: the SiLU fuses, the conv stays as it is.
    let mut g = conv_silu(false, true);
    assert_eq!(fuse_for_backend(&mut g, &ReferenceBackend), 1);
    assert_eq!((count(&g, "conv"), count(&g, "silu")), (1, 1));
    // A sigmoid that gates another value is no SiLU.
    let mut g = conv_silu(false, false);
    let other = constant(&mut g, "other", &[1, 4, 6, 5], 5);
    g.nodes[2].inputs[0] = Some(other);
    assert_eq!(fuse_for_backend(&mut g, &ReferenceBackend), 0);
}

/// Layer normalisation as exports below opset 17 write it, over x `[n, 3, 8]`: the means over
/// the last axis (as an attribute, or as a constant input with `axes_input`), the square as
/// `Pow` 2 or a product, and with the weight and bias (`affine`) or without.
fn written_out_layer_norm(axes_input: bool, square_by_mul: bool, affine: bool) -> Graph {
    use cyb_graph::HostOp;
    use cyb_ops::{BinaryFn as B, ReduceFn, UnaryFn};
    let mut g = Graph::default();
    let x = input(
        &mut g,
        "x",
        &[Dim::Sym("n".into()), Dim::Fixed(3), Dim::Fixed(8)],
    );
    let axes = g.add_constant("axes", Tensor::from_i64(&[1], &[-1]).unwrap());
    let mean = |g: &mut Graph, name: &str, v: ValueId| {
        let op = HostOp::Reduce {
            f: ReduceFn::Mean,
            keepdims: true,
            axes: (!axes_input).then(|| vec![2]),
            noop_with_empty_axes: false,
        };
        let ins = if axes_input {
            vec![Some(v), Some(axes)]
        } else {
            vec![Some(v)]
        };
        g.add_node(name, NodeOp::Host(op), ins, &[name])[0]
    };
    let scalar = |g: &mut Graph, name: &str, v: f32| {
        g.add_constant(name, Tensor::from_f32(&[], &[v]).unwrap())
    };
    let bin = |f| Op::Binary { f };
    let m = mean(&mut g, "mean", x);
    let c = op(&mut g, "centre", bin(B::Sub), &[x, m]);
    let sq = if square_by_mul {
        op(&mut g, "square", bin(B::Mul), &[c, c])
    } else {
        let two = scalar(&mut g, "two", 2.0);
        op(&mut g, "square", bin(B::Pow), &[c, two])
    };
    let v = mean(&mut g, "var", sq);
    let eps = scalar(&mut g, "eps", 1e-5);
    let ve = op(&mut g, "add_eps", bin(B::Add), &[v, eps]);
    let s = op(&mut g, "sqrt", Op::Unary { f: UnaryFn::Sqrt }, &[ve]);
    let mut y = op(&mut g, "div", bin(B::Div), &[c, s]);
    if affine {
        let w = constant(&mut g, "w", &[8], 3);
        let b = constant(&mut g, "b", &[8], 4);
        y = op(&mut g, "scale", bin(B::Mul), &[y, w]);
        y = op(&mut g, "shift", bin(B::Add), &[b, y]);
    }
    g.outputs = vec![y];
    infer_types(&mut g).unwrap();
    g
}

#[test]
fn written_out_layer_norm_becomes_one_op() {
    let x = Tensor::from_f32(
        &[2, 3, 8],
        &values(48, 21)
            .iter()
            .map(|v| v * 3.0 + 0.5)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let d = Dispatcher::reference();
    for axes_input in [false, true] {
        for square_by_mul in [false, true] {
            for affine in [false, true] {
                let case = format!("axes input {axes_input}, mul {square_by_mul}, affine {affine}");
                let plain = written_out_layer_norm(axes_input, square_by_mul, affine);
                let mut fused = plain.clone();
                assert_eq!(fuse_for_backend(&mut fused, &ReferenceBackend), 1, "{case}");
                assert_eq!(fused.nodes.len(), 1, "{case}");
                assert_eq!(count(&fused, "layer_norm"), 1, "{case}");
                let (want, got) = (run(&plain, &d, &x), run(&fused, &d, &x));
                for (a, b) in got[0].iter().zip(&want[0]) {
                    assert!((a - b).abs() <= 1e-5, "{case}: {a} vs {b}");
                }
            }
        }
    }
    // A mean over another axis, or centred values read elsewhere, stay as they are.
    let mut g = written_out_layer_norm(false, false, true);
    if let NodeOp::Host(cyb_graph::HostOp::Reduce { axes, .. }) = &mut g.nodes[0].op {
        *axes = Some(vec![1]);
    }
    assert_eq!(fuse_for_backend(&mut g, &ReferenceBackend), 0);
    let mut g = written_out_layer_norm(false, false, true);
    let centred = g.nodes[1].outputs[0];
    g.outputs.push(centred);
    assert_eq!(fuse_for_backend(&mut g, &ReferenceBackend), 0);
}

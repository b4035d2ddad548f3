//! The graph on its own: text round trip, inference, folding, dead nodes, plan, executor.

use cyb_backend::Dispatcher;
use cyb_graph::{
    eliminate_dead_nodes, fold_constants, infer_types, parse_graph, write_graph, Dim, Executor,
    Graph, HostOp, MemoryPlan, NodeOp, ValueType,
};
use cyb_ops::{BinaryFn, Op, PadSpec, PoolKind, ReduceFn, UnaryFn};
use cyb_tensor::{DType, Tensor};
use std::collections::HashMap;

fn sym(dtype: DType, dims: &[&str]) -> ValueType {
    ValueType {
        dtype,
        dims: Some(
            dims.iter()
                .map(|d| d.parse().map(Dim::Fixed).unwrap_or(Dim::Sym(d.to_string())))
                .collect(),
        ),
    }
}

/// x[N, 4] -> relu(x · w + b) -> reshape to [N, 2, 2]; plus a dead branch.
fn sample() -> Graph {
    let mut g = Graph::default();
    let x = g.add_value("x", Some(sym(DType::F32, &["N", "4"])));
    g.inputs.push(x);
    let w = g.add_constant(
        "w",
        Tensor::from_f32(
            &[4, 4],
            &(0..16).map(|i| i as f32 * 0.1 - 0.5).collect::<Vec<_>>(),
        )
        .unwrap(),
    );
    let b = g.add_constant(
        "b/bias.0",
        Tensor::from_f32(&[4], &[0.1, -0.2, 0.3, -0.4]).unwrap(),
    );
    let shape = g.add_constant("shape", Tensor::from_i64(&[3], &[0, 2, 2]).unwrap());
    let mm = g.add_node(
        "mm",
        NodeOp::Host(HostOp::MatMul),
        vec![Some(x), Some(w)],
        &["mm_out"],
    )[0];
    let add = g.add_node(
        "add",
        NodeOp::Op(Op::Binary { f: BinaryFn::Add }),
        vec![Some(mm), Some(b)],
        &["add:out"],
    )[0];
    let act = g.add_node(
        "act",
        NodeOp::Op(Op::Unary {
            f: UnaryFn::LeakyRelu { alpha: 0.1 },
        }),
        vec![Some(add)],
        &["act"],
    )[0];
    let y = g.add_node(
        "reshape",
        NodeOp::Host(HostOp::Reshape { allowzero: false }),
        vec![Some(act), Some(shape)],
        &["y"],
    )[0];
    g.add_node(
        "dead",
        NodeOp::Op(Op::Unary { f: UnaryFn::Exp }),
        vec![Some(act)],
        &["unused"],
    );
    g.add_node(
        "pool",
        NodeOp::Op(Op::Pool {
            kind: PoolKind::Avg {
                count_include_pad: false,
            },
            kernel: vec![2],
            strides: vec![1],
            dilations: vec![1],
            pads: PadSpec::SameUpper,
            ceil_mode: false,
        }),
        vec![Some(y)],
        &["pooled"],
    );
    let s = g.add_node(
        "sum",
        NodeOp::Op(Op::Reduce {
            f: ReduceFn::Sum,
            axes: vec![-1],
            keepdims: false,
        }),
        vec![Some(y)],
        &["s"],
    )[0];
    g.outputs.push(y);
    g.outputs.push(s);
    g
}

#[test]
fn text_round_trips_exactly() {
    let mut g = sample();
    infer_types(&mut g).unwrap();
    let text = write_graph(&g).unwrap();
    let consts = g.constants.clone();
    let names: HashMap<String, Tensor> = consts
        .iter()
        .map(|(&id, t)| (g.name_of(id).to_string(), t.clone()))
        .collect();
    let back = parse_graph(&text, &|n| names.get(n).cloned()).unwrap();
    assert_eq!(back, g, "{text}");
    assert_eq!(write_graph(&back).unwrap(), text);
    assert!(text.contains("\"add:out\""), "{text}");
    assert!(text.contains("LeakyRelu{alpha:0.1}"), "{text}");
}

#[test]
fn parse_errors_name_the_line() {
    let e = parse_graph("graph {\n  value x: F32[2]\n  input y\n}\n", &|_| None).unwrap_err();
    assert!(e.to_string().contains("line 3"), "{e}");
    let e = parse_graph(
        "graph {\n  value x: F32[2]\n  node n: x = op Nope(x)\n}\n",
        &|_| None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("line 3"), "{e}");
    assert!(parse_graph("graph {\n", &|_| None).is_err());
}

#[test]
fn inference_keeps_symbols_and_names_bad_nodes() {
    let mut g = sample();
    infer_types(&mut g).unwrap();
    let add = g.value_id("add:out").unwrap();
    // The host matmul's output type is unknown before running, so add's is too.
    assert_eq!(g.values[add].ty, None);
    let mut g2 = Graph::default();
    let a = g2.add_value("a", Some(sym(DType::F32, &["N", "3"])));
    let b = g2.add_value("b", Some(sym(DType::F32, &["3"])));
    g2.inputs = vec![a, b];
    let c = g2.add_node(
        "c",
        NodeOp::Op(Op::Binary { f: BinaryFn::Mul }),
        vec![Some(a), Some(b)],
        &["c"],
    )[0];
    let d = g2.add_node(
        "d",
        NodeOp::Op(Op::Concat { axis: 0 }),
        vec![Some(c), Some(c)],
        &["d"],
    )[0];
    g2.outputs = vec![d];
    infer_types(&mut g2).unwrap();
    assert_eq!(g2.values[c].ty, Some(sym(DType::F32, &["N", "3"])));
    let dd = g2.values[d].ty.clone().unwrap().dims.unwrap();
    assert!(
        matches!(&dd[0], Dim::Sym(s) if s.starts_with("_u")),
        "{dd:?}"
    );
    assert_eq!(dd[1], Dim::Fixed(3));
    // A fixed mismatch is an error naming the node.
    g2.values[b].ty = Some(sym(DType::F32, &["5"]));
    let e = infer_types(&mut g2).unwrap_err().to_string();
    assert!(e.contains("node c"), "{e}");
}

#[test]
fn executor_matches_hand_computation_and_frees_by_lifetime() {
    let mut g = sample();
    let removed = eliminate_dead_nodes(&mut g);
    assert_eq!(removed, 2, "the dead exp and the unused pool go");
    assert!(g.value_id("unused").is_none());
    let d = Dispatcher::reference();
    let ex = Executor::new(&g, &d).unwrap();
    let xs: Vec<f32> = (0..8).map(|i| i as f32 - 3.5).collect();
    let inputs = HashMap::from([("x".to_string(), Tensor::from_f32(&[2, 4], &xs).unwrap())]);
    let (outs, stats) = ex.run(&inputs).unwrap();
    assert_eq!(outs[0].0, "y");
    assert_eq!(outs[0].1.dims(), &[2, 2, 2]);
    let w: Vec<f32> = (0..16).map(|i| i as f32 * 0.1 - 0.5).collect();
    let b = [0.1f32, -0.2, 0.3, -0.4];
    let y = outs[0].1.to_f32_vec().unwrap();
    for r in 0..2 {
        for j in 0..4 {
            let mut acc = 0f32;
            for p in 0..4 {
                acc += xs[r * 4 + p] * w[p * 4 + j];
            }
            let v = acc + b[j];
            let want = if v >= 0.0 { v } else { 0.1 * v };
            assert!((y[r * 4 + j] - want).abs() < 1e-5);
        }
    }
    let s = outs[1].1.to_f32_vec().unwrap();
    assert!((s[0] - (y[0] + y[1])).abs() < 1e-5);
    assert_eq!(stats.nodes, g.nodes.len());
    // mm_out dies after add, add:out after act: fewer slots than values.
    let plan = MemoryPlan::new(&g);
    assert!(plan.slots < g.nodes.len(), "{plan:?}");
    // Wrong input shape is named.
    let bad = HashMap::from([(
        "x".to_string(),
        Tensor::from_f32(&[2, 3], &[0.0; 6]).unwrap(),
    )]);
    let e = ex.run(&bad).unwrap_err().to_string();
    assert!(e.contains("graph input x"), "{e}");
}

#[test]
fn folding_replaces_constant_subgraphs() {
    let mut g = Graph::default();
    let x = g.add_value("x", Some(sym(DType::F32, &["2", "3"])));
    g.inputs.push(x);
    let shp = g.add_node(
        "shape",
        NodeOp::Host(HostOp::Shape {
            start: 0,
            end: None,
        }),
        vec![Some(x)],
        &["shp"],
    )[0];
    let y = g.add_node(
        "reshape",
        NodeOp::Host(HostOp::Reshape { allowzero: false }),
        vec![Some(x), Some(shp)],
        &["y"],
    )[0];
    g.outputs.push(y);
    let n = fold_constants(&mut g).unwrap();
    assert_eq!(n, 1);
    assert_eq!(g.nodes.len(), 1);
    let shp = g.value_id("shp").unwrap();
    assert_eq!(g.constants[&shp].to_i64_vec().unwrap(), vec![2, 3]);
}

/// `If` with captured input; the branches survive the text round trip and run.
#[test]
fn subgraphs_round_trip_and_run() {
    let branch = |double: bool| {
        let mut b = Graph::default();
        let x = b.add_value("x", Some(ValueType::fixed(DType::F32, &[2])));
        b.inputs.push(x);
        let y = if double {
            let two = b.add_constant("two", Tensor::from_f32(&[], &[2.0]).unwrap());
            b.add_node(
                "mul",
                NodeOp::Op(Op::Binary { f: BinaryFn::Mul }),
                vec![Some(x), Some(two)],
                &["y"],
            )[0]
        } else {
            b.add_node(
                "neg",
                NodeOp::Op(Op::Unary { f: UnaryFn::Neg }),
                vec![Some(x)],
                &["y"],
            )[0]
        };
        b.outputs.push(y);
        cyb_graph::SubGraph(Box::new(b))
    };
    let mut g = Graph::default();
    let c = g.add_value("c", Some(ValueType::fixed(DType::Bool, &[])));
    let x = g.add_value("x", Some(ValueType::fixed(DType::F32, &[2])));
    g.inputs = vec![c, x];
    let op = HostOp::If {
        then_branch: branch(true),
        else_branch: branch(false),
    };
    let y = g.add_node("if", NodeOp::Host(op), vec![Some(c), Some(x)], &["y"])[0];
    g.outputs.push(y);
    let text = write_graph(&g).unwrap();
    let back = parse_graph(&text, &|_| None).unwrap();
    assert_eq!(back, g, "{text}");
    let d = Dispatcher::reference();
    // One plan (the branches' too) serves every run; a plan of another graph is refused.
    let plan = cyb_graph::ExecPlan::new(&back).unwrap();
    let ex = Executor::with_plan(&back, &plan, &d).unwrap();
    let other = cyb_graph::ExecPlan::new(&branch(true).0).unwrap();
    let refused = Executor::with_plan(&back, &other, &d).err().unwrap();
    assert!(refused.to_string().contains("another graph"), "{refused}");
    for (cond, want) in [(1u8, [2.0f32, -4.0]), (0, [-1.0, 2.0])] {
        let inputs = HashMap::from([
            (
                "c".to_string(),
                Tensor::from_bytes(&[], DType::Bool, &[cond]).unwrap(),
            ),
            (
                "x".to_string(),
                Tensor::from_f32(&[2], &[1.0, -2.0]).unwrap(),
            ),
        ]);
        let (outs, _) = ex.run(&inputs).unwrap();
        assert_eq!(outs[0].1.to_f32_vec().unwrap(), want);
    }
}

/// `prepare` readies the branches of an `If` that stays: a captured constant of the outer
/// graph becomes a constant of both branches (no longer an input of the node), and what a
/// branch computes from constants alone is folded; results are those of the plain graph.
#[test]
fn prepare_folds_constant_work_inside_branches() {
    let branch = |then: bool| {
        let mut b = Graph::default();
        let x = b.add_value("x", Some(ValueType::fixed(DType::F32, &[2])));
        let w = b.add_value("w", Some(ValueType::fixed(DType::F32, &[2])));
        b.inputs = vec![x, w];
        let (f, ins) = if then {
            let ww = b.add_node(
                "square",
                NodeOp::Op(Op::Binary { f: BinaryFn::Mul }),
                vec![Some(w), Some(w)],
                &["ww"],
            )[0];
            (BinaryFn::Add, vec![Some(x), Some(ww)])
        } else {
            (BinaryFn::Sub, vec![Some(x), Some(w)])
        };
        let y = b.add_node("out", NodeOp::Op(Op::Binary { f }), ins, &["y"])[0];
        b.outputs.push(y);
        cyb_graph::SubGraph(Box::new(b))
    };
    let mut g = Graph::default();
    let c = g.add_value("c", Some(ValueType::fixed(DType::Bool, &[])));
    let x = g.add_value("x", Some(ValueType::fixed(DType::F32, &[2])));
    g.inputs = vec![c, x];
    let w = g.add_constant("w", Tensor::from_f32(&[2], &[3.0, -0.5]).unwrap());
    let op = HostOp::If {
        then_branch: branch(true),
        else_branch: branch(false),
    };
    let y = g.add_node(
        "if",
        NodeOp::Host(op),
        vec![Some(c), Some(x), Some(w)],
        &["y"],
    )[0];
    g.outputs.push(y);
    let plain = g.clone();
    cyb_graph::prepare(&mut g).unwrap();
    let node = &g.nodes[0];
    assert_eq!(node.inputs.len(), 2, "the constant is no longer passed in");
    let NodeOp::Host(HostOp::If {
        then_branch,
        else_branch,
    }) = &node.op
    else {
        panic!("{:?}", node.op);
    };
    assert_eq!(then_branch.0.nodes.len(), 1, "the square is folded");
    assert_eq!(then_branch.0.inputs.len(), 1);
    assert_eq!(else_branch.0.inputs.len(), 1);
    let d = Dispatcher::reference();
    for cond in [1u8, 0] {
        let inputs = HashMap::from([
            (
                "c".to_string(),
                Tensor::from_bytes(&[], DType::Bool, &[cond]).unwrap(),
            ),
            (
                "x".to_string(),
                Tensor::from_f32(&[2], &[1.0, -2.0]).unwrap(),
            ),
        ]);
        let run = |g: &Graph| {
            let (outs, _) = Executor::new(g, &d).unwrap().run(&inputs).unwrap();
            outs[0].1.to_f32_vec().unwrap()
        };
        let want = if cond == 1 {
            [10.0, -1.75]
        } else {
            [-2.0, -1.5]
        };
        assert_eq!(run(&plain), want);
        assert_eq!(run(&g), want);
    }
}

/// `prepare` gives a matmul by a constant `[k, n]` matrix the weight transposed (`[n, k]`, the
/// layout the fast backends multiply by); a constant that two matmuls read is copied, not
/// changed under the other; results stay those of the plain graph.
#[test]
fn prepare_transposes_constant_matmul_weights() {
    let mut g = Graph::default();
    let x = g.add_value("x", Some(sym(DType::F32, &["N", "3"])));
    g.inputs.push(x);
    let w = g.add_constant(
        "w",
        Tensor::from_f32(
            &[3, 5],
            &(0..15).map(|i| i as f32 * 0.3 - 2.0).collect::<Vec<_>>(),
        )
        .unwrap(),
    );
    let v = g.add_constant(
        "v",
        Tensor::from_f32(&[3, 2], &[0.5, -1.0, 2.0, 0.25, -0.75, 1.5]).unwrap(),
    );
    let mm = |g: &mut Graph, name: &str, w| {
        g.add_node(
            name,
            NodeOp::Host(HostOp::MatMul),
            vec![Some(x), Some(w)],
            &[name],
        )[0]
    };
    let (a, b, c) = (mm(&mut g, "a", w), mm(&mut g, "b", w), mm(&mut g, "c", v));
    g.outputs = vec![a, b, c];
    let plain = g.clone();
    cyb_graph::prepare(&mut g).unwrap();
    for n in &g.nodes {
        assert_eq!(
            n.op,
            NodeOp::Op(Op::MatMul {
                rhs_transposed: true
            }),
            "{}",
            n.name
        );
    }
    // One transposed copy of each, read by every matmul that read the original, which is gone.
    let dims = |n: usize| g.constants[&g.nodes[n].inputs[1].unwrap()].dims().to_vec();
    assert_eq!(
        (dims(0), dims(1), dims(2)),
        (vec![5, 3], vec![5, 3], vec![2, 3])
    );
    assert_eq!(g.nodes[0].inputs[1], g.nodes[1].inputs[1]);
    assert!(!g.constants.contains_key(&w) && !g.constants.contains_key(&v));
    assert_eq!(g.constants.len(), 2);
    let xs = Tensor::from_f32(
        &[4, 3],
        &(0..12).map(|i| (i as f32).sin()).collect::<Vec<_>>(),
    )
    .unwrap();
    let inputs = HashMap::from([("x".to_string(), xs)]);
    let d = Dispatcher::reference();
    let (want, _) = Executor::new(&plain, &d).unwrap().run(&inputs).unwrap();
    let (got, _) = Executor::new(&g, &d).unwrap().run(&inputs).unwrap();
    assert_close(&want, &got);
}

/// A reshape to a shape given at run time still has a known rank (its shape input's length),
/// so the matmul after it becomes a curated matmul by the transposed weight; values as before.
#[test]
fn reshape_to_a_run_time_shape_keeps_its_rank() {
    let mut g = Graph::default();
    let x = g.add_value("x", Some(sym(DType::F32, &["N", "4"])));
    let s = g.add_value("s", Some(sym(DType::I64, &["3"])));
    g.inputs.extend([x, s]);
    let w = g.add_constant(
        "w",
        Tensor::from_f32(
            &[4, 5],
            &(0..20).map(|i| i as f32 * 0.25 - 2.0).collect::<Vec<_>>(),
        )
        .unwrap(),
    );
    let r = g.add_node(
        "r",
        NodeOp::Host(HostOp::Reshape { allowzero: false }),
        vec![Some(x), Some(s)],
        &["r"],
    )[0];
    let y = g.add_node(
        "y",
        NodeOp::Host(HostOp::MatMul),
        vec![Some(r), Some(w)],
        &["y"],
    )[0];
    g.outputs = vec![y];
    let plain = g.clone();
    cyb_graph::prepare(&mut g).unwrap();
    assert_eq!(
        g.values[r]
            .ty
            .as_ref()
            .and_then(|t| t.dims.as_ref())
            .map(Vec::len),
        Some(3)
    );
    assert_eq!(
        g.nodes[1].op,
        NodeOp::Op(Op::MatMul {
            rhs_transposed: true
        })
    );
    let inputs = HashMap::from([
        (
            "x".to_string(),
            Tensor::from_f32(&[2, 4], &[1.0, -2.0, 0.5, 3.0, -1.5, 2.5, 0.0, 1.0]).unwrap(),
        ),
        ("s".to_string(), Tensor::from_i64(&[3], &[1, 2, 4]).unwrap()),
    ]);
    let d = Dispatcher::reference();
    let (want, _) = Executor::new(&plain, &d).unwrap().run(&inputs).unwrap();
    let (got, _) = Executor::new(&g, &d).unwrap().run(&inputs).unwrap();
    assert_eq!(got[0].1.dims(), [1, 2, 5]);
    assert_close(&want, &got);
}

/// A matmul by a constant matrix whose left operand's type is unknown until run time takes
/// the weight transposed all the same (a host matmul that multiplies by the transposed
/// matrix); 1-D and 3-D left operands give what the plain matmul gives.
#[test]
fn untyped_matmul_by_a_constant_takes_it_transposed() {
    let mut g = Graph::default();
    let x = g.add_value("x", None);
    g.inputs.push(x);
    let w = g.add_constant(
        "w",
        Tensor::from_f32(
            &[3, 4],
            &(0..12).map(|i| i as f32 * 0.5 - 3.0).collect::<Vec<_>>(),
        )
        .unwrap(),
    );
    let y = g.add_node(
        "y",
        NodeOp::Host(HostOp::MatMul),
        vec![Some(x), Some(w)],
        &["y"],
    )[0];
    g.outputs = vec![y];
    let plain = g.clone();
    cyb_graph::prepare(&mut g).unwrap();
    assert_eq!(g.nodes[0].op, NodeOp::Host(HostOp::MatMulTransposed));
    assert_eq!(g.constants[&g.nodes[0].inputs[1].unwrap()].dims(), [4, 3]);
    let d = Dispatcher::reference();
    for dims in [vec![3], vec![2, 2, 3]] {
        let n: usize = dims.iter().product();
        let xs =
            Tensor::from_f32(&dims, &(0..n).map(|i| (i as f32).cos()).collect::<Vec<_>>()).unwrap();
        let inputs = HashMap::from([("x".to_string(), xs)]);
        let (want, _) = Executor::new(&plain, &d).unwrap().run(&inputs).unwrap();
        let (got, _) = Executor::new(&g, &d).unwrap().run(&inputs).unwrap();
        assert_eq!(got[0].1.dims(), want[0].1.dims());
        assert_close(&want, &got);
    }
}

/// A conv whose only reader scales it by a constant (one value) and then shifts it (one value
/// per channel) becomes one conv with scaled weights and a shifted bias; a conv whose output
/// is read twice, or scaled by a computed value, keeps its readers. Values as the plain graph's.
#[test]
fn prepare_folds_constant_scale_and_shift_into_convs() {
    let mut g = Graph::default();
    let x = g.add_value("x", Some(ValueType::fixed(DType::F32, &[1, 2, 5, 6])));
    let s = g.add_value("s", Some(ValueType::fixed(DType::F32, &[1])));
    g.inputs.extend([x, s]);
    let vals = |n: usize, k: f32| (0..n).map(|i| (i as f32 * k).sin()).collect::<Vec<_>>();
    let w = g.add_constant(
        "w",
        Tensor::from_f32(&[3, 2, 3, 3], &vals(54, 0.7)).unwrap(),
    );
    let b = g.add_constant("b", Tensor::from_f32(&[3], &[0.5, -1.0, 0.25]).unwrap());
    let scale = g.add_constant("scale", Tensor::from_f32(&[], &[1.75]).unwrap());
    let shift = g.add_constant(
        "shift",
        Tensor::from_f32(&[1, 3, 1, 1], &[0.1, -0.2, 0.3]).unwrap(),
    );
    let conv = plain_conv(1);
    let (mul, add) = (
        Op::Binary { f: BinaryFn::Mul },
        Op::Binary { f: BinaryFn::Add },
    );
    let c1 = node(&mut g, "c1", conv.clone(), vec![x, w, b]);
    let m1 = node(&mut g, "m1", mul.clone(), vec![scale, c1]);
    let a1 = node(&mut g, "a1", add.clone(), vec![m1, shift]);
    // Read twice: stays.
    let c2 = node(&mut g, "c2", conv.clone(), vec![x, w]);
    let m2 = node(&mut g, "m2", mul.clone(), vec![c2, scale]);
    let a2 = node(&mut g, "a2", add.clone(), vec![c2, m2]);
    // Scaled by an input: stays.
    let c3 = node(&mut g, "c3", conv, vec![x, w, b]);
    let m3 = node(&mut g, "m3", mul, vec![c3, s]);
    g.outputs = vec![a1, a2, m3];
    let plain = g.clone();
    cyb_graph::prepare(&mut g).unwrap();
    let names: Vec<&str> = g.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["c1", "c2", "m2", "a2", "c3", "m3"], "{names:?}");
    let inputs = HashMap::from([
        (
            "x".to_string(),
            Tensor::from_f32(&[1, 2, 5, 6], &vals(60, 0.31)).unwrap(),
        ),
        ("s".to_string(), Tensor::from_f32(&[1], &[-0.5]).unwrap()),
    ]);
    let d = Dispatcher::reference();
    let (want, _) = Executor::new(&plain, &d).unwrap().run(&inputs).unwrap();
    let (got, _) = Executor::new(&g, &d).unwrap().run(&inputs).unwrap();
    assert_close(&want, &got);
}

/// Each output of `got` within 1e-5 of `want`'s.
fn assert_close(want: &[(String, Tensor)], got: &[(String, Tensor)]) {
    assert_eq!(want.len(), got.len());
    for ((_, p), (_, q)) in want.iter().zip(got) {
        let (p, q) = (p.to_f32_vec().unwrap(), q.to_f32_vec().unwrap());
        assert_eq!(p.len(), q.len());
        for (a, b) in p.iter().zip(&q) {
            assert!((a - b).abs() <= 1e-5, "{a} vs {b}");
        }
    }
}

/// A conv without padding whose input is a constant scale (one value per channel) and shift
/// (one value) of another value takes them into its weights and bias; a padded conv's input
/// shift stays (the padding's zeros are not shifted). Values as the plain graph's.
#[test]
fn prepare_folds_constant_scale_and_shift_of_a_conv_input() {
    let mut g = Graph::default();
    let x = g.add_value("x", Some(ValueType::fixed(DType::F32, &[1, 2, 4, 5])));
    g.inputs.push(x);
    let vals = |n: usize, k: f32| (0..n).map(|i| (i as f32 * k).cos()).collect::<Vec<_>>();
    let w = g.add_constant("w", Tensor::from_f32(&[3, 2, 1, 1], &vals(6, 0.9)).unwrap());
    let w3 = g.add_constant(
        "w3",
        Tensor::from_f32(&[3, 2, 3, 3], &vals(54, 0.4)).unwrap(),
    );
    let b = g.add_constant("b", Tensor::from_f32(&[3], &[0.5, -1.0, 0.25]).unwrap());
    let scale = g.add_constant(
        "scale",
        Tensor::from_f32(&[2, 1, 1], &[1.5, -0.75]).unwrap(),
    );
    let shift = g.add_constant("shift", Tensor::from_f32(&[1], &[0.3]).unwrap());
    let conv = plain_conv;
    let (mul, add) = (
        Op::Binary { f: BinaryFn::Mul },
        Op::Binary { f: BinaryFn::Add },
    );
    let m1 = node(&mut g, "m1", mul.clone(), vec![x, scale]);
    let a1 = node(&mut g, "a1", add.clone(), vec![shift, m1]);
    let c1 = node(&mut g, "c1", conv(0), vec![a1, w, b]);
    let m2 = node(&mut g, "m2", mul, vec![scale, x]);
    let a2 = node(&mut g, "a2", add, vec![m2, shift]);
    let c2 = node(&mut g, "c2", conv(1), vec![a2, w3]);
    g.outputs = vec![c1, c2];
    let plain = g.clone();
    cyb_graph::prepare(&mut g).unwrap();
    let names: Vec<&str> = g.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["c1", "m2", "a2", "c2"], "{names:?}");
    assert_eq!(g.nodes[0].inputs[0], Some(x));
    let inputs = HashMap::from([(
        "x".to_string(),
        Tensor::from_f32(&[1, 2, 4, 5], &vals(40, 0.37)).unwrap(),
    )]);
    let d = Dispatcher::reference();
    let (want, _) = Executor::new(&plain, &d).unwrap().run(&inputs).unwrap();
    let (got, _) = Executor::new(&g, &d).unwrap().run(&inputs).unwrap();
    assert_close(&want, &got);
}

/// A one-group 2-D conv of stride 1 with `pad` zeros on every side, no activation.
fn plain_conv(pad: usize) -> Op {
    Op::Conv {
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pads: PadSpec::Explicit(vec![pad; 4]),
        group: 1,
        act: cyb_ops::LinearAct::None,
    }
}

/// Adds a node of one output named after it, reading `ins`.
fn node(g: &mut Graph, name: &str, op: Op, ins: Vec<usize>) -> usize {
    let ins = ins.into_iter().map(Some).collect();
    g.add_node(name, NodeOp::Op(op), ins, &[name])[0]
}

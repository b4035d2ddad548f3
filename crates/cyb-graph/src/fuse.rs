//! The fusion pass: chains of nodes that a backend can run as one op become that op.
//!
//! - `MatMul` → `Add` of a constant bias `[n]` → optional activation (`Relu`, `Silu`, `Tanh`,
//!   `Gelu`) becomes `Op::Linear`;
//! - `Add` of two same-shaped tensors → `RmsNorm` / `LayerNorm` of the sum (the residual
//!   "skip + norm" of transformer blocks) becomes `Op::AddRmsNorm` / `Op::AddLayerNorm`, whose
//!   two outputs are the sum (still read by the next residual) and the normed value;
//! - `Add` 3 → `Clip` to [0, 6] → `Mul` by the `Add`'s input → `Div` by 6 (hard-swish written
//!   out, as PaddlePaddle's and some PyTorch exports have it) becomes `Op::Unary` `HardSwish`,
//!   one pass over the tensor instead of five;
//! - `Sigmoid` → `Mul` by the sigmoid's input (SiLU written out, as YOLO exports have it)
//!   becomes `Op::Silu`;
//! - layer normalisation written out over the last axis (`ReduceMean` → `Sub` → `Pow` 2 →
//!   `ReduceMean` → `Add` ε → `Sqrt` → `Div`, then optionally `Mul` by a weight `[d]` and
//!   `Add` of a bias `[d]`, as exports below ONNX opset 17 have it) becomes `Op::LayerNorm`,
//!   one pass over each row instead of seven to nine (within rounding of the chain);
//! - `Conv` → activation (`Relu`, `Silu`, `Tanh`, `Gelu`; a written-out SiLU fused first)
//!   becomes one `Conv` with that activation, applied while each output tile is in cache.
//!
//! A chain is fused only when the backend that will run the graph says it `supports` the fused
//! op for these input types, and only when the intermediate values have no other reader (nor
//! are graph outputs). Fused ops are defined as the unfused sequence (the reference computes
//! them that way), so a fused node the backend declines at run time still runs, through the
//! dispatcher's fallback, with the same result; hard-swish and SiLU are the exceptions, their
//! own formulas within rounding of the chain's. Needs inferred types (`infer_types`).

use crate::graph::{Dim, Graph, Node, NodeOp, ValueId};
use crate::host_op::HostOp;
use cyb_backend::Backend;
use cyb_ops::{BinaryFn, LinearAct, Op, ReduceFn, UnaryFn};
use cyb_tensor::{DType, Shape, TensorInfo};
use std::collections::{HashMap, HashSet};

/// Fuses what `backend` supports; returns the number of fused nodes made. Element-wise
/// chains first (a SiLU written out becomes one op), then the ops that absorb an activation
/// (a conv followed by that SiLU).
pub fn fuse_for_backend(g: &mut Graph, backend: &dyn Backend) -> usize {
    fuse_round(g, backend, Round::Activations) + fuse_round(g, backend, Round::Producers)
}

/// Which plans a pass over the graph looks for.
#[derive(Clone, Copy, PartialEq)]
enum Round {
    /// Activations written out as several nodes.
    Activations,
    /// Ops with their bias, activation or following norm.
    Producers,
}

fn fuse_round(g: &mut Graph, backend: &dyn Backend, round: Round) -> usize {
    let mut readers: HashMap<ValueId, Vec<usize>> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for &v in n.inputs.iter().flatten() {
            readers.entry(v).or_default().push(i);
        }
    }
    let outputs: HashSet<ValueId> = g.outputs.iter().copied().collect();
    // Available before any node runs: graph inputs and constants.
    let early: HashSet<ValueId> = g
        .inputs
        .iter()
        .copied()
        .chain(g.constants.keys().copied())
        .collect();
    let only_reader = |v: ValueId| -> Option<usize> {
        match readers.get(&v).map(Vec::as_slice) {
            Some([r]) if !outputs.contains(&v) => Some(*r),
            _ => None,
        }
    };
    let mut removed = vec![false; g.nodes.len()];
    let mut made = 0;
    for i in 0..g.nodes.len() {
        if removed[i] {
            continue;
        }
        let plan = match (round, &g.nodes[i].op) {
            (Round::Producers, NodeOp::Op(Op::MatMul { rhs_transposed })) => {
                plan_linear(g, i, *rhs_transposed, &only_reader, &early, &removed)
            }
            (Round::Producers, NodeOp::Op(Op::Add)) => {
                plan_add_norm(g, i, &readers, &early, &removed)
            }
            (Round::Producers, NodeOp::Op(Op::Conv { .. })) => {
                plan_conv_act(g, i, &only_reader, &removed)
            }
            (Round::Activations, NodeOp::Op(Op::Add | Op::Binary { f: BinaryFn::Add })) => {
                plan_hard_swish(g, i, &only_reader, &removed)
            }
            (
                Round::Activations,
                NodeOp::Op(Op::Unary {
                    f: UnaryFn::Sigmoid,
                }),
            ) => plan_silu(g, i, &only_reader, &removed),
            (
                Round::Activations,
                NodeOp::Host(HostOp::Reduce {
                    f: ReduceFn::Mean, ..
                }),
            ) => plan_layer_norm(g, i, &readers, &only_reader, &removed),
            _ => None,
        };
        let Some(plan) = plan else { continue };
        let Some(infos) = infos(g, &plan.inputs) else {
            continue;
        };
        if !backend.supports(&plan.op, &infos) {
            continue;
        }
        let name = format!("{}+fused", g.nodes[i].name);
        for &r in &plan.remove {
            removed[r] = true;
        }
        g.nodes[i] = Node {
            name,
            op: NodeOp::Op(plan.op),
            inputs: plan.inputs.into_iter().map(Some).collect(),
            outputs: plan.outputs,
        };
        made += 1;
    }
    let mut keep = removed.iter().map(|r| !r);
    g.nodes.retain(|_| keep.next().unwrap_or(true));
    made
}

/// A fused node to put in place of node `i`, and the later nodes it absorbs.
struct Plan {
    op: Op,
    inputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
    remove: Vec<usize>,
}

fn plan_linear(
    g: &Graph,
    i: usize,
    rhs_transposed: bool,
    only_reader: &impl Fn(ValueId) -> Option<usize>,
    early: &HashSet<ValueId>,
    removed: &[bool],
) -> Option<Plan> {
    let mm = &g.nodes[i];
    let (x, w) = (input(mm, 0)?, input(mm, 1)?);
    let m = *mm.outputs.first()?;
    let j = only_reader(m).filter(|&j| !removed[j])?;
    let add = &g.nodes[j];
    if add.op != NodeOp::Op(Op::Add) {
        return None;
    }
    let (a0, a1) = (input(add, 0)?, input(add, 1)?);
    let bias = if a0 == m { a1 } else { a0 };
    // The bias must exist where the fused node goes (node i's place) and be one row `[n]`.
    let n = last_fixed_dim(g, m)?;
    if bias == m || !early.contains(&bias) || fixed_dims(g, bias)? != [n] {
        return None;
    }
    let y = *add.outputs.first()?;
    let act_node = only_reader(y)
        .filter(|&k| !removed[k])
        .and_then(|k| Some((k, activation(&g.nodes[k])?)));
    let (act, out, remove) = match act_node {
        Some((k, act)) => (act, *g.nodes[k].outputs.first()?, vec![j, k]),
        None => (LinearAct::None, y, vec![j]),
    };
    Some(Plan {
        op: Op::Linear {
            rhs_transposed,
            act,
        },
        inputs: vec![x, w, bias],
        outputs: vec![out],
        remove,
    })
}

fn plan_add_norm(
    g: &Graph,
    i: usize,
    readers: &HashMap<ValueId, Vec<usize>>,
    early: &HashSet<ValueId>,
    removed: &[bool],
) -> Option<Plan> {
    let add = &g.nodes[i];
    let (a, b) = (input(add, 0)?, input(add, 1)?);
    if fixed_or_sym(g, a)? != fixed_or_sym(g, b)? {
        return None;
    }
    let s = *add.outputs.first()?;
    // The first norm that reads the sum as its input (the sum may have other readers).
    let (j, op) = readers.get(&s)?.iter().find_map(|&j| {
        let n = &g.nodes[j];
        if removed[j] || input(n, 0)? != s {
            return None;
        }
        let op = match &n.op {
            NodeOp::Op(Op::RmsNorm { eps, weight_offset }) => Op::AddRmsNorm {
                eps: *eps,
                weight_offset: *weight_offset,
            },
            NodeOp::Op(Op::LayerNorm { eps }) => Op::AddLayerNorm { eps: *eps },
            _ => return None,
        };
        Some((j, op))
    })?;
    let norm = &g.nodes[j];
    // Norm parameters must be available at node i, where the fused node goes; an absent
    // optional parameter may only be trailing (ops take inputs by position).
    let params = &norm.inputs[1..];
    let given: Vec<ValueId> = params.iter().map_while(|p| *p).collect();
    if given.len() != params.iter().flatten().count() || !given.iter().all(|p| early.contains(p)) {
        return None;
    }
    let mut inputs = vec![a, b];
    inputs.extend(given);
    Some(Plan {
        op,
        inputs,
        outputs: vec![s, *norm.outputs.first()?],
        remove: vec![j],
    })
}

/// `x · sigmoid(x)` (SiLU as exporters write it out, the product either way round) from its
/// first node, the `Sigmoid`: one `Op::Silu` in the sigmoid's place.
fn plan_silu(
    g: &Graph,
    i: usize,
    only_reader: &impl Fn(ValueId) -> Option<usize>,
    removed: &[bool],
) -> Option<Plan> {
    let sig = &g.nodes[i];
    let (x, s) = (input(sig, 0)?, *sig.outputs.first()?);
    let j = only_reader(s).filter(|&j| !removed[j])?;
    let mul = &g.nodes[j];
    let (m0, m1) = (input(mul, 0)?, input(mul, 1)?);
    if !is_binary(mul, BinaryFn::Mul) || !((m0, m1) == (x, s) || (m0, m1) == (s, x)) {
        return None;
    }
    Some(Plan {
        op: Op::Silu,
        inputs: vec![x],
        outputs: vec![*mul.outputs.first()?],
        remove: vec![j],
    })
}

/// A convolution whose output only an activation reads (`Relu`, `Silu`, `Tanh`, `Gelu`): one
/// `Conv` with that activation.
fn plan_conv_act(
    g: &Graph,
    i: usize,
    only_reader: &impl Fn(ValueId) -> Option<usize>,
    removed: &[bool],
) -> Option<Plan> {
    let conv = &g.nodes[i];
    let NodeOp::Op(Op::Conv {
        strides,
        dilations,
        pads,
        group,
        act: LinearAct::None,
    }) = &conv.op
    else {
        return None;
    };
    let j = only_reader(*conv.outputs.first()?).filter(|&j| !removed[j])?;
    let act = activation(&g.nodes[j])?;
    // Inputs by position: an absent bias may only be the last.
    let inputs: Vec<ValueId> = conv.inputs.iter().map_while(|v| *v).collect();
    if inputs.len() != conv.inputs.iter().flatten().count() {
        return None;
    }
    Some(Plan {
        op: Op::Conv {
            strides: strides.clone(),
            dilations: dilations.clone(),
            pads: pads.clone(),
            group: *group,
            act,
        },
        inputs,
        outputs: vec![*g.nodes[j].outputs.first()?],
        remove: vec![j],
    })
}

/// `x · clip(x + 3, 0, 6) / 6` (hard-swish as exporters write it out, the product either way
/// round, the division possibly a product with 1/6) from its first node, the `Add`.
fn plan_hard_swish(
    g: &Graph,
    i: usize,
    only_reader: &impl Fn(ValueId) -> Option<usize>,
    removed: &[bool],
) -> Option<Plan> {
    let add = &g.nodes[i];
    let (a0, a1) = (input(add, 0)?, input(add, 1)?);
    let x = if scalar(g, a1) == Some(3.0) { a0 } else { a1 };
    if scalar(g, if x == a0 { a1 } else { a0 }) != Some(3.0) {
        return None;
    }
    let next = |v: ValueId| only_reader(v).filter(|&j| !removed[j]);
    let shifted = *add.outputs.first()?;
    let j = next(shifted)?;
    let clip = &g.nodes[j];
    let clipped = (clip.op == NodeOp::Host(HostOp::Clip)
        && input(clip, 0) == Some(shifted)
        && input(clip, 1).and_then(|v| scalar(g, v)) == Some(0.0)
        && input(clip, 2).and_then(|v| scalar(g, v)) == Some(6.0))
    .then(|| clip.outputs.first().copied())??;
    let k = next(clipped)?;
    let mul = &g.nodes[k];
    let (m0, m1) = (input(mul, 0)?, input(mul, 1)?);
    if !is_binary(mul, BinaryFn::Mul) || !((m0, m1) == (x, clipped) || (m0, m1) == (clipped, x)) {
        return None;
    }
    let l = next(*mul.outputs.first()?)?;
    let div = &g.nodes[l];
    let by = scalar(g, input(div, 1)?);
    let ok = input(div, 0) == mul.outputs.first().copied()
        && ((is_binary(div, BinaryFn::Div) && by == Some(6.0))
            || (is_binary(div, BinaryFn::Mul) && by.is_some_and(|v| (v - 1.0 / 6.0).abs() < 1e-7)));
    // The constants must not broadcast x to a higher rank (then the output is x's shape).
    let rank = g
        .values
        .get(x)?
        .ty
        .as_ref()?
        .dims
        .as_ref()
        .map_or(1, Vec::len);
    let consts = [a0, a1, input(clip, 1)?, input(clip, 2)?, input(div, 1)?];
    let low_rank = consts
        .iter()
        .all(|&c| c == x || g.constants.get(&c).is_some_and(|t| t.dims().len() <= rank));
    if !ok || !low_rank {
        return None;
    }
    Some(Plan {
        op: Op::Unary {
            f: UnaryFn::HardSwish,
        },
        inputs: vec![x],
        outputs: vec![*div.outputs.first()?],
        remove: vec![j, k, l],
    })
}

/// The input of node `i` where it is a mean over the last axis, kept (`ReduceMean` with
/// `keepdims` and axes `[-1]` or `[rank - 1]`, as an attribute or a constant input).
fn last_axis_mean(g: &Graph, i: usize) -> Option<ValueId> {
    let x = input(&g.nodes[i], 0)?;
    last_axis_mean_of_rank(g, i, fixed_or_sym(g, x)?.1.len())
}

/// [`last_axis_mean`] for an input of `rank` dims (the variance's input may have no inferred
/// type where the mean's has one).
fn last_axis_mean_of_rank(g: &Graph, i: usize, rank: usize) -> Option<ValueId> {
    let n = &g.nodes[i];
    let NodeOp::Host(HostOp::Reduce {
        f: ReduceFn::Mean,
        keepdims: true,
        axes,
        ..
    }) = &n.op
    else {
        return None;
    };
    let x = input(n, 0)?;
    let axes = match axes {
        Some(a) => a.clone(),
        None => g.constants.get(&input(n, 1)?)?.to_i64_vec().ok()?,
    };
    let rank = rank as i64;
    matches!(axes.as_slice(), [a] if *a == -1 || *a == rank - 1).then_some(x)
}

/// Layer normalisation written out (see the module's list) from its first node, the mean:
/// one `Op::LayerNorm` in its place, with the weight and bias where the chain has them.
fn plan_layer_norm(
    g: &Graph,
    i: usize,
    readers: &HashMap<ValueId, Vec<usize>>,
    only_reader: &impl Fn(ValueId) -> Option<usize>,
    removed: &[bool],
) -> Option<Plan> {
    let x = last_axis_mean(g, i)?;
    let next = |v: ValueId| only_reader(v).filter(|&j| !removed[j]);
    let out = |j: usize| g.nodes[j].outputs.first().copied();
    let mean = out(i)?;
    let sub = next(mean)?;
    let sn = &g.nodes[sub];
    if !is_binary(sn, BinaryFn::Sub) || (input(sn, 0)?, input(sn, 1)?) != (x, mean) {
        return None;
    }
    // The centred values feed the square and the division, nothing else.
    let centred = out(sub)?;
    // (A product `c · c` reads it twice.)
    let mut users = readers.get(&centred)?.clone();
    users.dedup();
    if users.len() != 2 || g.outputs.contains(&centred) || users.iter().any(|&u| removed[u]) {
        return None;
    }
    let is_square = |j: usize| {
        let n = &g.nodes[j];
        let (a, b) = (input(n, 0), input(n, 1));
        (is_binary(n, BinaryFn::Pow)
            && a == Some(centred)
            && b.and_then(|v| scalar(g, v)) == Some(2.0))
            || (is_binary(n, BinaryFn::Mul) && a == Some(centred) && b == Some(centred))
    };
    let (sq, div) = match (users[0], users[1]) {
        (a, b) if is_square(a) => (a, b),
        (a, b) if is_square(b) => (b, a),
        _ => return None,
    };
    let var = next(out(sq)?)?;
    let rank = fixed_or_sym(g, x)?.1.len();
    if last_axis_mean_of_rank(g, var, rank) != out(sq) {
        return None;
    }
    let add = next(out(var)?)?;
    let an = &g.nodes[add];
    let (a0, a1) = (input(an, 0)?, input(an, 1)?);
    let eps = match (a0 == out(var)?, a1 == out(var)?) {
        (true, _) => scalar(g, a1)?,
        (_, true) => scalar(g, a0)?,
        _ => return None,
    };
    if !is_binary(an, BinaryFn::Add) {
        return None;
    }
    let root = next(out(add)?)?;
    if g.nodes[root].op != NodeOp::Op(Op::Unary { f: UnaryFn::Sqrt })
        || input(&g.nodes[root], 0) != out(add)
    {
        return None;
    }
    let dn = &g.nodes[div];
    if next(out(root)?) != Some(div)
        || !is_binary(dn, BinaryFn::Div)
        || (input(dn, 0)?, input(dn, 1)?) != (centred, out(root)?)
    {
        return None;
    }
    let mut remove = vec![sub, sq, var, add, root, div];
    let mut inputs = vec![x];
    let mut last = out(div)?;
    // An affine step by a constant of the row's width: the weight (Mul), then the bias (Add).
    let d = last_fixed_dim(g, x)?;
    let row_constant = |v: ValueId| {
        g.constants
            .get(&v)
            .is_some_and(|t| t.dims() == [d] && t.dtype() == DType::F32)
    };
    for f in [BinaryFn::Mul, BinaryFn::Add] {
        let Some(j) = next(last) else { break };
        let n = &g.nodes[j];
        let other = match (input(n, 0), input(n, 1)) {
            (Some(a), Some(b)) if a == last => b,
            (Some(a), Some(b)) if b == last => a,
            _ => break,
        };
        if !is_binary(n, f) || !row_constant(other) || (f == BinaryFn::Add && inputs.len() == 1) {
            break;
        }
        inputs.push(other);
        remove.push(j);
        last = out(j)?;
    }
    Some(Plan {
        op: Op::LayerNorm { eps },
        inputs,
        outputs: vec![last],
        remove,
    })
}

/// Whether `n` is the arithmetic `f`, as a graph-level or a curated op.
fn is_binary(n: &Node, f: BinaryFn) -> bool {
    let curated = match f {
        BinaryFn::Add => Op::Add,
        BinaryFn::Sub => Op::Sub,
        BinaryFn::Mul => Op::Mul,
        BinaryFn::Div => Op::Div,
        _ => return n.op == NodeOp::Op(Op::Binary { f }),
    };
    n.op == NodeOp::Op(Op::Binary { f }) || n.op == NodeOp::Op(curated)
}

/// The value of a constant that holds one F32 number.
fn scalar(g: &Graph, v: ValueId) -> Option<f32> {
    let t = g.constants.get(&v)?;
    if t.dtype() != DType::F32 || t.dims().iter().product::<usize>() != 1 {
        return None;
    }
    t.as_f32().ok().map(|x| x[0])
}

fn input(n: &Node, k: usize) -> Option<ValueId> {
    n.inputs.get(k).copied().flatten()
}

fn activation(n: &Node) -> Option<LinearAct> {
    match &n.op {
        NodeOp::Op(op) => LinearAct::from_op(op),
        NodeOp::Host(_) => None,
    }
}

fn fixed_or_sym(g: &Graph, v: ValueId) -> Option<(DType, Vec<Dim>)> {
    let t = g.values.get(v)?.ty.as_ref()?;
    Some((t.dtype, t.dims.clone()?))
}

fn fixed_dims(g: &Graph, v: ValueId) -> Option<Vec<usize>> {
    g.values.get(v)?.ty.as_ref()?.fixed_dims()
}

fn last_fixed_dim(g: &Graph, v: ValueId) -> Option<usize> {
    match g.values.get(v)?.ty.as_ref()?.dims.as_ref()?.last()? {
        Dim::Fixed(n) => Some(*n),
        Dim::Sym(_) => None,
    }
}

/// The inputs' types as the backend's `supports` takes them; a symbolic dimension is asked
/// about as 1 (backends decide by dtype and rank, not by the size of a free dimension).
fn infos(g: &Graph, ids: &[ValueId]) -> Option<Vec<TensorInfo>> {
    ids.iter()
        .map(|&v| {
            let (dtype, dims) = fixed_or_sym(g, v)?;
            let dims: Vec<usize> = dims
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => *n,
                    Dim::Sym(_) => 1,
                })
                .collect();
            Some(TensorInfo {
                shape: Shape::new(dims).ok()?,
                dtype,
            })
        })
        .collect()
}

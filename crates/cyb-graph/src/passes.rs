//! Graph-to-graph passes: dead-node elimination and constant folding.

use crate::exec::run_node;
use crate::graph::{node_err, Graph, NodeOp, ValueId};
use cyb_backend::{Dispatcher, ExecContext};
use cyb_tensor::{DType, Result, Tensor};
use std::collections::{BTreeMap, HashSet};

/// Nodes whose outputs are larger than this stay in the graph instead of becoming constants.
const FOLD_LIMIT_BYTES: usize = 64 << 20;
/// The most rounds of `If` inlining at load (each round inlines every `If` whose condition is
/// constant by then), against hostile nesting.
const MAX_SPECIALIZE_ROUNDS: usize = 64;

/// The load-time passes ([`ready`]) inside the bodies of `If`, `Loop` and `Scan` nodes (to
/// [`MAX_SPECIALIZE_ROUNDS`] levels of nesting): what depends only on a body's constants (a
/// recurrent cell's weights cut into gates, say) is computed once at load instead of on every
/// run of the body. A body the passes cannot ready (untyped captured values, say) is kept as
/// it was: it runs unprepared, as before.
fn prepare_bodies(g: &mut Graph, depth: usize) {
    if depth >= MAX_SPECIALIZE_ROUNDS {
        return;
    }
    let constants = &g.constants;
    for node in &mut g.nodes {
        capture_constants(constants, node);
        let NodeOp::Host(op) = &mut node.op else {
            continue;
        };
        let bodies: Vec<&mut crate::SubGraph> = match op {
            crate::HostOp::If {
                then_branch,
                else_branch,
            } => vec![then_branch, else_branch],
            crate::HostOp::Loop { body, .. } | crate::HostOp::Scan { body, .. } => vec![body],
            _ => continue,
        };
        for body in bodies {
            let mut b = (*body.0).clone();
            if ready(&mut b, depth + 1).is_ok() {
                *body.0 = b;
            }
        }
    }
}

/// An `If` whose captured values include constants of the enclosing graph: each becomes a
/// constant of both branches (and leaves the node's inputs and the branches' inputs, which
/// match by position), so that folding inside the branches sees it.
fn capture_constants(constants: &BTreeMap<ValueId, Tensor>, node: &mut crate::graph::Node) {
    let NodeOp::Host(crate::HostOp::If {
        then_branch,
        else_branch,
    }) = &mut node.op
    else {
        return;
    };
    let captured = node.inputs.len().saturating_sub(1);
    if node.inputs.iter().any(Option::is_none)
        || then_branch.0.inputs.len() != captured
        || else_branch.0.inputs.len() != captured
    {
        return;
    }
    for k in (0..captured).rev() {
        let Some(t) = node.inputs[k + 1].and_then(|v| constants.get(&v)) else {
            continue;
        };
        for body in [&mut then_branch.0, &mut else_branch.0] {
            let id = body.inputs.remove(k);
            body.values[id].ty = Some(crate::ValueType::fixed(t.dtype(), t.dims()));
            body.constants.insert(id, t.clone());
        }
        node.inputs.remove(k + 1);
    }
}

/// The load-time passes of [`prepare`] on a graph or a body `depth` levels down. Folding makes
/// more types known (and so more shapes constant); an `If` whose condition became constant is
/// replaced by its branch, which may fold further. A model's nesting depth bounds the rounds.
fn ready(g: &mut Graph, depth: usize) -> Result<()> {
    for _ in 0..MAX_SPECIALIZE_ROUNDS {
        loop {
            crate::infer_types(g)?;
            if fold_constants(g)? == 0 {
                break;
            }
        }
        if crate::inline_constant_ifs(g)? == 0 {
            break;
        }
    }
    eliminate_dead_nodes(g);
    crate::infer_types(g)?;
    prefer_curated_ops(g);
    if fold_conv_affine(g) + fold_affine_into_conv(g) > 0 {
        eliminate_dead_nodes(g);
    }
    prepare_bodies(g, depth);
    Ok(())
}

/// Removes nodes whose outputs reach no graph output, then values nothing refers to.
/// Returns how many nodes were removed.
pub fn eliminate_dead_nodes(g: &mut Graph) -> usize {
    let mut live: HashSet<ValueId> = g.outputs.iter().copied().collect();
    let mut keep = vec![false; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate().rev() {
        if n.outputs.iter().any(|o| live.contains(o)) {
            keep[i] = true;
            live.extend(n.inputs.iter().flatten().copied());
        }
    }
    let before = g.nodes.len();
    let mut k = keep.iter();
    g.nodes.retain(|_| k.next().copied().unwrap_or(false));
    compact(g);
    before - g.nodes.len()
}

/// Drops values that are neither inputs, outputs, constants in use, nor node inputs/outputs, and
/// renumbers the rest in their original order.
fn compact(g: &mut Graph) {
    let mut used = vec![false; g.values.len()];
    for &i in g.inputs.iter().chain(&g.outputs) {
        used[i] = true;
    }
    for n in &g.nodes {
        for &i in n.inputs.iter().flatten().chain(&n.outputs) {
            used[i] = true;
        }
    }
    let mut map = vec![usize::MAX; g.values.len()];
    let mut values = Vec::new();
    for (i, v) in g.values.iter().enumerate() {
        if used[i] {
            map[i] = values.len();
            values.push(v.clone());
        }
    }
    g.values = values;
    let m = |i: &mut ValueId| *i = map[*i];
    g.inputs.iter_mut().for_each(m);
    g.outputs.iter_mut().for_each(m);
    for n in &mut g.nodes {
        n.inputs.iter_mut().flatten().for_each(m);
        n.outputs.iter_mut().for_each(m);
    }
    let consts = std::mem::take(&mut g.constants);
    g.constants = consts
        .into_iter()
        .filter(|(i, _)| used[*i])
        .map(|(i, t)| (map[i], t))
        .collect::<BTreeMap<_, _>>();
}

/// Evaluates, on the CPU reference, every node whose inputs are all constants (and shape
/// queries whose input dims are known), replacing it by constants; then removes what became
/// dead. Returns how many nodes were folded.
pub fn fold_constants(g: &mut Graph) -> Result<usize> {
    let d = Dispatcher::reference();
    let mut ctx = ExecContext::default();
    let mut folded = 0;
    let mut remaining = Vec::with_capacity(g.nodes.len());
    for node in std::mem::take(&mut g.nodes) {
        let inputs: Option<Vec<Option<Tensor>>> = node
            .inputs
            .iter()
            .map(|i| match i {
                None => Some(None),
                Some(id) => g
                    .constants
                    .get(id)
                    .cloned()
                    .map(Some)
                    .or_else(|| shape_stand_in(g, &node.op, *id)),
            })
            .collect();
        let Some(inputs) = inputs else {
            remaining.push(node);
            continue;
        };
        let outs = run_node(&node, &inputs, &d, &mut ctx, &[]).map_err(|e| node_err(&node, e))?;
        let size: usize = outs.iter().map(Tensor::byte_len).sum();
        if size > FOLD_LIMIT_BYTES {
            remaining.push(node);
            continue;
        }
        for (&id, t) in node.outputs.iter().zip(outs) {
            g.values[id].ty = Some(crate::ValueType::fixed(t.dtype(), t.dims()));
            g.constants.insert(id, t);
        }
        folded += 1;
    }
    g.nodes = remaining;
    // Graph outputs that became constants stay constants; nothing else changes.
    eliminate_dead_nodes(g);
    Ok(folded)
}

/// For `Shape`/`Size` of a value whose dims are known, a zero-filled stand-in of those dims: the
/// node reads only the dims, so the fold is exact.
fn shape_stand_in(g: &Graph, op: &NodeOp, id: ValueId) -> Option<Option<Tensor>> {
    let NodeOp::Host(h) = op else { return None };
    if !h.needs_only_shape() {
        return None;
    }
    let ty = g.values.get(id)?.ty.as_ref()?;
    let dims = ty.fixed_dims()?;
    // A zero-sized stand-in would be as good, but the shape must be the real one; keep it small
    // by sharing one zeroed buffer of the right byte size only when it is modest.
    let bytes = ty.dtype.bytes_for(dims.iter().product())?;
    if bytes > FOLD_LIMIT_BYTES {
        return None;
    }
    Tensor::zeros(&dims, ty.dtype).ok().map(Some)
}

/// Rewrites graph-level ops into the equivalent curated ops where the input types make them
/// identical (F32 `Binary{Add}` is `Op::Add`, F32 `Unary{Relu}` is `Op::Relu`, ...), so the
/// fast backends, which implement the curated vocabulary, get to run them. Needs inferred
/// types; returns how many nodes changed.
pub fn prefer_curated_ops(g: &mut Graph) -> usize {
    use cyb_ops::{BinaryFn, Op, UnaryFn};
    let f32_in = |g: &Graph, ins: &[Option<ValueId>]| {
        ins.iter().all(|i| {
            i.and_then(|i| g.values.get(i))
                .and_then(|v| v.ty.as_ref())
                .is_some_and(|t| t.dtype == cyb_tensor::DType::F32)
        })
    };
    let mut changed = 0;
    let mut transposed = std::collections::HashMap::new();
    for i in 0..g.nodes.len() {
        if let Some(curated) = curated_matmul_or_norm(g, i) {
            g.nodes[i].op = NodeOp::Op(curated);
            let by_transposed = NodeOp::Op(cyb_ops::Op::MatMul {
                rhs_transposed: true,
            });
            transpose_constant_rhs(g, i, by_transposed, &mut transposed);
            changed += 1;
            continue;
        }
        if g.nodes[i].op == NodeOp::Host(crate::HostOp::MatMul) && g.nodes[i].inputs.len() == 2 {
            // The left operand's rank is not known: a host matmul that takes the weight
            // transposed all the same.
            let by_transposed = NodeOp::Host(crate::HostOp::MatMulTransposed);
            if transpose_constant_rhs(g, i, by_transposed, &mut transposed) {
                changed += 1;
            }
            continue;
        }
        let NodeOp::Op(op) = &g.nodes[i].op else {
            continue;
        };
        if !f32_in(g, &g.nodes[i].inputs) {
            continue;
        }
        let curated = match op {
            Op::Binary { f: BinaryFn::Add } => Op::Add,
            Op::Binary { f: BinaryFn::Sub } => Op::Sub,
            Op::Binary { f: BinaryFn::Mul } => Op::Mul,
            Op::Binary { f: BinaryFn::Div } => Op::Div,
            Op::Unary { f: UnaryFn::Relu } => Op::Relu,
            Op::Unary { f: UnaryFn::Tanh } => Op::Tanh,
            _ => continue,
        };
        g.nodes[i].op = NodeOp::Op(curated);
        changed += 1;
    }
    changed
}

/// A matmul (node `i`, made `by_transposed`: a curated `MatMul` or the host
/// `MatMulTransposed`) whose right operand is a constant `[k, n]` F32 matrix takes it
/// transposed, `[n, k]`: the weight layout of `Linear` and of the fast backends' matmuls,
/// made once at load instead of leaving the product to the reference on every call. One
/// transposed copy per constant (`copies`: constant → its copy) serves all its matmuls; the
/// original goes once nothing reads it. Returns whether the node changed.
fn transpose_constant_rhs(
    g: &mut Graph,
    i: usize,
    by_transposed: NodeOp,
    copies: &mut std::collections::HashMap<ValueId, ValueId>,
) -> bool {
    let Some(Some(w)) = g.nodes[i].inputs.get(1).copied() else {
        return false;
    };
    let wt = match copies.get(&w) {
        Some(&wt) => wt,
        None => {
            let Some(t) = g.constants.get(&w) else {
                return false;
            };
            let ([k, n], DType::F32) = (t.dims(), t.dtype()) else {
                return false;
            };
            let (k, n) = (*k, *n);
            let Ok(v) = t.as_f32() else { return false };
            let mut tr = vec![0f32; k * n];
            for (r, row) in v.chunks_exact(n.max(1)).enumerate() {
                for (c, &x) in row.iter().enumerate() {
                    tr[c * k + r] = x;
                }
            }
            let Ok(tt) = Tensor::from_f32(&[n, k], &tr) else {
                return false;
            };
            let wt = g.add_constant(&format!("{}_transposed", g.name_of(w)), tt);
            copies.insert(w, wt);
            wt
        }
    };
    g.nodes[i].inputs[1] = Some(wt);
    g.nodes[i].op = by_transposed;
    let read = g.outputs.contains(&w) || g.nodes.iter().any(|nd| nd.inputs.contains(&Some(w)));
    if !read {
        g.constants.remove(&w);
    }
    true
}

/// ONNX's `MatMul` of two F32 operands of rank ≥ 2 (the weight rank 2) is exactly
/// `Op::MatMul`; `LayerNormNd` over the last axis with `[d]` parameters is `Op::LayerNorm`.
/// Both are what the fusion pass and the fast backends know.
fn curated_matmul_or_norm(g: &Graph, i: usize) -> Option<cyb_ops::Op> {
    use cyb_ops::Op;
    let node = &g.nodes[i];
    let ty = |k: usize| {
        let v = node.inputs.get(k).copied().flatten()?;
        let t = g.values.get(v)?.ty.as_ref()?;
        (t.dtype == cyb_tensor::DType::F32).then_some(t.dims.as_ref()?.len())
    };
    match &node.op {
        NodeOp::Host(crate::HostOp::MatMul) => {
            let (ra, rb) = (ty(0)?, ty(1)?);
            (node.inputs.len() == 2 && ra >= 2 && rb == 2).then_some(Op::MatMul {
                rhs_transposed: false,
            })
        }
        NodeOp::Op(Op::LayerNormNd { axis, eps }) => {
            let rank = ty(0)? as isize;
            let last = *axis == -1 || *axis == rank - 1;
            // Scale and bias (when given) of rank 1: one value per element of the last axis.
            let params_ok =
                (1..node.inputs.len()).all(|k| node.inputs[k].is_none() || ty(k) == Some(1));
            // Only `y` may be used: `LayerNorm` has no mean / inverse-deviation outputs.
            let y_only = node.outputs.len() == 1;
            (last && rank >= 1 && params_ok && y_only).then_some(Op::LayerNorm { eps: *eps })
        }
        _ => None,
    }
}

/// A convolution whose only reader multiplies it by a constant, or adds a constant, of one
/// value or one value per output channel (a reparameterized block's scale and shift, a folded
/// normalization written out) takes it into its weights and bias at load: `(x ∗ w + b) · s = x
/// ∗ (w · s) + b · s` and `(x ∗ w + b) + a = x ∗ w + (b + a)`, so the backend runs one op
/// instead of three passes over the output. Chains fold one step at a time. Returns how many
/// nodes were folded (each then reads nothing; dead-node elimination drops them).
pub fn fold_conv_affine(g: &mut Graph) -> usize {
    let mut folded = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        let Some((j, new_w, new_b)) = conv_output_affine(g, i) else {
            i += 1;
            continue;
        };
        let name = g.nodes[i].name.clone();
        let wid = g.add_constant(&format!("{name}.folded_w{folded}"), new_w);
        let bid = g.add_constant(&format!("{name}.folded_b{folded}"), new_b);
        // The conv now computes what the folded node did; the folded node reads nothing.
        let (x, y, out) = (
            g.nodes[i].inputs[0],
            g.nodes[i].outputs[0],
            g.nodes[j].outputs[0],
        );
        g.nodes[i].inputs = vec![x, Some(wid), Some(bid)];
        g.nodes[i].outputs = vec![out];
        g.nodes[j].inputs.clear();
        g.nodes[j].outputs = vec![y];
        folded += 1;
        // The same conv may fold its next reader too.
    }
    folded
}

/// The node that alone reads `v`, when `v` is not a graph output.
fn only_reader(g: &Graph, v: ValueId) -> Option<usize> {
    let mut readers = (0..g.nodes.len()).filter(|&j| g.nodes[j].inputs.contains(&Some(v)));
    match (readers.next(), readers.next(), g.outputs.contains(&v)) {
        (Some(j), None, false) => Some(j),
        _ => None,
    }
}

/// For [`fold_conv_affine`]: the node `j` that scales or shifts conv `i`'s output, and the
/// conv's new weight and bias.
fn conv_output_affine(g: &Graph, i: usize) -> Option<(usize, Tensor, Tensor)> {
    use cyb_ops::{LinearAct, Op};
    let node = &g.nodes[i];
    let (
        NodeOp::Op(Op::Conv {
            act: LinearAct::None,
            ..
        }),
        [Some(_), Some(w), bias @ ..],
        [y],
    ) = (&node.op, node.inputs.as_slice(), node.outputs.as_slice())
    else {
        return None;
    };
    let b = bias.first().copied().flatten();
    let j = only_reader(g, *y)?;
    let (scale, shift) = conv_affine_step(g, *w, b, *y, j)?;
    let wt = g.constants.get(w)?;
    let wv = wt.as_f32().ok()?;
    let m = scale.len().max(shift.len());
    let per = (wv.len() / m.max(1)).max(1);
    let bv: Vec<f32> = match b {
        Some(b) => g.constants.get(&b)?.to_f32_vec().ok()?,
        None => vec![0.0; m],
    };
    if bv.len() != m {
        return None;
    }
    let scaled: Vec<f32> = wv
        .iter()
        .enumerate()
        .map(|(k, &v)| scale.get(k / per).map_or(v, |s| v * s))
        .collect();
    let new_b: Vec<f32> = (0..m)
        .map(|k| {
            let v = scale.get(k).map_or(bv[k], |s| bv[k] * s);
            shift.get(k).map_or(v, |a| v + a)
        })
        .collect();
    Some((
        j,
        Tensor::from_f32(wt.dims(), &scaled).ok()?,
        Tensor::from_f32(&[m], &new_b).ok()?,
    ))
}

/// The scale (`Mul`) or shift (`Add`) node `j` applies to the conv output `y` of a conv with
/// weight `w` and bias `b`: one value, or one per output channel broadcast along axis 1, as a
/// list per output channel (`(scale, [])` or `([], shift)`).
fn conv_affine_step(
    g: &Graph,
    w: ValueId,
    b: Option<ValueId>,
    y: ValueId,
    j: usize,
) -> Option<(Vec<f32>, Vec<f32>)> {
    use cyb_ops::Op;
    let wt = g.constants.get(&w)?;
    let m = *wt.dims().first()?;
    if wt.dtype() != DType::F32 || b.is_some_and(|b| !g.constants.contains_key(&b)) {
        return None;
    }
    let rank = g.values.get(y)?.ty.as_ref()?.dims.as_ref()?.len();
    let node = &g.nodes[j];
    let [Some(p), Some(q)] = node.inputs.as_slice() else {
        return None;
    };
    let other = if *p == y { *q } else { *p };
    if other == y || node.outputs.len() != 1 {
        return None;
    }
    let per_channel = channel_values(g, other, rank, m)?;
    match &node.op {
        NodeOp::Op(Op::Mul) => Some((per_channel, Vec::new())),
        NodeOp::Op(Op::Add) => Some((Vec::new(), per_channel)),
        _ => None,
    }
}

/// The F32 constant `c` as `m` values along axis 1 of a rank-`rank` tensor it is broadcast
/// against: one value repeated, or `m` values on that axis (right-aligned, every other dim 1).
fn channel_values(g: &Graph, c: ValueId, rank: usize, m: usize) -> Option<Vec<f32>> {
    let t = g.constants.get(&c)?;
    if t.dtype() != DType::F32 || t.dims().len() > rank {
        return None;
    }
    let v = t.to_f32_vec().ok()?;
    match v.len() {
        1 => Some(vec![v[0]; m]),
        n if n == m => {
            let d = t.dims();
            let channel_axis = (d.len() + 1).checked_sub(rank)?;
            let only_channel =
                d.iter()
                    .enumerate()
                    .all(|(k, &n)| if k == channel_axis { n == m } else { n == 1 });
            only_channel.then_some(v)
        }
        _ => None,
    }
}

/// A one-group convolution without padding whose input is a constant scale or shift of
/// another value (one value, or one per input channel), read by nothing else, takes it into
/// its weights and bias: `(s·h + a) ∗ w + b = h ∗ (w·s) + (b + Σ w·a)`. (With padding the
/// zeros around the image would be shifted too, so those are left.) Returns how many nodes
/// were folded; they then read nothing, and dead-node elimination drops them.
pub fn fold_affine_into_conv(g: &mut Graph) -> usize {
    let mut folded = 0;
    let mut k = 0;
    while k < g.nodes.len() {
        let Some((j, h, new_w, new_b)) = affine_into_conv_step(g, k) else {
            k += 1;
            continue;
        };
        let name = g.nodes[k].name.clone();
        let wid = g.add_constant(&format!("{name}.input_folded_w{folded}"), new_w);
        let bid = g.add_constant(&format!("{name}.input_folded_b{folded}"), new_b);
        g.nodes[k].inputs = vec![Some(h), Some(wid), Some(bid)];
        g.nodes[j].inputs.clear();
        folded += 1;
        // The conv's new input may be a scale or shift too.
    }
    folded
}

/// For [`fold_affine_into_conv`]: the node `j` that scales or shifts conv `k`'s input, the
/// value `h` it scales or shifts, and the conv's new weight and bias.
fn affine_into_conv_step(g: &Graph, k: usize) -> Option<(usize, ValueId, Tensor, Tensor)> {
    use cyb_ops::{Op, PadSpec};
    let node = &g.nodes[k];
    let NodeOp::Op(Op::Conv {
        group: 1,
        pads: PadSpec::Explicit(pads),
        ..
    }) = &node.op
    else {
        return None;
    };
    let (Some(Some(x)), Some(Some(w))) = (node.inputs.first(), node.inputs.get(1)) else {
        return None;
    };
    let (x, w, b) = (*x, *w, node.inputs.get(2).copied().flatten());
    let wt = g.constants.get(&w)?;
    let (&[m, c, ..], DType::F32) = (wt.dims(), wt.dtype()) else {
        return None;
    };
    if pads.iter().any(|&p| p != 0) || b.is_some_and(|b| !g.constants.contains_key(&b)) {
        return None;
    }
    only_reader(g, x)?;
    let j = g.nodes.iter().position(|n| n.outputs.contains(&x))?;
    let producer = &g.nodes[j];
    let [Some(p), Some(q)] = producer.inputs.as_slice() else {
        return None;
    };
    let rank = g.values.get(x)?.ty.as_ref()?.dims.as_ref()?.len();
    let (h, v) = match (
        channel_values(g, *q, rank, c),
        channel_values(g, *p, rank, c),
    ) {
        (Some(v), _) if !g.constants.contains_key(p) => (*p, v),
        (_, Some(v)) if !g.constants.contains_key(q) => (*q, v),
        _ => return None,
    };
    let is_mul = match &producer.op {
        NodeOp::Op(Op::Mul) => true,
        NodeOp::Op(Op::Add) => false,
        _ => return None,
    };
    let wv = wt.as_f32().ok()?;
    let per = (wv.len() / (m * c).max(1)).max(1);
    let mut bias = match b {
        Some(b) => g.constants.get(&b)?.to_f32_vec().ok()?,
        None => vec![0.0; m],
    };
    if bias.len() != m || wv.len() != m * c * per {
        return None;
    }
    let new_w: Vec<f32> = if is_mul {
        wv.iter()
            .enumerate()
            .map(|(i, &x)| x * v[(i / per) % c])
            .collect()
    } else {
        for (o, bo) in bias.iter_mut().enumerate() {
            let row = &wv[o * c * per..(o + 1) * c * per];
            *bo += row
                .chunks_exact(per)
                .zip(&v)
                .map(|(taps, &a)| taps.iter().sum::<f32>() * a)
                .sum::<f32>();
        }
        wv.to_vec()
    };
    let new_w = Tensor::from_f32(wt.dims(), &new_w).ok()?;
    let new_b = Tensor::from_f32(&[m], &bias).ok()?;
    Some((j, h, new_w, new_b))
}

/// The load-time passes, in order: infers types, folds constants, replaces `If`s whose
/// condition folded by the branch they take (then infers and folds again, until none is left),
/// drops dead nodes and uses curated ops where they are equivalent (so fast backends can run
/// them). An output whose
/// computed dtype differs from the one the graph declares (an F64 input through an op with an
/// F32 rule) is an error rather than F32 where F64 was promised.
pub fn prepare(g: &mut Graph) -> Result<()> {
    let declared: Vec<Option<cyb_tensor::DType>> = g
        .outputs
        .iter()
        .map(|&o| g.values[o].ty.as_ref().map(|t| t.dtype))
        .collect();
    ready(g, 0)?;
    for (&o, want) in g.outputs.iter().zip(declared) {
        let got = g.values[o].ty.as_ref().map(|t| t.dtype);
        if let (Some(want), Some(got)) = (want, got) {
            if want != got {
                return Err(cyb_tensor::Error::UnsupportedOp {
                    op: format!(
                        "graph output {:?}: the model declares {want}, the graph computes {got}",
                        g.name_of(o)
                    ),
                    backend: "graph".into(),
                    input_dtype: want,
                });
            }
        }
    }
    Ok(())
}

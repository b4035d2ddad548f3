//! Shape and dtype inference. Compute ops use their shape rule from cyb-ops. Symbolic dims are
//! carried through by evaluating the rule twice with two different numbers standing in for
//! each symbol: a dim that follows the stand-in is that symbol, a dim equal in both runs is a
//! number, anything else becomes a fresh unknown (`_u0`, `_u1`, ...). Errors name the node.

use crate::graph::{node_err, Dim, Graph, Node, NodeOp, ValueType};
use crate::HostOp;
use cyb_backend::{Dispatcher, ExecContext};
use cyb_tensor::{DType, Error, Result, Shape, Tensor, TensorInfo};
use std::collections::HashMap;

/// The largest input 0 a host node is run on (as zeros) to learn its output type.
const STAND_IN_LIMIT_BYTES: usize = 1 << 20;

/// Fills in the types of node outputs that can be known before running. Values whose type
/// depends on tensor contents stay unknown; a host node whose output dims depend only on
/// input 0's dims and on constant inputs ([`HostOp::dims_ignore_data`]) is run on zeros to
/// learn them. A node whose inputs are fully
/// known and violate its shape rule is an error naming the node.
pub fn infer_types(g: &mut Graph) -> Result<()> {
    let mut fresh = 0usize;
    // An op's output types are a function of the op and its input types: the same op over the
    // same types gives the same (possibly fresh) dims, so equal unknowns keep one name (the
    // keys and values of one attention layer, concatenated alike, stay the same length).
    let mut seen: HashMap<String, Vec<ValueType>> = HashMap::new();
    for ni in 0..g.nodes.len() {
        let node = &g.nodes[ni];
        let ins: Vec<Option<ValueType>> = node
            .inputs
            .iter()
            .map(|i| i.and_then(|i| g.values[i].ty.clone()))
            .collect();
        let outs: Option<Vec<ValueType>> = match &node.op {
            NodeOp::Op(op) => {
                let present = node
                    .inputs
                    .iter()
                    .rposition(Option::is_some)
                    .map_or(0, |p| p + 1);
                let typed: Option<Vec<&ValueType>> =
                    ins[..present].iter().map(Option::as_ref).collect();
                match typed {
                    Some(t) if t.iter().all(|v| v.dims.is_some()) => {
                        let key = format!("{op:?}{t:?}");
                        if let Some(v) = seen.get(&key) {
                            Some(v.clone())
                        } else {
                            match infer_op(op, &t, &mut fresh) {
                                Ok(v) => {
                                    seen.insert(key, v.clone());
                                    Some(v)
                                }
                                Err(e) => return Err(node_err(node, e)),
                            }
                        }
                    }
                    _ => None,
                }
            }
            NodeOp::Host(h) => host_types(h, &ins)
                .or_else(|| host_types_by_running(g, node, h, &ins))
                .or_else(|| reshape_rank(h, &ins, &mut fresh)),
        };
        if let Some(outs) = outs {
            let ids = node.outputs.clone();
            for (id, t) in ids.into_iter().zip(outs) {
                g.values[id].ty = Some(t);
            }
        }
    }
    Ok(())
}

/// The name prefix of the dims inference makes up for numbers it cannot tell.
const UNKNOWN: &str = "_u";

/// A fresh unknown dim (`_u0`, `_u1`, ...).
fn unknown_dim(fresh: &mut usize) -> Dim {
    *fresh += 1;
    Dim::Sym(format!("{UNKNOWN}{}", *fresh - 1))
}

fn infer_op(op: &cyb_ops::Op, ins: &[&ValueType], fresh: &mut usize) -> Result<Vec<ValueType>> {
    let symbolic = ins.iter().any(|t| t.fixed_dims().is_none());
    if !symbolic {
        let infos = ins
            .iter()
            .map(|t| info(t.dtype, t.fixed_dims().unwrap_or_default()))
            .collect::<Result<Vec<_>>>()?;
        return Ok(cyb_ops::output_infos(op, &infos)?
            .into_iter()
            .map(|i| ValueType::fixed(i.dtype, i.shape.dims()))
            .collect());
    }
    // Two stand-in assignments for the symbols; primes well above typical fixed dims.
    let mut syms: HashMap<String, usize> = HashMap::new();
    for t in ins {
        for d in t.dims.iter().flatten() {
            if let Dim::Sym(s) = d {
                let n = syms.len();
                syms.entry(s.clone()).or_insert(n);
            }
        }
    }
    let probe = |k: usize, run: usize| {
        [10007, 10009, 10037, 10039, 10061, 10067, 10069, 10079][k % 8] + run * 977 + (k / 8) * 7919
    };
    let run = |r: usize| -> Result<Vec<TensorInfo>> {
        let infos = ins
            .iter()
            .map(|t| {
                let dims = t.dims.iter().flatten().map(|d| match d {
                    Dim::Fixed(n) => *n,
                    Dim::Sym(s) => probe(syms[s], r),
                });
                info(t.dtype, dims.collect())
            })
            .collect::<Result<Vec<_>>>()?;
        cyb_ops::output_infos(op, &infos)
    };
    let (a, b) = match (run(0), run(1)) {
        (Ok(a), Ok(b)) if a.len() == b.len() => (a, b),
        // The rule cannot be checked without the real sizes; leave the dims unknown.
        (Ok(a), _) | (_, Ok(a)) => {
            return Ok(a
                .into_iter()
                .map(|i| ValueType {
                    dtype: i.dtype,
                    dims: None,
                })
                .collect())
        }
        (Err(e), Err(_)) => {
            // Distinct symbols may still be equal (or 1) at run time: only a rule that fails
            // for every assignment tried is an error; otherwise the dims stay unknown.
            let same = |v: usize| -> Result<Vec<TensorInfo>> {
                let infos = ins
                    .iter()
                    .map(|t| {
                        let dims = t.dims.iter().flatten().map(|d| match d {
                            Dim::Fixed(n) => *n,
                            Dim::Sym(_) => v,
                        });
                        info(t.dtype, dims.collect())
                    })
                    .collect::<Result<Vec<_>>>()?;
                cyb_ops::output_infos(op, &infos)
            };
            // An unknown dim (`_u…`) stands for a number this pass could not tell, which may be
            // the one the rule needs: the outputs then stay untyped instead.
            let unknown = ins
                .iter()
                .flat_map(|t| t.dims.iter().flatten())
                .any(|d| matches!(d, Dim::Sym(s) if s.starts_with(UNKNOWN)));
            let a = match same(probe(0, 0)).or_else(|_| same(1)) {
                Ok(a) => a,
                Err(_) if unknown => return Ok(Vec::new()),
                Err(_) => return Err(e),
            };
            return Ok(a
                .into_iter()
                .map(|i| ValueType {
                    dtype: i.dtype,
                    dims: None,
                })
                .collect());
        }
    };
    let by_probe: HashMap<(usize, usize), &String> = syms
        .iter()
        .map(|(s, &k)| ((probe(k, 0), probe(k, 1)), s))
        .collect();
    Ok(a.iter()
        .zip(&b)
        .map(|(x, y)| {
            let dims = x
                .shape
                .dims()
                .iter()
                .zip(y.shape.dims())
                .map(|(&p, &q)| match by_probe.get(&(p, q)) {
                    Some(s) => Dim::Sym((*s).clone()),
                    None if p == q => Dim::Fixed(p),
                    None => unknown_dim(fresh),
                })
                .collect();
            ValueType {
                dtype: x.dtype,
                dims: Some(dims),
            }
        })
        .collect())
}

fn info(dtype: DType, dims: Vec<usize>) -> Result<TensorInfo> {
    Ok(TensorInfo {
        shape: Shape::new(dims)?,
        dtype,
    })
}

/// The host nodes whose output types follow from input types alone.
fn host_types(h: &HostOp, ins: &[Option<ValueType>]) -> Option<Vec<ValueType>> {
    let x = ins.first()?.as_ref()?;
    match h {
        HostOp::Identity => Some(vec![x.clone()]),
        HostOp::Size => Some(vec![ValueType::fixed(DType::I64, &[])]),
        HostOp::Shape { start, end } => {
            let n = x.dims.as_ref()?.len() as i64;
            let fix = |v: i64| (if v < 0 { v + n } else { v }).clamp(0, n);
            let len = (fix(end.unwrap_or(n)) - fix(*start)).max(0) as usize;
            Some(vec![ValueType::fixed(DType::I64, &[len])])
        }
        HostOp::CastLike => Some(vec![ValueType {
            dtype: ins.get(1)?.as_ref()?.dtype,
            dims: x.dims.clone(),
        }]),
        HostOp::MatMulTransposed => {
            let (xd, wd) = (x.dims.as_ref()?, ins.get(1)?.as_ref()?.fixed_dims()?);
            let (&[n, _], false) = (wd.as_slice(), xd.is_empty()) else {
                return None;
            };
            let mut dims = xd[..xd.len() - 1].to_vec();
            dims.push(Dim::Fixed(n));
            Some(vec![ValueType {
                dtype: x.dtype,
                dims: Some(dims),
            }])
        }
        // Element-wise between single-value bounds: x's type (bounds of other shapes are left
        // for the run to judge).
        HostOp::Clip => {
            let rank = x.dims.as_ref()?.len();
            let single = |t: &Option<ValueType>| {
                t.as_ref().is_none_or(|t| {
                    t.dims
                        .as_ref()
                        .is_some_and(|d| d.len() <= rank && d.iter().all(|v| *v == Dim::Fixed(1)))
                })
            };
            ins[1..].iter().all(single).then(|| vec![x.clone()])
        }
        _ => None,
    }
}

/// A `Reshape` whose target shape is computed at run time still has a known rank, the length
/// of its shape input: its dims become fresh unknowns (so ops after it that need the rank,
/// such as a matmul by a weight, still get their curated form).
fn reshape_rank(
    h: &HostOp,
    ins: &[Option<ValueType>],
    fresh: &mut usize,
) -> Option<Vec<ValueType>> {
    let HostOp::Reshape { .. } = h else {
        return None;
    };
    let x = ins.first()?.as_ref()?;
    let [rank] = ins.get(1)?.as_ref()?.fixed_dims()?[..] else {
        return None;
    };
    let dims = (0..rank).map(|_| unknown_dim(fresh)).collect();
    Some(vec![ValueType {
        dtype: x.dtype,
        dims: Some(dims),
    }])
}

/// The output types of `node` run on zeros in place of its shape-only inputs
/// ([`HostOp::shape_only_inputs`], whose dims must be known) and on its other inputs, which
/// must all be constants.
fn host_types_by_running(
    g: &Graph,
    node: &Node,
    h: &HostOp,
    ins: &[Option<ValueType>],
) -> Option<Vec<ValueType>> {
    let shape_only = h.shape_only_inputs();
    if shape_only == 0 {
        return None;
    }
    let mut bytes = 0usize;
    let mut inputs = Vec::with_capacity(node.inputs.len());
    for (k, i) in node.inputs.iter().enumerate() {
        let Some(id) = i else {
            inputs.push(None);
            continue;
        };
        if let Some(c) = g.constants.get(id) {
            inputs.push(Some(c.clone()));
            continue;
        }
        if k >= shape_only {
            return None;
        }
        let t = ins.get(k)?.as_ref()?;
        let dims = t.fixed_dims()?;
        let n = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
        bytes = bytes.checked_add(t.dtype.bytes_for(n)?)?;
        if bytes > STAND_IN_LIMIT_BYTES {
            return None;
        }
        inputs.push(Some(Tensor::zeros(&dims, t.dtype).ok()?));
    }
    // Bad parameters are left for the run to report, with the real input.
    let outs = crate::exec::run_node(
        node,
        &inputs,
        &Dispatcher::reference(),
        &mut ExecContext::default(),
        &[],
    )
    .ok()?;
    Some(
        outs.iter()
            .map(|t| ValueType::fixed(t.dtype(), t.dims()))
            .collect(),
    )
}

/// An error for a graph input whose tensor does not match its declared type.
pub(crate) fn input_mismatch(name: &str, ty: &ValueType, got: &cyb_tensor::Tensor) -> Error {
    Error::invalid(
        format!("graph input {name}"),
        format!(
            "declared {} {:?}, got {} {:?}",
            ty.dtype,
            ty.dims,
            got.dtype(),
            got.dims()
        ),
    )
}

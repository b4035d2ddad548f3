//! Load-time specialization: a graph input bound to a constant or given fixed dims, and `If`
//! nodes whose condition folded to a constant replaced by the branch they take. A model that
//! switches on a setting (Silero VAD's `If` on the sample rate) or on shapes known at load
//! time then runs as one flat graph that constant folding, fusion and the memory plan see
//! whole.

use crate::graph::{node_err, Dim, Graph, Node, NodeOp, ValueId, ValueType};
use crate::HostOp;
use cyb_tensor::{Error, Result, Tensor};
use std::collections::{HashMap, HashSet};

fn input_id(g: &Graph, name: &str) -> Result<ValueId> {
    g.inputs
        .iter()
        .copied()
        .find(|&i| g.name_of(i) == name)
        .ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
            required_by: "graph input to specialize".into(),
        })
}

/// Checks `dims` (of `dtype` when given) against the declared type of input `name`.
fn check_declared(
    g: &Graph,
    id: ValueId,
    dtype: Option<cyb_tensor::DType>,
    dims: &[usize],
) -> Result<()> {
    let Some(ty) = &g.values[id].ty else {
        return Ok(());
    };
    let rank_ok = ty.dims.as_ref().is_none_or(|d| {
        d.len() == dims.len()
            && d.iter().zip(dims).all(|(want, &got)| match want {
                Dim::Fixed(n) => *n == got,
                Dim::Sym(_) => true,
            })
    });
    if !rank_ok || dtype.is_some_and(|t| t != ty.dtype) {
        return Err(Error::invalid(
            format!("graph input {}", g.name_of(id)),
            format!(
                "declared {} {:?}, specialized to {} {dims:?}",
                ty.dtype,
                ty.dims,
                dtype.unwrap_or(ty.dtype)
            ),
        ));
    }
    Ok(())
}

/// Makes graph input `name` the constant `value`: it is no longer an input, and what depends on
/// it alone folds when the graph is prepared ([`crate::prepare`]).
pub fn bind_input(g: &mut Graph, name: &str, value: Tensor) -> Result<()> {
    let id = input_id(g, name)?;
    check_declared(g, id, Some(value.dtype()), value.dims())?;
    g.inputs.retain(|&i| i != id);
    g.values[id].ty = Some(ValueType::fixed(value.dtype(), value.dims()));
    g.constants.insert(id, value);
    Ok(())
}

/// Declares that graph input `name` always has dims `dims`, so shapes computed from it are known
/// when the graph is prepared. Running it with other dims is then an error.
pub fn fix_input_dims(g: &mut Graph, name: &str, dims: &[usize]) -> Result<()> {
    let id = input_id(g, name)?;
    check_declared(g, id, None, dims)?;
    let dtype = g.values[id]
        .ty
        .as_ref()
        .map(|t| t.dtype)
        .ok_or_else(|| Error::invalid(format!("graph input {name}"), "its dtype is unknown"))?;
    g.values[id].ty = Some(ValueType::fixed(dtype, dims));
    Ok(())
}

/// A name not yet in `names` (the branch's own when free), recorded there.
fn unique(names: &mut HashSet<String>, want: &str, scope: &str) -> String {
    let mut name = want.to_string();
    let mut k = 0;
    while names.contains(&name) {
        name = format!("{scope}/{want}#{k}");
        k += 1;
    }
    names.insert(name.clone());
    name
}

/// Replaces every `If` node whose condition is a constant by the nodes of the branch it takes:
/// the branch's inputs become the captured values, its constants the graph's, and its outputs
/// are written to the `If`'s outputs. Returns how many were replaced (branches may hold further
/// `If`s, which the next call sees once folding has made their conditions constant).
pub fn inline_constant_ifs(g: &mut Graph) -> Result<usize> {
    let mut names: HashSet<String> = g.values.iter().map(|v| v.name.clone()).collect();
    let mut inlined = 0;
    let mut nodes = Vec::with_capacity(g.nodes.len());
    for node in std::mem::take(&mut g.nodes) {
        let NodeOp::Host(HostOp::If {
            then_branch,
            else_branch,
        }) = &node.op
        else {
            nodes.push(node);
            continue;
        };
        let cond = node
            .inputs
            .first()
            .copied()
            .flatten()
            .and_then(|c| g.constants.get(&c))
            .and_then(|t| t.to_i64_vec().ok())
            .and_then(|v| v.first().copied());
        // A condition known only when the graph runs, or an empty one (an error then).
        let Some(cond) = cond else {
            nodes.push(node);
            continue;
        };
        let branch = if cond != 0 {
            &then_branch.0
        } else {
            &else_branch.0
        };
        let captured: Vec<ValueId> = node.inputs[1..].iter().flatten().copied().collect();
        if captured.len() != branch.inputs.len() || branch.outputs.len() != node.outputs.len() {
            return Err(node_err(
                &node,
                Error::invalid(
                    "if",
                    format!(
                        "the branch takes {} inputs and gives {} outputs; the node has {} and {}",
                        branch.inputs.len(),
                        branch.outputs.len(),
                        captured.len(),
                        node.outputs.len()
                    ),
                ),
            ));
        }
        let mut map: HashMap<ValueId, ValueId> =
            branch.inputs.iter().copied().zip(captured).collect();
        for (&c, t) in &branch.constants {
            let name = unique(&mut names, branch.name_of(c), &node.name);
            let id = g.add_value(&name, Some(ValueType::fixed(t.dtype(), t.dims())));
            g.constants.insert(id, t.clone());
            map.insert(c, id);
        }
        // A branch output computed by a branch node is written straight into the If's output.
        let produced: HashSet<ValueId> = branch
            .nodes
            .iter()
            .flat_map(|n| n.outputs.iter().copied())
            .collect();
        let mut direct: HashMap<ValueId, ValueId> = HashMap::new();
        for (&b, &out) in branch.outputs.iter().zip(&node.outputs) {
            if produced.contains(&b) {
                direct.entry(b).or_insert(out);
            }
        }
        let missing = |id: ValueId| {
            node_err(
                &node,
                Error::invalid(
                    "if",
                    format!(
                        "a branch reads {:?}, which it does not define",
                        branch.name_of(id)
                    ),
                ),
            )
        };
        for bn in &branch.nodes {
            let inputs = bn
                .inputs
                .iter()
                .map(|i| match i {
                    None => Ok(None),
                    Some(i) => map.get(i).copied().map(Some).ok_or_else(|| missing(*i)),
                })
                .collect::<Result<Vec<_>>>()?;
            let mut outputs = Vec::with_capacity(bn.outputs.len());
            for &o in &bn.outputs {
                let id = match direct.get(&o) {
                    Some(&id) => id,
                    None => {
                        let name = unique(&mut names, branch.name_of(o), &node.name);
                        g.add_value(&name, None)
                    }
                };
                map.insert(o, id);
                outputs.push(id);
            }
            nodes.push(Node {
                name: bn.name.clone(),
                op: bn.op.clone(),
                inputs,
                outputs,
            });
        }
        for (j, (&b, &out)) in branch.outputs.iter().zip(&node.outputs).enumerate() {
            let src = map.get(&b).copied().ok_or_else(|| missing(b))?;
            if src != out {
                nodes.push(Node {
                    name: format!("{}/output_{j}", node.name),
                    op: NodeOp::Host(HostOp::Identity),
                    inputs: vec![Some(src)],
                    outputs: vec![out],
                });
            }
        }
        inlined += 1;
    }
    g.nodes = nodes;
    Ok(inlined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{prepare, Executor, SubGraph};
    use cyb_backend::Dispatcher;
    use cyb_ops::{BinaryFn, Op, UnaryFn};
    use cyb_tensor::DType;

    /// `y = if mode == 1 { relu(x) + c } else { -x }`, `x: F32[n]`, `mode: I64[]`.
    fn switch() -> Graph {
        let mut then_b = Graph::default();
        let tx = then_b.add_value("x", None);
        then_b.inputs.push(tx);
        let c = then_b.add_constant("c", Tensor::from_f32(&[1], &[0.5]).unwrap());
        let r = then_b.add_node("relu", NodeOp::Op(Op::Relu), vec![Some(tx)], &["r"])[0];
        let y = then_b.add_node(
            "add",
            NodeOp::Op(Op::Binary { f: BinaryFn::Add }),
            vec![Some(r), Some(c)],
            &["then_y"],
        )[0];
        then_b.outputs.push(y);
        let mut else_b = Graph::default();
        let ex = else_b.add_value("x", None);
        else_b.inputs.push(ex);
        let y = else_b.add_node(
            "neg",
            NodeOp::Op(Op::Unary { f: UnaryFn::Neg }),
            vec![Some(ex)],
            &["else_y"],
        )[0];
        else_b.outputs.push(y);

        let mut g = Graph::default();
        let x = g.add_value(
            "x",
            Some(ValueType {
                dtype: DType::F32,
                dims: Some(vec![Dim::Sym("n".into())]),
            }),
        );
        let mode = g.add_value("mode", Some(ValueType::fixed(DType::I64, &[])));
        g.inputs = vec![x, mode];
        let one = g.add_constant("one", Tensor::from_i64(&[], &[1]).unwrap());
        let cond = g.add_node(
            "is_one",
            NodeOp::Op(Op::Binary { f: BinaryFn::Equal }),
            vec![Some(mode), Some(one)],
            &["cond"],
        )[0];
        let y = g.add_node(
            "switch",
            NodeOp::Host(HostOp::If {
                then_branch: SubGraph(Box::new(then_b)),
                else_branch: SubGraph(Box::new(else_b)),
            }),
            vec![Some(cond), Some(x)],
            &["y"],
        )[0];
        g.outputs.push(y);
        g
    }

    fn run(g: &Graph, inputs: &[(&str, Tensor)]) -> Vec<f32> {
        let d = Dispatcher::reference();
        let map = inputs
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect();
        Executor::new(g, &d).unwrap().run(&map).unwrap().0[0]
            .1
            .to_f32_vec()
            .unwrap()
    }

    #[test]
    fn a_bound_condition_inlines_the_branch_it_takes() {
        let x = Tensor::from_f32(&[3], &[-1.0, 2.0, 0.25]).unwrap();
        let mode = |m| Tensor::from_i64(&[], &[m]).unwrap();
        let whole = switch();
        let want1 = run(&whole, &[("x", x.clone()), ("mode", mode(1))]);
        let want0 = run(&whole, &[("x", x.clone()), ("mode", mode(0))]);
        assert_eq!(want1, vec![0.5, 2.5, 0.75]);

        for (m, want) in [(1, want1), (0, want0)] {
            let mut g = switch();
            bind_input(&mut g, "mode", mode(m)).unwrap();
            prepare(&mut g).unwrap();
            assert!(
                g.nodes
                    .iter()
                    .all(|n| !matches!(n.op, NodeOp::Host(HostOp::If { .. }))),
                "{:?}",
                g.nodes
            );
            assert_eq!(g.inputs.len(), 1);
            assert_eq!(run(&g, &[("x", x.clone())]), want);
        }
    }

    #[test]
    fn a_condition_known_only_at_run_time_stays() {
        let mut g = switch();
        prepare(&mut g).unwrap();
        assert!(g
            .nodes
            .iter()
            .any(|n| matches!(n.op, NodeOp::Host(HostOp::If { .. }))));
    }

    #[test]
    fn specializing_checks_the_declared_type() {
        let mut g = switch();
        let f = Tensor::from_f32(&[], &[1.0]).unwrap();
        assert!(bind_input(&mut g, "mode", f).is_err());
        assert!(bind_input(&mut g, "nothing", Tensor::from_i64(&[], &[1]).unwrap()).is_err());
        assert!(fix_input_dims(&mut g, "x", &[2, 2]).is_err());
        fix_input_dims(&mut g, "x", &[4]).unwrap();
        assert_eq!(
            g.values[g.inputs[0]].ty,
            Some(ValueType::fixed(DType::F32, &[4]))
        );
    }
}

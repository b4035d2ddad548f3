//! The executor: runs the graph's nodes in order through a [`Dispatcher`], holding
//! intermediates in the memory plan's slots and freeing each after its last reader.

use crate::graph::{node_err, Dim, Graph, Node, NodeOp};
use crate::host_op::HostRun;
use crate::infer::input_mismatch;
use crate::plan::MemoryPlan;
use cyb_backend::{Dispatcher, ExecContext};
use cyb_ops::Op;
use cyb_tensor::{Error, Result, Tensor, TensorInfo};
use std::collections::HashMap;

/// Counts from one run.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    pub nodes: usize,
    /// The most intermediate tensors alive at once.
    pub max_live: usize,
}

/// Runs one graph; reusable across calls.
pub struct Executor<'a> {
    graph: &'a Graph,
    plan: MemoryPlan,
    dispatcher: &'a Dispatcher,
}

impl<'a> Executor<'a> {
    /// Validates the graph and makes its memory plan.
    pub fn new(graph: &'a Graph, dispatcher: &'a Dispatcher) -> Result<Executor<'a>> {
        graph.validate()?;
        Ok(Executor {
            plan: MemoryPlan::new(graph),
            graph,
            dispatcher,
        })
    }

    pub(crate) fn graph(&self) -> &'a Graph {
        self.graph
    }

    pub fn plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// Runs the graph on named inputs; returns the outputs (on the host) in graph order with
    /// their names.
    pub fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
    ) -> Result<(Vec<(String, Tensor)>, RunStats)> {
        let given = self.bind(inputs)?;
        let mut slots: Vec<Option<Tensor>> = vec![None; self.plan.slots];
        let mut ctx = ExecContext::default();
        self.dispatcher.begin_step(&mut ctx)?;
        let result = self.run_nodes(&mut slots, &given, &mut ctx);
        let ended = self.dispatcher.end_step(&mut ctx);
        let stats = result?;
        ended?;
        let outs = self.collect(&slots, &given)?;
        let names = self
            .graph
            .outputs
            .iter()
            .map(|&o| self.graph.name_of(o).to_string());
        let outs = names
            .zip(outs)
            .map(|(n, t)| Ok((n, self.dispatcher.to_host(&t)?)))
            .collect::<Result<_>>()?;
        Ok((outs, stats))
    }

    /// Runs the graph inside a step that is already open (a subgraph of `If`/`Loop`); outputs
    /// stay where they were computed.
    pub(crate) fn run_nested(
        &self,
        inputs: &HashMap<String, Tensor>,
        ctx: &mut ExecContext,
    ) -> Result<Vec<Tensor>> {
        let given = self.bind(inputs)?;
        let mut slots: Vec<Option<Tensor>> = vec![None; self.plan.slots];
        self.run_nodes(&mut slots, &given, ctx)?;
        self.collect(&slots, &given)
    }

    /// The graph inputs by id, checked against their declared types.
    fn bind(&self, inputs: &HashMap<String, Tensor>) -> Result<HashMap<usize, Tensor>> {
        let g = self.graph;
        let mut given: HashMap<usize, Tensor> = HashMap::new();
        let mut bound: HashMap<&str, usize> = HashMap::new();
        for &id in &g.inputs {
            let name = g.name_of(id);
            let t = inputs
                .get(name)
                .ok_or_else(|| Error::MissingTensor {
                    name: name.to_string(),
                    required_by: "graph input".into(),
                })?
                .clone();
            if let Some(ty) = &g.values[id].ty {
                let ok = t.dtype() == ty.dtype
                    && ty.dims.as_ref().is_none_or(|d| {
                        d.len() == t.dims().len()
                            && d.iter().zip(t.dims()).all(|(want, &got)| match want {
                                Dim::Fixed(n) => *n == got,
                                Dim::Sym(s) => *bound.entry(s.as_str()).or_insert(got) == got,
                            })
                    });
                if !ok {
                    return Err(input_mismatch(name, ty, &t));
                }
            }
            given.insert(id, t);
        }
        Ok(given)
    }

    fn collect(
        &self,
        slots: &[Option<Tensor>],
        given: &HashMap<usize, Tensor>,
    ) -> Result<Vec<Tensor>> {
        let g = self.graph;
        g.outputs
            .iter()
            .map(|&o| {
                match (
                    g.constants.get(&o),
                    given.get(&o),
                    self.plan.slot_of.get(&o),
                ) {
                    (Some(t), _, _) | (_, Some(t), _) => Ok(t.clone()),
                    (_, _, Some(&s)) => slots[s].clone().ok_or_else(|| missing(g, o)),
                    _ => Err(missing(g, o)),
                }
            })
            .collect()
    }

    fn run_nodes(
        &self,
        slots: &mut [Option<Tensor>],
        given: &HashMap<usize, Tensor>,
        ctx: &mut ExecContext,
    ) -> Result<RunStats> {
        let g = self.graph;
        let mut stats = RunStats::default();
        let mut live = 0usize;
        for (i, node) in g.nodes.iter().enumerate() {
            let inputs: Vec<Option<Tensor>> = node
                .inputs
                .iter()
                .map(|x| {
                    x.map(|id| {
                        g.constants
                            .get(&id)
                            .or_else(|| given.get(&id))
                            .cloned()
                            .or_else(|| self.plan.slot_of.get(&id).and_then(|&s| slots[s].clone()))
                            .ok_or_else(|| missing(g, id))
                    })
                    .transpose()
                })
                .collect::<Result<_>>()?;
            let outs =
                run_node(node, &inputs, self.dispatcher, ctx).map_err(|e| node_err(node, e))?;
            for (&id, t) in node.outputs.iter().zip(outs) {
                if let Some(&s) = self.plan.slot_of.get(&id) {
                    slots[s] = Some(t);
                    live += 1;
                }
            }
            stats.max_live = stats.max_live.max(live);
            for v in &self.plan.free_after[i] {
                if let Some(&s) = self.plan.slot_of.get(v) {
                    if slots[s].take().is_some() {
                        live -= 1;
                    }
                }
            }
            stats.nodes += 1;
        }
        Ok(stats)
    }
}

fn missing(g: &Graph, id: usize) -> Error {
    Error::invalid(
        "graph",
        format!("value {:?} has no data when it is read", g.name_of(id)),
    )
}

/// Runs `op` through the dispatcher once its outputs are known to fit in memory: a graph's
/// shapes can come from its data, and no backend should be asked to allocate what is not there.
pub(crate) fn run_checked(
    d: &Dispatcher,
    op: &Op,
    inputs: &[Tensor],
    ctx: &mut ExecContext,
) -> Result<Vec<Tensor>> {
    let infos: Vec<TensorInfo> = inputs.iter().map(Tensor::info).collect();
    // A shape error is the backend's to report, with its context.
    if let Ok(outs) = cyb_ops::output_infos(op, &infos) {
        cyb_ops::check_outputs_fit(op, &outs)?;
    }
    d.run_with(op, inputs, ctx)
}

/// Runs one node on its inputs (absent optional inputs as `None`).
pub(crate) fn run_node(
    node: &Node,
    inputs: &[Option<Tensor>],
    d: &Dispatcher,
    ctx: &mut ExecContext,
) -> Result<Vec<Tensor>> {
    let outs = match &node.op {
        NodeOp::Op(op) => {
            // Ops take optional inputs only at the end.
            let present = inputs
                .iter()
                .rposition(Option::is_some)
                .map_or(0, |p| p + 1);
            let ts: Vec<Tensor> = inputs[..present]
                .iter()
                .map(|t| {
                    t.clone().ok_or_else(|| {
                        Error::invalid(op.name(), "an absent input before a present one")
                    })
                })
                .collect::<Result<_>>()?;
            run_checked(d, op, &ts, ctx)?
        }
        NodeOp::Host(h) => {
            let mut r = HostRun { d, ctx };
            crate::host_run::run(h, inputs, node.outputs.len(), &mut r)?
        }
    };
    if outs.len() < node.outputs.len() {
        return Err(Error::invalid(
            node.op.name(),
            format!(
                "gave {} outputs, the node has {}",
                outs.len(),
                node.outputs.len()
            ),
        ));
    }
    Ok(outs)
}

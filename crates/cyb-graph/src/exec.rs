//! The executor: runs the graph's nodes in order through a [`Dispatcher`], holding
//! intermediates in the memory plan's slots and freeing each after its last reader.

use crate::graph::{node_err, Dim, Graph, Node, NodeOp, ValueId};
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

/// Where a value's data comes from while its graph runs.
#[derive(Clone, Debug)]
enum Source {
    /// Nothing defines it (an error when it is read).
    Missing,
    Constant(Tensor),
    /// The graph input at this position.
    Input(usize),
    /// The memory plan's slot holding this computed value.
    Slot(usize),
}

/// What running a graph takes besides the graph, made once from a validated graph: the memory
/// plan, where each value's data comes from, and the plans of the subgraphs its nodes hold
/// (reused by every run, branch taken and loop iteration).
#[derive(Clone, Debug)]
pub struct ExecPlan {
    memory: MemoryPlan,
    sources: Vec<Source>,
    /// Per node: the plans of its subgraphs, in `HostOp::bodies` order.
    bodies: Vec<Vec<ExecPlan>>,
    /// Values, nodes, inputs and outputs of the graph it was made for.
    counts: [usize; 4],
}

fn counts(g: &Graph) -> [usize; 4] {
    [
        g.values.len(),
        g.nodes.len(),
        g.inputs.len(),
        g.outputs.len(),
    ]
}

impl ExecPlan {
    /// Validates `graph` (and its subgraphs) and plans its runs.
    pub fn new(graph: &Graph) -> Result<ExecPlan> {
        graph.validate()?;
        let memory = MemoryPlan::new(graph);
        let mut sources = vec![Source::Missing; graph.values.len()];
        for (&id, &s) in &memory.slot_of {
            sources[id] = Source::Slot(s);
        }
        for (k, &id) in graph.inputs.iter().enumerate() {
            sources[id] = Source::Input(k);
        }
        for (&id, t) in &graph.constants {
            sources[id] = Source::Constant(t.clone());
        }
        let bodies = graph
            .nodes
            .iter()
            .map(|n| match &n.op {
                NodeOp::Host(h) => h
                    .bodies()
                    .into_iter()
                    .map(ExecPlan::new)
                    .collect::<Result<Vec<_>>>()
                    .map_err(|e| node_err(n, e)),
                NodeOp::Op(_) => Ok(Vec::new()),
            })
            .collect::<Result<_>>()?;
        Ok(ExecPlan {
            memory,
            sources,
            bodies,
            counts: counts(graph),
        })
    }
}

/// Runs one graph; reusable across calls.
pub struct Executor<'a> {
    graph: &'a Graph,
    plan: std::borrow::Cow<'a, ExecPlan>,
    dispatcher: &'a Dispatcher,
}

impl<'a> Executor<'a> {
    /// Validates the graph and plans its runs.
    pub fn new(graph: &'a Graph, dispatcher: &'a Dispatcher) -> Result<Executor<'a>> {
        Ok(Executor {
            plan: std::borrow::Cow::Owned(ExecPlan::new(graph)?),
            graph,
            dispatcher,
        })
    }

    /// An executor on a plan made earlier for this graph ([`ExecPlan::new`]), so that callers
    /// that keep the graph keep its plan too; a plan of another graph's size is refused.
    pub fn with_plan(
        graph: &'a Graph,
        plan: &'a ExecPlan,
        dispatcher: &'a Dispatcher,
    ) -> Result<Executor<'a>> {
        if plan.counts != counts(graph) {
            return Err(Error::invalid(
                "graph",
                "an execution plan made for another graph",
            ));
        }
        Ok(Executor {
            plan: std::borrow::Cow::Borrowed(plan),
            graph,
            dispatcher,
        })
    }

    pub fn plan(&self) -> &MemoryPlan {
        &self.plan.memory
    }

    /// Runs the graph on named inputs; returns the outputs (on the host) in graph order with
    /// their names.
    pub fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
    ) -> Result<(Vec<(String, Tensor)>, RunStats)> {
        let g = self.graph;
        let given = g
            .inputs
            .iter()
            .map(|&id| {
                let name = g.name_of(id);
                inputs
                    .get(name)
                    .cloned()
                    .ok_or_else(|| Error::MissingTensor {
                        name: name.to_string(),
                        required_by: "graph input".into(),
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        self.check_inputs(&given)?;
        let mut slots: Vec<Option<Tensor>> = vec![None; self.plan.memory.slots];
        let mut ctx = ExecContext::default();
        self.dispatcher.begin_step(&mut ctx)?;
        let result = self.run_nodes(&mut slots, &given, &mut ctx);
        let ended = self.dispatcher.end_step(&mut ctx);
        let stats = result?;
        ended?;
        let outs = self.collect(&slots, &given)?;
        let names = g.outputs.iter().map(|&o| g.name_of(o).to_string());
        let outs = names
            .zip(outs)
            .map(|(n, t)| Ok((n, self.dispatcher.to_host(&t)?)))
            .collect::<Result<_>>()?;
        Ok((outs, stats))
    }

    /// Runs the graph on its inputs in order inside a step that is already open (a subgraph
    /// of `If`/`Loop`/`Scan`); outputs stay where they were computed.
    pub(crate) fn run_nested(&self, args: &[Tensor], ctx: &mut ExecContext) -> Result<Vec<Tensor>> {
        if args.len() != self.graph.inputs.len() {
            return Err(Error::invalid(
                "subgraph",
                format!(
                    "{} inputs given, it takes {}",
                    args.len(),
                    self.graph.inputs.len()
                ),
            ));
        }
        self.check_inputs(args)?;
        let mut slots: Vec<Option<Tensor>> = vec![None; self.plan.memory.slots];
        self.run_nodes(&mut slots, args, ctx)?;
        self.collect(&slots, args)
    }

    /// The graph inputs (in order) checked against their declared types.
    fn check_inputs(&self, given: &[Tensor]) -> Result<()> {
        let g = self.graph;
        let mut bound: Vec<(&str, usize)> = Vec::new();
        for (&id, t) in g.inputs.iter().zip(given) {
            let Some(ty) = &g.values[id].ty else { continue };
            let ok = t.dtype() == ty.dtype
                && ty.dims.as_ref().is_none_or(|d| {
                    d.len() == t.dims().len()
                        && d.iter().zip(t.dims()).all(|(want, &got)| match want {
                            Dim::Fixed(n) => *n == got,
                            Dim::Sym(s) => match bound.iter().find(|(n, _)| *n == s.as_str()) {
                                Some(&(_, v)) => v == got,
                                None => {
                                    bound.push((s.as_str(), got));
                                    true
                                }
                            },
                        })
                });
            if !ok {
                return Err(input_mismatch(g.name_of(id), ty, t));
            }
        }
        Ok(())
    }

    /// The data of value `id`, if it has any now.
    fn value(&self, id: ValueId, slots: &[Option<Tensor>], given: &[Tensor]) -> Result<Tensor> {
        let found = match self.plan.sources.get(id) {
            Some(Source::Constant(t)) => Some(t),
            Some(Source::Input(k)) => given.get(*k),
            Some(Source::Slot(s)) => slots.get(*s).and_then(Option::as_ref),
            Some(Source::Missing) | None => None,
        };
        found.cloned().ok_or_else(|| missing(self.graph, id))
    }

    fn collect(&self, slots: &[Option<Tensor>], given: &[Tensor]) -> Result<Vec<Tensor>> {
        let g = self.graph;
        g.outputs
            .iter()
            .map(|&o| self.value(o, slots, given))
            .collect()
    }

    fn run_nodes(
        &self,
        slots: &mut [Option<Tensor>],
        given: &[Tensor],
        ctx: &mut ExecContext,
    ) -> Result<RunStats> {
        let g = self.graph;
        let plan = &*self.plan;
        let mut stats = RunStats::default();
        let mut live = 0usize;
        let mut inputs: Vec<Option<Tensor>> = Vec::new();
        for (i, node) in g.nodes.iter().enumerate() {
            inputs.clear();
            for x in &node.inputs {
                inputs.push(match x {
                    Some(id) => Some(self.value(*id, slots, given)?),
                    None => None,
                });
            }
            let bodies = plan.bodies.get(i).map_or(&[][..], Vec::as_slice);
            let outs = run_node(node, &inputs, self.dispatcher, ctx, bodies)
                .map_err(|e| node_err(node, e))?;
            for (&id, t) in node.outputs.iter().zip(outs) {
                if let Some(Source::Slot(s)) = plan.sources.get(id) {
                    if let Some(slot) = slots.get_mut(*s) {
                        *slot = Some(t);
                        live += 1;
                    }
                }
            }
            stats.max_live = stats.max_live.max(live);
            for &v in plan.memory.free_after.get(i).map_or(&[][..], Vec::as_slice) {
                if let Some(Source::Slot(s)) = plan.sources.get(v) {
                    if slots.get_mut(*s).and_then(Option::take).is_some() {
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

/// Runs one node on its inputs (absent optional inputs as `None`); `bodies` are the plans of
/// its subgraphs when an executor has them (else each is planned for this run).
pub(crate) fn run_node(
    node: &Node,
    inputs: &[Option<Tensor>],
    d: &Dispatcher,
    ctx: &mut ExecContext,
    bodies: &[ExecPlan],
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
            let mut r = HostRun { d, ctx, bodies };
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

//! The graph builder of ONNX import: value names to ids, generated constants, and the per-node
//! checks (domain, opsets before 7) before `ops::map` turns a node into a graph node.

use super::attrs::Attrs;
use super::format_err;
use super::ops::{map, unsupported};
use super::proto::{GraphProto, NodeProto};
use cyb_graph::{Graph, NodeOp, ValueId};
use cyb_tensor::{Result, Tensor};
use std::collections::{HashMap, HashSet};
use std::path::Path;

pub(crate) struct Builder<'p> {
    pub g: Graph,
    pub ids: HashMap<String, ValueId>,
    pub path: &'p Path,
    pub opset: i64,
    tmp: usize,
    /// Names visible from enclosing graphs (when this builds a subgraph).
    pub outer: HashSet<String>,
    /// Outer names this subgraph reads, in first-use order; each is one of its inputs.
    pub captured: Vec<String>,
}

/// What one ONNX node becomes: an op and its inputs (the node's, plus constants made from
/// attributes of older opsets).
pub(crate) type Mapped = (NodeOp, Vec<Option<ValueId>>);

impl<'p> Builder<'p> {
    pub fn new(path: &'p Path, opset: i64) -> Builder<'p> {
        Builder {
            g: Graph::default(),
            ids: HashMap::new(),
            path,
            opset,
            tmp: 0,
            outer: HashSet::new(),
            captured: Vec::new(),
        }
    }

    /// The value named `s`: defined here, or captured from an enclosing graph as a new input.
    pub fn lookup(&mut self, s: &str) -> Option<ValueId> {
        if let Some(&id) = self.ids.get(s) {
            return Some(id);
        }
        if !self.outer.contains(s) {
            return None;
        }
        let id = self.g.add_value(s, None);
        self.g.inputs.push(id);
        self.ids.insert(s.to_string(), id);
        self.captured.push(s.to_string());
        Some(id)
    }

    /// Builds a subgraph (an `If` branch, a `Loop` body) that may read this graph's values.
    /// Returns it with the outer names it captured (its inputs after the formal ones).
    pub fn subgraph(&mut self, gp: &GraphProto) -> Result<(Graph, Vec<String>)> {
        let mut child = Builder::new(self.path, self.opset);
        child.outer = self.ids.keys().chain(self.outer.iter()).cloned().collect();
        for init in &gp.initializer {
            let t = super::tensor::to_tensor(init, self.path, self.path.parent())?;
            let id = child.g.add_constant(&init.name, t);
            child.ids.insert(init.name.clone(), id);
        }
        for vi in &gp.input {
            let id = child
                .g
                .add_value(&vi.name, super::value_type(vi, self.path)?);
            child.g.inputs.push(id);
            child.ids.insert(vi.name.clone(), id);
        }
        for (i, node) in gp.node.iter().enumerate() {
            child.node(node, i)?;
        }
        for vi in &gp.output {
            let id = child.lookup(&vi.name).ok_or_else(|| {
                format_err(
                    self.path,
                    format!("subgraph output {:?} is never computed", vi.name),
                )
            })?;
            child.g.outputs.push(id);
        }
        // What the child captured from further out, this graph captures too.
        for name in child.captured.clone() {
            if self.lookup(&name).is_none() {
                return Err(format_err(
                    self.path,
                    format!("subgraph reads unknown {name:?}"),
                ));
            }
        }
        Ok((child.g, child.captured))
    }

    /// A new constant with a generated name.
    pub fn konst(&mut self, hint: &str, t: Tensor) -> ValueId {
        loop {
            let name = format!("{hint}__c{}", self.tmp);
            self.tmp += 1;
            if !self.ids.contains_key(&name) {
                let id = self.g.add_constant(&name, t);
                self.ids.insert(name, id);
                return id;
            }
        }
    }

    pub fn ints(&mut self, hint: &str, v: &[i64]) -> Result<ValueId> {
        Ok(self.konst(hint, Tensor::from_i64(&[v.len()], v)?))
    }

    pub fn scalar_f32(&mut self, hint: &str, v: f32) -> Result<ValueId> {
        Ok(self.konst(hint, Tensor::from_f32(&[], &[v])?))
    }

    /// The rank of a value when its type says.
    pub fn rank(&self, id: Option<ValueId>) -> Option<usize> {
        let v = self.g.values.get(id?)?;
        Some(v.ty.as_ref()?.dims.as_ref()?.len())
    }

    pub fn node(&mut self, n: &NodeProto, index: usize) -> Result<()> {
        let name = if n.name.is_empty() {
            format!("{}_{index}", n.op_type)
        } else {
            n.name.clone()
        };
        let training_step = n.domain == "ai.onnx.preview.training"
            && matches!(n.op_type.as_str(), "Adagrad" | "Adam" | "Momentum");
        if !(n.domain.is_empty() || n.domain == "ai.onnx" || training_step) {
            return Err(unsupported(
                &name,
                &format!("{}:{}", n.domain, n.op_type),
                "domain not supported",
            ));
        }
        // The training domain has its own opset (1); the default domain's does not apply.
        if self.opset < 7 && !training_step {
            legacy_check(&n.op_type, self.opset, &Attrs::new(&n.attribute)).map_err(|why| {
                unsupported(&name, &n.op_type, &format!("opset {}: {why}", self.opset))
            })?;
        }
        let mut inputs = Vec::with_capacity(n.input.len());
        for s in &n.input {
            if s.is_empty() {
                inputs.push(None);
                continue;
            }
            let id = self.lookup(s).ok_or_else(|| {
                format_err(
                    self.path,
                    format!("node {name} reads {s:?}, which no earlier node computes"),
                )
            })?;
            inputs.push(Some(id));
        }
        let a = Attrs::new(&n.attribute);
        if self.opset < 7 && !training_step {
            self.legacy_axis_broadcast(n, &a, &inputs).map_err(|why| {
                unsupported(&name, &n.op_type, &format!("opset {}: {why}", self.opset))
            })?;
        }
        let (op, inputs) = map(self, n, &name, &a, inputs)?;
        let mut outs = Vec::with_capacity(n.output.len());
        for (i, o) in n.output.iter().enumerate() {
            let oname = if o.is_empty() {
                format!("{name}__unused{i}")
            } else {
                o.clone()
            };
            if self.ids.contains_key(&oname) {
                return Err(format_err(
                    self.path,
                    format!("node {name} redefines {oname:?}"),
                ));
            }
            outs.push(oname);
        }
        let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
        let ids = self.g.add_node(&name, op, inputs, &refs);
        for (o, id) in outs.into_iter().zip(ids) {
            self.ids.insert(o, id);
        }
        Ok(())
    }
}

/// The opset-1..6 operators with `broadcast` and `axis` attributes.
const LEGACY_ARITH: &[&str] = &[
    "Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "And", "Or", "Xor",
];

impl Builder<'_> {
    /// Opset < 7 arithmetic with `broadcast = 1` and an `axis` lines B's dims up with A's
    /// starting at `axis`; that is numpy broadcasting exactly when B ends where A ends, the
    /// only case read (both ranks must be known).
    fn legacy_axis_broadcast(
        &self,
        n: &NodeProto,
        a: &Attrs,
        inputs: &[Option<ValueId>],
    ) -> std::result::Result<(), String> {
        if !(LEGACY_ARITH.contains(&n.op_type.as_str())
            && a.i("broadcast", 0) != 0
            && a.has("axis"))
        {
            return Ok(());
        }
        let rank = |i: usize| -> Option<usize> {
            let id = (*inputs.get(i)?)?;
            Some(self.g.values.get(id)?.ty.as_ref()?.dims.as_ref()?.len())
        };
        let (Some(ra), Some(rb)) = (rank(0), rank(1)) else {
            return Err("legacy broadcast along an axis, with unknown ranks".into());
        };
        let axis = a.i("axis", 0);
        let axis = if axis < 0 { axis + ra as i64 } else { axis };
        if axis + rb as i64 != ra as i64 {
            return Err(format!(
                "legacy broadcast of rank {rb} at axis {axis} of rank {ra} (not trailing)"
            ));
        }
        Ok(())
    }
}

/// Operators whose inputs, attributes and math at opsets 1–6 are what the mapping below reads
/// (only their type lists grew later), so old models using them import safely.
const SAME_SINCE_OPSET_1: &[&str] = &[
    "Not",
    "And",
    "Or",
    "Xor",
    "Softplus",
    "Softsign",
    "Elu",
    "Selu",
    "HardSigmoid",
    "LeakyRelu",
    "ThresholdedRelu",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "InstanceNormalization",
    "Identity",
    "Abs",
    "Neg",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Sigmoid",
    "Relu",
    "Tanh",
    "Floor",
    "Ceil",
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
    "ArgMax",
    "ArgMin",
    "Transpose",
    "Shape",
    "Size",
    "Hardmax",
    "LogSoftmax",
    "Softmax",
    "Conv",
    "ConvTranspose",
    "MaxPool",
    "AveragePool",
    "LpPool",
    "Unsqueeze",
    "Squeeze",
    "Flatten",
    "MatMul",
    "Gemm",
    "Clip",
    "Split",
    "Gather",
    "Slice",
    "Constant",
    "Tile",
    "Sum",
    "Max",
    "Min",
    "Mean",
    "PRelu",
    "Dropout",
    "BatchNormalization",
    "Concat",
    "Reshape",
    "Cast",
    "Pad",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Equal",
    "Less",
    "Greater",
    "DepthToSpace",
    "SpaceToDepth",
    "LRN",
];

/// Whether a node of an opset-1..6 model means what the mapping assumes; the reason if not.
fn legacy_check(op: &str, opset: i64, a: &Attrs) -> std::result::Result<(), String> {
    if !SAME_SINCE_OPSET_1.contains(&op) {
        return Err("before opset 7 only operators unchanged since opset 1 are read".into());
    }
    match op {
        "Reshape" if opset < 5 => Err("shape as an attribute".into()),
        "Cast" if opset < 6 => Err("'to' as a string".into()),
        "Pad" if opset < 2 => Err("'paddings' attribute".into()),
        "Concat" if opset < 4 && !a.has("axis") => Err("implicit axis".into()),
        "BatchNormalization" if a.i("spatial", 1) == 0 => Err("spatial = 0".into()),
        _ => Ok(()),
    }
}

//! The graph: values (named, typed, possibly symbolic), nodes in topological order, constants.

use crate::HostOp;
use cyb_ops::Op;
use cyb_tensor::{DType, Error, Result, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// Index of a value in [`Graph::values`].
pub type ValueId = usize;

/// One dimension: a number, or a symbol bound when the graph runs (`batch`, `seq`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Fixed(usize),
    Sym(String),
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

/// What is known about a value before running: its dtype and, when known, its dims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueType {
    pub dtype: DType,
    /// `None` when even the rank is unknown.
    pub dims: Option<Vec<Dim>>,
}

impl ValueType {
    /// A fully known type.
    pub fn fixed(dtype: DType, dims: &[usize]) -> ValueType {
        ValueType {
            dtype,
            dims: Some(dims.iter().map(|&d| Dim::Fixed(d)).collect()),
        }
    }

    /// The dims when all are numbers.
    pub fn fixed_dims(&self) -> Option<Vec<usize>> {
        self.dims
            .as_ref()?
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => Some(*n),
                Dim::Sym(_) => None,
            })
            .collect()
    }
}

/// A named value: a graph input, a constant, or a node output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    pub name: String,
    pub ty: Option<ValueType>,
}

/// What a node computes.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum NodeOp {
    /// A compute op; all inputs are tensors it reads as data.
    Op(Op),
    /// A node that reads some inputs' values on the host to decide what to compute.
    Host(HostOp),
}

impl NodeOp {
    pub fn name(&self) -> &'static str {
        match self {
            NodeOp::Op(op) => op.name(),
            NodeOp::Host(h) => h.name(),
        }
    }
}

/// One node. `inputs` may contain `None` for an absent optional input (ONNX's `""`).
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    pub op: NodeOp,
    pub inputs: Vec<Option<ValueId>>,
    pub outputs: Vec<ValueId>,
}

/// A DAG of nodes over values. Nodes are kept in topological order: every input of a node is a
/// graph input, a constant, or an output of an earlier node (checked by [`Graph::validate`]).
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub values: Vec<Value>,
    pub nodes: Vec<Node>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    pub constants: BTreeMap<ValueId, Tensor>,
}

impl Graph {
    /// Adds a value and returns its id; names must be unique.
    pub fn add_value(&mut self, name: &str, ty: Option<ValueType>) -> ValueId {
        self.values.push(Value {
            name: name.to_string(),
            ty,
        });
        self.values.len() - 1
    }

    /// Adds a constant value.
    pub fn add_constant(&mut self, name: &str, t: Tensor) -> ValueId {
        let ty = ValueType::fixed(t.dtype(), t.dims());
        let id = self.add_value(name, Some(ty));
        self.constants.insert(id, t);
        id
    }

    /// Appends a node; outputs are new values named `outputs`.
    pub fn add_node(
        &mut self,
        name: &str,
        op: NodeOp,
        inputs: Vec<Option<ValueId>>,
        outputs: &[&str],
    ) -> Vec<ValueId> {
        let outs: Vec<ValueId> = outputs.iter().map(|o| self.add_value(o, None)).collect();
        self.nodes.push(Node {
            name: name.to_string(),
            op,
            inputs,
            outputs: outs.clone(),
        });
        outs
    }

    /// The id of the value named `name`.
    pub fn value_id(&self, name: &str) -> Option<ValueId> {
        self.values.iter().position(|v| v.name == name)
    }

    /// Checks names are unique, every value has exactly one producer (input, constant or node
    /// output), and nodes are in topological order.
    pub fn validate(&self) -> Result<()> {
        let mut names = HashMap::new();
        for (i, v) in self.values.iter().enumerate() {
            if names.insert(v.name.as_str(), i).is_some() {
                return Err(graph_err(format!("value name {:?} used twice", v.name)));
            }
        }
        let mut defined = vec![false; self.values.len()];
        fn define(defined: &mut [bool], id: ValueId, what: &str) -> Result<()> {
            let slot = defined.get_mut(id).ok_or_else(|| {
                graph_err(format!(
                    "{what} refers to value #{id}, which does not exist"
                ))
            })?;
            if std::mem::replace(slot, true) {
                return Err(graph_err(format!("{what} redefines a value")));
            }
            Ok(())
        }
        for &i in &self.inputs {
            define(&mut defined, i, "graph input")?;
        }
        for &c in self.constants.keys() {
            define(&mut defined, c, "constant")?;
        }
        for n in &self.nodes {
            for i in n.inputs.iter().flatten() {
                if !defined.get(*i).copied().unwrap_or(false) {
                    let name = self.values.get(*i).map_or("?", |v| v.name.as_str());
                    return Err(graph_err(format!(
                        "node {} ({}) reads {name:?} before it is computed",
                        n.name,
                        n.op.name()
                    )));
                }
            }
            for &o in &n.outputs {
                define(&mut defined, o, &format!("node {}", n.name))?;
            }
        }
        for &o in &self.outputs {
            if !defined.get(o).copied().unwrap_or(false) {
                return Err(graph_err(format!("graph output #{o} is never computed")));
            }
        }
        Ok(())
    }

    /// The name of a value (for errors).
    pub fn name_of(&self, id: ValueId) -> &str {
        self.values.get(id).map_or("?", |v| v.name.as_str())
    }
}

impl PartialEq for Graph {
    /// Structural equality; constants compare by dtype, dims and bytes.
    fn eq(&self, other: &Graph) -> bool {
        let consts_eq = self.constants.len() == other.constants.len()
            && self
                .constants
                .iter()
                .zip(&other.constants)
                .all(|((a, x), (b, y))| {
                    a == b
                        && x.dtype() == y.dtype()
                        && x.dims() == y.dims()
                        && x.host_bytes() == y.host_bytes()
                });
        self.values == other.values
            && self.nodes == other.nodes
            && self.inputs == other.inputs
            && self.outputs == other.outputs
            && consts_eq
    }
}

/// An error about the graph's structure.
pub(crate) fn graph_err(reason: String) -> Error {
    Error::invalid("graph", reason)
}

/// An error raised by a node, naming it.
pub(crate) fn node_err(node: &Node, e: Error) -> Error {
    match e {
        Error::InvalidArgument { op, reason } => Error::InvalidArgument {
            op: format!("node {} ({op})", node.name),
            reason,
        },
        Error::ShapeMismatch { op, expected, got } => Error::ShapeMismatch {
            op: format!("node {} ({op})", node.name),
            expected,
            got,
        },
        Error::UnsupportedOp {
            op,
            backend,
            input_dtype,
        } => Error::UnsupportedOp {
            op: format!("node {} ({op})", node.name),
            backend,
            input_dtype,
        },
        Error::OutOfMemory {
            what,
            bytes,
            available,
        } => Error::OutOfMemory {
            what: format!("node {}: {what}", node.name),
            bytes,
            available,
        },
        other => other,
    }
}

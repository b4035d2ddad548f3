//! cyb-graph: the graph path. A model as a DAG of [`cyb_ops::Op`] nodes over named values with
//! symbolic dimensions, plus the few host-side nodes that need tensor *values* to know what to
//! compute (shape arithmetic, ONNX-style dynamic reshape/slice/expand), see [`HostOp`].
//!
//! What lives here: the text form (the `~~~graph` section of a `.model`, docs/graph-format.md),
//! shape and dtype inference, dead-node elimination, constant folding, the memory plan, and the
//! executor that runs nodes through [`cyb_backend::Dispatcher`] — the same dispatcher and
//! backends the curated model code uses.
//!
//! This crate must not know about file formats (ONNX import lives in cyb-format) or models.

mod exec;
mod fuse;
mod graph;
mod host_dft;
mod host_einsum;
mod host_grid;
mod host_linalg;
mod host_loss;
mod host_misc;
mod host_op;
mod host_quant;
mod host_random;
mod host_resize;
mod host_rnn;
mod host_run;
mod host_tfidf;
mod host_train;
mod infer;
mod passes;
mod plan;
mod specialize;
mod subgraph;
mod text;
mod text_value;

pub use exec::{ExecPlan, Executor, RunStats};
pub use fuse::fuse_for_backend;
pub use graph::{Dim, Graph, Node, NodeOp, Value, ValueId, ValueType};
pub use host_grid::{GridMode, GridPadding};
pub use host_op::{
    ConvTransposeSpec, HostOp, LossReduction, Optimizer, RandomDist, ResizeSpec, SoftmaxKind,
    TfIdfMode, TfIdfSpec, WindowKind,
};
pub use host_resize::{CoordMode, NearestMode, ResizeMode};
pub use host_rnn::{RnnActivation, RnnCell, RnnSpec};
pub use infer::infer_types;
pub use passes::{eliminate_dead_nodes, fold_constants, prefer_curated_ops, prepare};
pub use plan::{MemoryPlan, SlotAssignment};
pub use specialize::{bind_input, fix_input_dims, inline_constant_ifs};
pub use subgraph::{ScanSpec, SubGraph};
pub use text::{parse_graph, write_graph, INLINE_CONSTANT_LIMIT};

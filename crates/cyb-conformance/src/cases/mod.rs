//! Every op's conformance cases, one file per op family. To add an op: give it a family in
//! [`family`] (the match has no wildcard, so a new `Op` variant does not compile until it is
//! placed) and its cases in that family's file.

mod attention;
mod conv;
mod elementwise;
mod index;
mod layout;
mod matmul;
mod norm;
mod reduce;

use crate::Case;
use cyb_ops::Op;

/// Every case of every op family.
pub fn all() -> Vec<Case> {
    let mut v = Vec::new();
    v.extend(matmul::cases());
    v.extend(elementwise::cases());
    v.extend(norm::cases());
    v.extend(attention::cases());
    // Moving values is exact.
    v.extend(layout::cases().into_iter().map(|c| c.tol(0.0)));
    v.extend(index::cases());
    v.extend(reduce::cases());
    v.extend(conv::cases());
    v
}

/// The file under `cases/` that holds `op`'s cases.
pub fn family(op: &Op) -> &'static str {
    match op {
        Op::MatMul { .. } | Op::Linear { .. } | Op::MatMulInteger => "matmul",
        Op::Add
        | Op::Sub
        | Op::Mul
        | Op::Div
        | Op::Scale { .. }
        | Op::Silu
        | Op::Gelu { .. }
        | Op::Relu
        | Op::Tanh
        | Op::SwiGlu
        | Op::GeGlu { .. }
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::Unary { .. }
        | Op::Binary { .. }
        | Op::Where
        | Op::Cast { .. }
        | Op::QuantizeLinear { .. }
        | Op::DequantizeLinear { .. } => "elementwise",
        Op::RmsNorm { .. }
        | Op::LayerNorm { .. }
        | Op::GroupNorm { .. }
        | Op::BatchNorm { .. }
        | Op::LayerNormNd { .. }
        | Op::AddRmsNorm { .. }
        | Op::AddLayerNorm { .. } => "norm",
        Op::Rope { .. } | Op::Sdpa { .. } | Op::KvAppend { .. } => "attention",
        Op::Concat { .. }
        | Op::Split { .. }
        | Op::Reshape { .. }
        | Op::Permute { .. }
        | Op::Transpose { .. }
        | Op::Slice { .. }
        | Op::SliceNd { .. }
        | Op::Expand { .. }
        | Op::Tile { .. }
        | Op::Pad { .. }
        | Op::Trilu { .. } => "layout",
        Op::Embedding
        | Op::Gather { .. }
        | Op::GatherElements { .. }
        | Op::GatherNd { .. }
        | Op::ScatterElements { .. }
        | Op::ScatterNd { .. } => "index",
        Op::ArgMax { .. }
        | Op::TopK { .. }
        | Op::CumSum { .. }
        | Op::Reduce { .. }
        | Op::ArgReduce { .. } => "reduce",
        Op::Conv { .. } | Op::ConvTranspose { .. } | Op::Pool { .. } => "conv",
    }
}

/// The name of every op (`Op::name`), for the completeness check: each must have cases.
pub const EVERY_OP: &[&str] = &[
    "matmul",
    "linear",
    "matmul_integer",
    "add",
    "sub",
    "mul",
    "div",
    "scale",
    "silu",
    "gelu",
    "relu",
    "tanh",
    "swiglu",
    "geglu",
    "softmax",
    "log_softmax",
    "unary",
    "binary",
    "where",
    "cast",
    "quantize_linear",
    "dequantize_linear",
    "rms_norm",
    "layer_norm",
    "group_norm",
    "batch_norm",
    "layer_norm_nd",
    "add_rms_norm",
    "add_layer_norm",
    "rope",
    "sdpa",
    "kv_append",
    "concat",
    "split",
    "reshape",
    "permute",
    "transpose",
    "slice",
    "slice_nd",
    "expand",
    "tile",
    "pad",
    "trilu",
    "embedding",
    "gather",
    "gather_elements",
    "gather_nd",
    "scatter_elements",
    "scatter_nd",
    "argmax",
    "top_k",
    "cumsum",
    "reduce",
    "arg_reduce",
    "conv",
    "conv_transpose",
    "pool",
];

//! Nodes that need the *values* of some inputs (a target shape, slice bounds, a `k`) before
//! the computation is known. At run time they read those small inputs on the host, turn into
//! ordinary [`Op`]s and run them through the dispatcher; when the inputs are constants, constant
//! folding removes them before the graph runs. ONNX's dynamic-shape operators map onto these.

pub use crate::host_grid::{GridMode, GridPadding};
pub use crate::host_loss::LossReduction;
pub use crate::host_misc::WindowKind;
pub use crate::host_random::RandomDist;
pub use crate::host_resize::ResizeSpec;
pub use crate::host_rnn::RnnSpec;
pub use crate::host_tfidf::{TfIdfMode, TfIdfSpec};
pub use crate::host_train::Optimizer;
pub use crate::subgraph::{ScanSpec, SubGraph};
use cyb_backend::{Dispatcher, ExecContext};
use cyb_ops::{BinaryFn, Op, PadMode, ReduceFn};
use cyb_tensor::memory::filled_vec;
use cyb_tensor::{DType, Error, Result, Tensor};

/// A host-side node; inputs are by position as documented per variant, `?` marks optional ones.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum HostOp {
    /// `y = x` (ONNX Identity, inference-time Dropout; extra outputs are all-true masks).
    Identity,
    /// The dims of `x` as a 1-D I64 tensor, `dims[start..end]` (Python-style clamped bounds).
    Shape { start: i64, end: Option<i64> },
    /// The element count of `x` as an I64 scalar.
    Size,
    /// A tensor of dims `shape` (input, I64 1-D) filled with `value` (float dtypes) or
    /// `int_value` (integer and BOOL dtypes) as `dtype`.
    ConstantOfShape {
        #[serde(with = "cyb_ops::dtype_name")]
        dtype: DType,
        value: f32,
        int_value: i64,
    },
    /// `start, start+delta, ..` before `limit` (three scalar inputs); dtype of `start`.
    Range,
    /// `Reshape { dims }` with dims from input 1 (`0` copies the input dim unless `allowzero`).
    Reshape { allowzero: bool },
    /// `Expand` to the shape in input 1.
    Expand,
    /// `Tile` by the repeats in input 1.
    Tile,
    /// `SliceNd` with inputs `x, starts, ends, axes?, steps?`.
    Slice,
    /// Removes the size-1 dims `axes` (attribute, or input 1; all size-1 dims when absent).
    Squeeze { axes: Option<Vec<i64>> },
    /// Inserts size-1 dims at `axes` of the output (attribute, or input 1).
    Unsqueeze { axes: Option<Vec<i64>> },
    /// Reshapes to 2-D: `[prod(dims[..axis]), prod(dims[axis..])]`.
    Flatten { axis: i64 },
    /// `TopK` with `k` from input 1; values keep the input dtype.
    TopK { axis: i64, largest: bool },
    /// `Split` along `axis` into `sizes` (attribute or input 1) or `num_outputs` equal parts
    /// (the last one smaller when the dim does not divide).
    Split {
        axis: i64,
        sizes: Option<Vec<i64>>,
        num_outputs: usize,
    },
    /// `CumSum` with the axis from input 1; the output keeps the input dtype.
    CumSum { exclusive: bool, reverse: bool },
    /// `Pad` with `pads` from the attribute or input 1, constant value from `value` or input
    /// 2, optional `axes` from input 3.
    Pad {
        mode: PadMode,
        pads: Option<Vec<i64>>,
        value: f32,
    },
    /// ONNX MatMul: numpy matmul, 1-D operands promoted and the added dim removed; output in the
    /// dtype of `a`.
    MatMul,
    /// ONNX MatMul by a matrix stored transposed, `b` `[n, k]` (what load makes of a MatMul by
    /// a constant matrix when the rank of `a` is not known before run time): a 1-D `a` is one
    /// row, the added dim removed; output in the dtype of `a`.
    MatMulTransposed,
    /// `y = alpha · op(a) · op(b) + beta · c` with `op` transposing when asked; `c?` broadcasts.
    Gemm {
        alpha: f32,
        beta: f32,
        trans_a: bool,
        trans_b: bool,
    },
    /// Softmax, LogSoftmax or Hardmax along `axis`; with `coerce_2d` (ONNX opset < 13) the input
    /// is first flattened to `[prod(..axis), prod(axis..)]` and the op runs on its last dim.
    Softmax {
        axis: i64,
        coerce_2d: bool,
        kind: SoftmaxKind,
    },
    /// `clamp(x, min?, max?)` with scalar bound inputs (absent: unbounded).
    Clip,
    /// `Reduce` with axes from the attribute or input 1; with `noop_with_empty_axes` an empty
    /// axes list is the identity instead of "all axes".
    Reduce {
        f: ReduceFn,
        keepdims: bool,
        axes: Option<Vec<i64>>,
        noop_with_empty_axes: bool,
    },
    /// `Cast` to the dtype of input 1.
    CastLike,
    /// Folds `f` over all inputs (ONNX variadic Sum/Max/Min); `mean` divides by their count.
    Variadic { f: BinaryFn, mean: bool },
    /// Mean or max over all spatial dims (2..), keeping them as 1.
    GlobalPool { max: bool },
    /// Instance normalisation: `GroupNorm` with one group per channel (`x, scale, b`).
    InstanceNorm { eps: f32 },
    /// Rearranges `[n, c, h, w]` blocks of depth into space (`crd`: column-row-depth order).
    DepthToSpace { blocksize: usize, crd: bool },
    /// The inverse: `[n, c, h, w]` → `[n, c·b², h/b, w/b]`.
    SpaceToDepth { blocksize: usize },
    /// Indices of non-zero elements, `[rank, count]` I64, in row-major order.
    NonZero,
    /// Negative log-likelihood loss: inputs `log_probs [n, c, d..]`, `target [n, d..]`,
    /// `weight? [c]`.
    NllLoss {
        reduction: LossReduction,
        ignore_index: Option<i64>,
    },
    /// Softmax cross-entropy loss: inputs `scores [n, c, d..]`, `labels`, `weight?`; outputs
    /// the loss and (optionally) the log probabilities.
    SoftmaxCrossEntropy {
        reduction: LossReduction,
        ignore_index: Option<i64>,
    },
    /// ONNX `Resize` / `Upsample` (see [`ResizeSpec`]): inputs `x, roi?, scales?, sizes?`.
    Resize(ResizeSpec),
    /// ONNX DynamicQuantizeLinear: `x` → `y` U8, `y_scale`, `y_zero_point`.
    DynamicQuantizeLinear,
    /// ONNX ConvInteger with the given `Op::Conv`: inputs `x, w, x_zero?, w_zero?` → I32.
    ConvInteger { conv: Op },
    /// ONNX QLinearConv: `x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias?`.
    QLinearConv { conv: Op },
    /// ONNX QLinearMatMul: `a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero`.
    QLinearMatMul,
    /// Hann, Hamming or Blackman window of the length in input 0 (`periodic` or symmetric).
    Window {
        kind: WindowKind,
        periodic: bool,
        #[serde(with = "cyb_ops::dtype_name")]
        dtype: DType,
    },
    /// Elements (or slices along `axis`) where the BOOL input 1 is true.
    Compress { axis: Option<i64> },
    /// An identity-like matrix shaped like input 0 with ones on diagonal `k`.
    EyeLike { k: i64, dtype: Option<String> },
    /// ONNX Einsum with its equation (see `host_einsum`).
    Einsum { equation: String },
    /// An optimizer step of ONNX's training domain (see `host_train`).
    Optimizer(Optimizer),
    /// ONNX TfIdfVectorizer over integer tokens (see `host_tfidf`).
    TfIdf(TfIdfSpec),
    /// ONNX MelWeightMatrix with its output dtype (see `host_dft`).
    MelWeightMatrix {
        #[serde(with = "cyb_ops::dtype_name")]
        dtype: DType,
    },
    /// ONNX RandomNormalLike / RandomUniformLike: samples shaped like input 0 from a fixed,
    /// seeded generator (see `host_random`).
    RandomLike {
        dist: RandomDist,
        seed: Option<f32>,
        dtype: Option<String>,
    },
    /// Local response normalisation across channels.
    Lrn {
        alpha: f32,
        beta: f32,
        bias: f32,
        size: usize,
    },
    /// `(x - mean) / (std + 1e-9)` over `axes`.
    MeanVarianceNormalization { axes: Vec<i64> },
    /// Reverses the first `lens[b]` steps along `time_axis` for each batch `b`.
    ReverseSequence { batch_axis: i64, time_axis: i64 },
    /// Determinant of the last two (square) dims.
    Det,
    /// Greedy non-maximum suppression: `[selected, 3]` I64 of (batch, class, box).
    NonMaxSuppression { center_point_box: bool },
    /// ConvTranspose with pads from `output_shape` or SAME auto-padding.
    ConvTransposeSized(ConvTransposeSpec),
    /// ONNX RNN/GRU/LSTM: inputs `x, w, r, b?, sequence_lens?, initial_h?, initial_c?, p?`;
    /// outputs `y, y_h` (and `y_c` for LSTM).
    Rnn(RnnSpec),
    /// ONNX GridSample (4-D): inputs `x, grid`.
    GridSample {
        mode: GridMode,
        padding: GridPadding,
        align_corners: bool,
    },
    /// ONNX If: inputs `cond, captured..`; each branch takes the captured values as its inputs.
    If {
        then_branch: SubGraph,
        else_branch: SubGraph,
    },
    /// ONNX Loop: inputs `max_trips?, cond?, carried.., captured..`; the body takes
    /// `iteration, cond, carried.., captured..` and returns `cond, carried.., scans..`.
    Loop { body: SubGraph, n_carried: usize },
    /// ONNX Scan (opset ≥ 9): inputs `states.., scan inputs.., captured..`.
    Scan { body: SubGraph, spec: ScanSpec },
    /// ONNX Dropout with `ratio?` and `training_mode?` inputs (identity unless training).
    Dropout,
    /// ONNX Unique: outputs `y, indices, inverse_indices, counts`.
    Unique { axis: Option<i64>, sorted: bool },
    /// MaxPool (`pool`, an `Op::Pool` with `PoolKind::Max`) with its `Indices` output.
    /// `column_major`: indices count the spatial dims first-fastest (ONNX `storage_order = 1`).
    MaxPoolWithIndices { pool: Op, column_major: bool },
    /// ONNX MaxUnpool: inputs `x, indices, output_shape?`.
    MaxUnpool {
        kernel: Vec<usize>,
        strides: Vec<usize>,
        pads: Vec<usize>,
    },
    /// ONNX DFT along `axis` of `[.., 1 | 2]` signals; input 1 is an optional `dft_length`.
    Dft {
        axis: i64,
        inverse: bool,
        onesided: bool,
    },
    /// ONNX STFT: inputs `signal, frame_step, window?, frame_length?`.
    Stft { onesided: bool },
    /// Batch normalisation with the batch's own statistics (ONNX `training_mode = 1`): inputs
    /// `x, scale, b, mean, var`; outputs `y`, and the running mean and variance updated as
    /// `running · momentum + batch · (1 - momentum)` (biased batch variance).
    BatchNormTraining { eps: f32, momentum: f32 },
    /// `Trilu` with the diagonal offset `k` from optional input 1 (default 0).
    Trilu { upper: bool },
    /// One-hot encoding along `axis`: inputs `indices, depth, values[off, on]`.
    OneHot { axis: i64 },
}

/// Parameters of [`HostOp::ConvTransposeSized`] (empty lists: defaults).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConvTransposeSpec {
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub output_padding: Vec<usize>,
    pub output_shape: Option<Vec<i64>>,
    pub same_lower: bool,
    pub group: usize,
}

/// Which normalised exponential [`HostOp::Softmax`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SoftmaxKind {
    Softmax,
    LogSoftmax,
    /// 1 at the (first) largest value, 0 elsewhere.
    Hardmax,
}

/// Runs ops for a host node.
pub(crate) struct HostRun<'a> {
    pub d: &'a Dispatcher,
    pub ctx: &'a mut ExecContext,
    /// The plans of the node's subgraphs (in [`HostOp::bodies`] order), when an executor runs
    /// it; elsewhere (folding, type inference) a body is planned for its run.
    pub bodies: &'a [crate::exec::ExecPlan],
}

impl HostRun<'_> {
    pub(crate) fn op(&mut self, op: &Op, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        crate::exec::run_checked(self.d, op, inputs, self.ctx)
    }

    pub(crate) fn one(&mut self, op: &Op, inputs: &[Tensor]) -> Result<Tensor> {
        self.op(op, inputs)?
            .into_iter()
            .next()
            .ok_or_else(|| Error::invalid(op.name(), "returned no output"))
    }

    pub(crate) fn ints(&self, t: &Tensor) -> Result<Vec<i64>> {
        self.d.to_host(t)?.to_i64_vec()
    }

    /// `x` reshaped (a view of the same storage on the host; through the dispatcher otherwise).
    pub(crate) fn reshape(&mut self, x: &Tensor, dims: &[usize]) -> Result<Tensor> {
        let dims = dims.iter().map(|&d| d as isize).collect();
        self.one(&Op::Reshape { dims }, std::slice::from_ref(x))
    }
}

impl HostOp {
    /// The subgraphs this op holds, in order (`If`: then, else; `Loop`, `Scan`: the body).
    pub fn bodies(&self) -> Vec<&crate::Graph> {
        match self {
            HostOp::If {
                then_branch,
                else_branch,
            } => vec![&then_branch.0, &else_branch.0],
            HostOp::Loop { body, .. } | HostOp::Scan { body, .. } => vec![&body.0],
            _ => Vec::new(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            HostOp::Identity => "identity",
            HostOp::Shape { .. } => "shape",
            HostOp::Size => "size",
            HostOp::ConstantOfShape { .. } => "constant_of_shape",
            HostOp::Range => "range",
            HostOp::Reshape { .. } => "reshape",
            HostOp::Expand => "expand",
            HostOp::Tile => "tile",
            HostOp::Slice => "slice",
            HostOp::Squeeze { .. } => "squeeze",
            HostOp::Unsqueeze { .. } => "unsqueeze",
            HostOp::Flatten { .. } => "flatten",
            HostOp::TopK { .. } => "top_k",
            HostOp::Split { .. } => "split",
            HostOp::CumSum { .. } => "cumsum",
            HostOp::Pad { .. } => "pad",
            HostOp::MatMul => "matmul",
            HostOp::MatMulTransposed => "matmul_transposed",
            HostOp::Gemm { .. } => "gemm",
            HostOp::Softmax { .. } => "softmax",
            HostOp::Clip => "clip",
            HostOp::Reduce { .. } => "reduce",
            HostOp::CastLike => "cast_like",
            HostOp::Variadic { .. } => "variadic",
            HostOp::GlobalPool { .. } => "global_pool",
            HostOp::InstanceNorm { .. } => "instance_norm",
            HostOp::DepthToSpace { .. } => "depth_to_space",
            HostOp::SpaceToDepth { .. } => "space_to_depth",
            HostOp::NonZero => "non_zero",
            HostOp::OneHot { .. } => "one_hot",
            HostOp::Trilu { .. } => "trilu",
            HostOp::NllLoss { .. } => "nll_loss",
            HostOp::SoftmaxCrossEntropy { .. } => "softmax_cross_entropy",
            HostOp::Resize(_) => "resize",
            HostOp::Rnn(_) => "rnn",
            HostOp::BatchNormTraining { .. } => "batch_norm_training",
            HostOp::Dft { .. } => "dft",
            HostOp::Stft { .. } => "stft",
            HostOp::MaxPoolWithIndices { .. } => "max_pool_with_indices",
            HostOp::MaxUnpool { .. } => "max_unpool",
            HostOp::Dropout => "dropout",
            HostOp::Unique { .. } => "unique",
            HostOp::If { .. } => "if",
            HostOp::Loop { .. } => "loop",
            HostOp::Scan { .. } => "scan",
            HostOp::GridSample { .. } => "grid_sample",
            HostOp::Window { .. } => "window",
            HostOp::Compress { .. } => "compress",
            HostOp::EyeLike { .. } => "eye_like",
            HostOp::Einsum { .. } => "einsum",
            HostOp::Optimizer(_) => "optimizer",
            HostOp::TfIdf(_) => "tfidf_vectorizer",
            HostOp::MelWeightMatrix { .. } => "mel_weight_matrix",
            HostOp::RandomLike { .. } => "random_like",
            HostOp::Lrn { .. } => "lrn",
            HostOp::MeanVarianceNormalization { .. } => "mean_variance_normalization",
            HostOp::ReverseSequence { .. } => "reverse_sequence",
            HostOp::Det => "det",
            HostOp::NonMaxSuppression { .. } => "non_max_suppression",
            HostOp::ConvTransposeSized(_) => "conv_transpose",
            HostOp::DynamicQuantizeLinear => "dynamic_quantize_linear",
            HostOp::ConvInteger { .. } => "conv_integer",
            HostOp::QLinearConv { .. } => "qlinear_conv",
            HostOp::QLinearMatMul => "qlinear_matmul",
        }
    }

    /// True when only the input's dims (not its values) matter, so it folds for known shapes.
    pub fn needs_only_shape(&self) -> bool {
        matches!(self, HostOp::Shape { .. } | HostOp::Size)
    }

    /// How many leading inputs matter to the output *dims* by their own dims alone (their
    /// values never change the output dims, and the output is no larger than the other
    /// inputs' values say); 0 when that is not known of the node. Type inference may run such a
    /// node on zeros in place of those inputs when all the others are constants.
    pub fn shape_only_inputs(&self) -> usize {
        match self {
            HostOp::Reshape { .. }
            | HostOp::Slice
            | HostOp::Squeeze { .. }
            | HostOp::Unsqueeze { .. }
            | HostOp::Flatten { .. }
            | HostOp::Pad { .. }
            | HostOp::Split { .. }
            | HostOp::Reduce { .. }
            | HostOp::Clip
            | HostOp::CumSum { .. }
            | HostOp::TopK { .. } => 1,
            // Sequence, weights, biases, lengths and initial states: dims from dims alone.
            HostOp::Rnn(_) => usize::MAX,
            _ => 0,
        }
    }
}

/// Input `i`, which must be present.
pub(crate) fn req<'a>(op: &str, inputs: &'a [Option<Tensor>], i: usize) -> Result<&'a Tensor> {
    inputs
        .get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| Error::invalid(op, format!("input {i} is required")))
}

/// Resolves a possibly negative axis against `rank`.
pub(crate) fn axis(op: &str, a: i64, rank: usize) -> Result<usize> {
    cyb_ops::resolve_axis(op, rank, a as isize)
}

pub(crate) fn to_usize(op: &str, v: &[i64]) -> Result<Vec<usize>> {
    v.iter()
        .map(|&x| usize::try_from(x).map_err(|_| Error::invalid(op, format!("negative size {x}"))))
        .collect()
}

/// `x` converted to `dtype` (no-op when it already is).
pub(crate) fn cast_to(r: &mut HostRun, x: Tensor, dtype: DType) -> Result<Tensor> {
    if x.dtype() == dtype {
        return Ok(x);
    }
    r.one(&Op::Cast { to: dtype }, &[x])
}

/// A tensor of `dims` filled with `value` as `dtype` (integer dtypes take `value as i64`).
pub(crate) fn filled(dims: &[usize], dtype: DType, value: f64) -> Result<Tensor> {
    if dtype == DType::F64 {
        return Tensor::from_f64_as(dims, &filled_vec("fill", dims, value)?, dtype);
    }
    filled_with(dims, dtype, value as f32, value as i64)
}

/// A tensor of `dims` filled with `f` (float dtypes) or `i` (integer and BOOL dtypes).
pub(crate) fn filled_with(dims: &[usize], dtype: DType, f: f32, i: i64) -> Result<Tensor> {
    if dtype.is_quantized() {
        return Err(Error::invalid(
            "fill",
            format!("{dtype} is not a scalar dtype"),
        ));
    }
    if dtype.is_float() {
        return Tensor::from_f32_as(dims, &filled_vec("fill", dims, f)?, dtype);
    }
    Tensor::from_i64_as(dims, &filled_vec("fill", dims, i)?, dtype)
}

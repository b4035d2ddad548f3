//! The `Op` vocabulary: every computation cyb-llm performs, curated or graph, is one of these.
//!
//! Each variant's doc comment is its specification: inputs by position, shapes, dtypes, the
//! exact math and the edge cases. Backends implement ops to this text; the CPU reference in
//! `reference/` is the executable form and the oracle every backend is tested against.
//!
//! Conventions for all ops:
//! - Shapes are row-major, last dimension contiguous. "`[.., m, k]`" means any number of leading
//!   dimensions.
//! - "float" inputs are F32, F16 or BF16; the reference computes in f32 and returns F32.
//! - Reductions accumulate in f32 in index order, so results do not depend on thread count.
//! - Integer index inputs are I32 or I64; index outputs are I64.

use crate::{BinaryFn, PadMode, PadSpec, PoolKind, ReduceFn, ScatterReduction, UnaryFn};
use cyb_tensor::DType;

/// Pairing of the rotated dimensions in rotary position embeddings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RopeLayout {
    /// GPT-J / llama.cpp "normal": rotates adjacent pairs `(x[2i], x[2i+1])`.
    Normal,
    /// GPT-NeoX / Hugging Face `rotate_half`: rotates `(x[i], x[i + d/2])`.
    Neox,
}

/// How rotary frequencies are stretched for contexts longer than training.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum RopeScaling {
    /// `theta_i = pos * base^(-2i/d)`.
    None,
    /// Position interpolation: `theta_i = (pos / factor) * base^(-2i/d)`.
    Linear { factor: f32 },
    /// Llama 3.1: with `inv_i = base^(-2i/d)`, wavelength `w = 2π / inv_i`,
    /// `low_w = orig_max_pos / low_freq_factor`, `high_w = orig_max_pos / high_freq_factor`:
    /// `w < high_w` keeps `inv_i`; `w > low_w` uses `inv_i / factor`; otherwise, with
    /// `s = (orig_max_pos / w - low_freq_factor) / (high_freq_factor - low_freq_factor)`,
    /// `(1 - s) * inv_i / factor + s * inv_i`.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position: usize,
    },
    /// YaRN (as in Hugging Face `_compute_yarn_parameters`): per-dimension blend of
    /// interpolated (`inv_i / factor`) and extrapolated (`inv_i`) frequencies with a linear ramp
    /// between the dimensions whose rotation counts over `original_max_position` are
    /// `beta_fast` and `beta_slow`: `inv = interp * (1 - extrap_w) + extrap * extrap_w`,
    /// `extrap_w = 1 - ramp`. Precisely, with `d = rot_dims` and
    /// `dim_of(r) = d · ln(original_max_position / (2π r)) / (2 ln base)`:
    /// `low = max(floor(dim_of(beta_fast)), 0)`, `high = min(ceil(dim_of(beta_slow)), d - 1)`
    /// (Hugging Face's default `truncate = true`; `high += 0.001` if equal), and for pair `i`
    /// `ramp_i = clamp((i - low) / (high - low), 0, 1)`. cos and sin are multiplied by
    /// `attn_factor` (when `None`, `0.1 * ln(factor) + 1` for factor > 1, else 1).
    Yarn {
        factor: f32,
        original_max_position: usize,
        beta_fast: f32,
        beta_slow: f32,
        attn_factor: Option<f32>,
    },
}

/// Where the heads sit in [`Op::Sdpa`]'s inputs and output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SdpaLayout {
    /// `[.., heads, seq, d]`: each head's rows contiguous.
    #[default]
    HeadMajor,
    /// `[.., seq, heads, d]`: each position's heads side by side, as a projection
    /// `[.., seq, heads · d]` comes out (a reshape, no permute, on either side).
    TokenMajor,
}

/// GELU variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GeluApprox {
    /// `0.5 x (1 + erf(x / √2))`.
    Erf,
    /// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
    Tanh,
}

/// The activation that ends a fused [`Op::Linear`] or [`Op::Conv`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LinearAct {
    #[default]
    None,
    Relu,
    Silu,
    Tanh,
    Gelu(GeluApprox),
}

impl LinearAct {
    /// The activation op this stands for (`None` for no activation).
    pub fn op(self) -> Option<Op> {
        match self {
            LinearAct::None => None,
            LinearAct::Relu => Some(Op::Relu),
            LinearAct::Silu => Some(Op::Silu),
            LinearAct::Tanh => Some(Op::Tanh),
            LinearAct::Gelu(approx) => Some(Op::Gelu { approx }),
        }
    }

    /// The activation `op` computes, when it is one a `Linear` can end with.
    pub fn from_op(op: &Op) -> Option<LinearAct> {
        match op {
            Op::Relu => Some(LinearAct::Relu),
            Op::Silu => Some(LinearAct::Silu),
            Op::Tanh => Some(LinearAct::Tanh),
            Op::Gelu { approx } => Some(LinearAct::Gelu(*approx)),
            _ => None,
        }
    }
}

/// One operation. Inputs are passed by position as documented per variant.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Op {
    /// Matrix product, `y = a · b` or `y = a · bᵀ`.
    ///
    /// Inputs: `a` float `[.., m, k]` (rank ≥ 2); `b` `[.., k, n]`, or `[.., n, k]` when `rhs_transposed`
    /// (the layout of Linear weights and of GGUF tensors: one row per output feature).
    /// Leading dimensions broadcast numpy-style; a rank-2 `b` is shared by every batch.
    /// `b` may be any float dtype; with `rhs_transposed` it may also be any block format (its
    /// rows are whole blocks along `k`).
    /// Output: F32 `[.., m, n]`, `y[.., i, j] = Σ_p a[.., i, p] · b'[.., p, j]`, summed in f32 in
    /// order of `p` (blocks: each block's products summed in order into a partial sum, then the
    /// partial sums added in block order).
    MatMul { rhs_transposed: bool },
    /// Elementwise `a + b` with numpy broadcasting. Float inputs, F32 output.
    Add,
    /// Elementwise `a - b` with numpy broadcasting.
    Sub,
    /// Elementwise `a · b` with numpy broadcasting.
    Mul,
    /// Elementwise `a / b` with numpy broadcasting (IEEE: `x/0 = ±inf`, `0/0 = NaN`).
    Div,
    /// `y = factor · x`.
    Scale { factor: f32 },
    /// RMS normalisation over the last dimension `d`:
    /// `y = x / sqrt(mean(x²) + eps) · (w + weight_offset)`.
    /// Inputs: `x` float `[.., d]`, optional float `w` `[d]` (absent: scale 1). `weight_offset` is 0
    /// for Llama and 1 for Gemma's `(1 + w)`.
    RmsNorm { eps: f32, weight_offset: f32 },
    /// Layer normalisation over the last dimension `d`:
    /// `y = (x - mean) / sqrt(var + eps) · w + b`, `var` the biased variance (÷ d).
    /// Inputs: `x` `[.., d]`, optional `w` `[d]`, optional `b` `[d]`.
    LayerNorm { eps: f32 },
    /// Group normalisation: `x` `[n, c, *]` with `c` divisible by `groups`; each of the
    /// `groups` groups of `c/groups` channels (over all spatial positions) is normalised with
    /// its own mean and biased variance, then `y = x̂ · w[c] + b[c]`.
    /// Inputs: `x`, optional `w` `[c]`, optional `b` `[c]`.
    GroupNorm { groups: usize, eps: f32 },
    /// Rotary position embedding.
    ///
    /// Inputs: `x` float `[.., seq, heads, head_dim]`, `positions` I32/I64 `[seq]` (shared by
    /// every leading index), optional float `freq_factors` `[rot_dims/2]`. The first `rot_dims`
    /// (even, > 0, ≤ head_dim) dimensions of each head are rotated, the rest
    /// pass through. For pair `i < rot_dims/2` with `theta = pos · inv_freq_i`
    /// (`inv_freq_i = base^(-2i/rot_dims)`, adjusted by `scaling`, then divided by
    /// `freq_factors[i]` when given — llama.cpp's `rope_freqs` tensor, which is how GGUF files
    /// carry Llama 3.1 scaling):
    /// `(x0, x1) → (x0 cos θ - x1 sin θ, x0 sin θ + x1 cos θ)`, where the pair is
    /// `(x[2i], x[2i+1])` for `Normal` and `(x[i], x[i + rot_dims/2])` for `Neox`.
    /// Output: F32, same shape.
    Rope {
        layout: RopeLayout,
        rot_dims: usize,
        base: f32,
        scaling: RopeScaling,
    },
    /// Scaled dot-product attention.
    ///
    /// Inputs: `q` float `[.., hq, lq, d]`, `k` `[.., hkv, lk, d]`, `v` `[.., hkv, lk, dv]` (one
    /// rank ≥ 3 and identical leading dimensions; they do not broadcast),
    /// optional additive `mask` float broadcastable to `[.., hq, lq, lk]`. `hq` is a multiple
    /// of `hkv` (grouped-query attention: query head `h` uses kv head `h / (hq/hkv)`).
    /// Query row `i` sits at position `lk - lq + i` (the KV cache holds the earlier tokens).
    /// `s = scale · q·kᵀ`; if `softcap` is `Some(c)`: `s = c · tanh(s / c)`; if
    /// `alibi_max_bias` is `Some(m)`: `s += slope_h · (j - pos_i)` with ALiBi slopes for `hq`
    /// heads (`slope_h = 2^(-m (h+1) / n)` for the `n` = largest power of two ≤ hq heads, the
    /// rest interleaved as in ALiBi: `slope_h = 2^(-m (2(h-n)+1) / (2n))` for `h ≥ n`); then
    /// `+ mask`; then with `causal`, `j > pos_i` is excluded; with `sliding_window = Some(w)`,
    /// `j ≤ pos_i - w` is excluded (with or without `causal`). A score of `-inf` (from the mask)
    /// excludes its key too. Softmax over the remaining `j` (a row with every key excluded gives
    /// zeros, where PyTorch would give NaN), then `y = p · v`.
    /// Output: F32 `[.., hq, lq, dv]`.
    ///
    /// With `layout` `TokenMajor` the head and sequence axes of `q`, `k`, `v` and the output
    /// trade places (`q` `[.., lq, hq, d]`, output `[.., lq, hq, dv]`); the mask still
    /// broadcasts to the scores `[.., hq, lq, lk]`.
    Sdpa {
        #[serde(default)]
        layout: SdpaLayout,
        scale: f32,
        causal: bool,
        sliding_window: Option<usize>,
        softcap: Option<f32>,
        alibi_max_bias: Option<f32>,
    },
    /// `y_i = exp(x_i - max x) / Σ_j exp(x_j - max x)` along `axis`. A row of all `-inf`
    /// gives NaN as in PyTorch.
    Softmax { axis: isize },
    /// `y = x · sigmoid(x)`.
    Silu,
    /// GELU, erf or tanh form.
    Gelu { approx: GeluApprox },
    /// `y = max(x, 0)`.
    Relu,
    /// `y = tanh(x)` (with `Scale`, the logit softcap `c · tanh(x / c)`).
    Tanh,
    /// `y = silu(gate) · up`. Inputs: `gate` and `up` of one shape; or one input `[.., 2n]`
    /// whose first half is `gate` and second half `up`. Output `[.., n]`.
    SwiGlu,
    /// `y = gelu(gate) · up`, same input forms as `SwiGlu`.
    GeGlu { approx: GeluApprox },
    /// Row lookup. Inputs: `table` `[vocab, dim]` of any dtype (block formats dequantized per
    /// row), `ids` I32/I64 of any shape. Output F32 `[ids.., dim]`. An id outside
    /// `0..vocab` is an error.
    Embedding,
    /// Joins inputs along `axis`; all other dimensions and the dtype must match. Output keeps
    /// the dtype (scalar dtypes only). Takes one or more inputs.
    Concat { axis: isize },
    /// Splits one input along `axis` into pieces of the given sizes (summing to that
    /// dimension). One output per size, dtype kept (scalar dtypes only).
    Split { axis: isize, sizes: Vec<usize> },
    /// Same data, new dimensions; at most one `-1` is inferred. Element count must match. Any
    /// dtype; for block formats the new last dimension must still be whole blocks.
    Reshape { dims: Vec<isize> },
    /// `y.dim[i] = x.dim[perm[i]]`; `perm` is a permutation of `0..rank`. Scalar dtypes.
    Permute { perm: Vec<usize> },
    /// Swaps two axes (negative axes count from the end). Scalar dtypes.
    Transpose { a: isize, b: isize },
    /// Elements `start, start+step, ..` before `end` along `axis`. `start`/`end` may be
    /// negative (counted from the end) and are clamped to the dimension as in Python;
    /// `step ≥ 1`. Scalar dtypes.
    Slice {
        axis: isize,
        start: isize,
        end: isize,
        step: usize,
    },
    /// Index of the largest value along `axis` (first one on ties; NaN counts as largest).
    /// Output I64 with that axis removed. Input float or integer (read as f32, like `TopK`);
    /// the axis must not be empty.
    ArgMax { axis: isize },
    /// The `k` largest (or smallest) values along `axis` in sorted order (ties: lower index
    /// first; NaN counts as largest). `k ≤` the axis length. Outputs: values F32 and indices
    /// I64, both with that dimension `k`.
    TopK {
        k: usize,
        axis: isize,
        largest: bool,
    },
    /// Running sum along `axis`: `y_i = Σ_{j ≤ i} x_j` (`exclusive`: `j < i`; `reverse`: sums
    /// from the end). F64 and integer inputs keep their dtype (exact integer sums); other
    /// float inputs give F32.
    CumSum {
        axis: isize,
        exclusive: bool,
        reverse: bool,
    },
    /// Converts to `to` (floats round to nearest even; float → integer truncates toward zero
    /// and saturates, NaN → 0; integer → integer saturates; integer → float rounds to nearest
    /// even from the exact value; any → BOOL is `x != 0`; block formats dequantize, or quantize
    /// with the reference quantizer).
    Cast {
        #[serde(with = "crate::op_params::dtype_name")]
        to: DType,
    },
    // Graph-level ops (ONNX-style). They keep the input dtype unless documented otherwise.
    /// Elementwise `y = f(x)` (see [`UnaryFn`]). Float inputs keep their dtype (computed in
    /// f32); integer inputs are allowed for `Abs`, `Neg` and `Sign`; `Not` takes BOOL; `IsNaN`
    /// and `IsInf` return BOOL.
    Unary { f: UnaryFn },
    /// Elementwise `y = f(a, b)` with numpy broadcasting (see [`BinaryFn`]). Both inputs have
    /// one dtype (except `Pow`, whose exponent may be any numeric dtype); the output keeps it,
    /// except comparisons, which return BOOL. Floats are computed in f32, integers in i64 (then
    /// wrapped to the dtype).
    Binary { f: BinaryFn },
    /// `y = cond ? a : b`, all three broadcast numpy-style. Inputs: `cond` BOOL, `a` and `b` of
    /// one scalar dtype, which the output keeps.
    Where,
    /// Reduction over `axes` (all axes when empty; negative axes count from the end; each at
    /// most once), dropping them unless `keepdims`. Output keeps the dtype (scalar dtypes).
    /// Reducing an empty axis gives the identity (0 for sums, 1 for `Prod`, `-inf`/`+inf` for
    /// `Max`/`Min`, NaN for `Mean`).
    Reduce {
        f: ReduceFn,
        axes: Vec<isize>,
        keepdims: bool,
    },
    /// Index of the largest (`max`) or smallest value along `axis`; ties give the first index,
    /// or the last with `select_last`. NaN wins. Output I64, the axis kept as 1 with `keepdims`,
    /// removed otherwise.
    ArgReduce {
        axis: isize,
        keepdims: bool,
        max: bool,
        select_last: bool,
    },
    /// `y[i.., j.., k..] = x[i.., idx[j..], k..]` along `axis`. Inputs: `x` any scalar dtype,
    /// `idx` I32/I64 of any shape (negative indices count from the end; out of range is an
    /// error). Output `x.dims[..axis] ++ idx.dims ++ x.dims[axis+1..]`, dtype kept.
    Gather { axis: isize },
    /// `y[p] = x[p with p[axis] replaced by idx[p]]`: inputs `x` and `idx` (I32/I64) of one
    /// rank, `idx.dims[d] ≤ x.dims[d]` for `d ≠ axis`. Output has `idx`'s dims, `x`'s dtype.
    GatherElements { axis: isize },
    /// Broadcasts `x` and a shape `dims` against each other numpy-style; the output has the
    /// broadcast dims and `x`'s values. Scalar dtypes.
    Expand { dims: Vec<usize> },
    /// Repeats `x` `repeats[d]` times along each dimension `d` (one entry per dimension).
    Tile { repeats: Vec<usize> },
    /// Multi-axis slice with Python semantics and steps of either sign (non-zero): for each
    /// `(start, end, axis, step)` the axis keeps `start, start+step, ..` strictly before `end`;
    /// negative start/end count from the end, then are clamped as in numpy (`[0, len]` for
    /// positive steps, `[-1, len-1]` for negative). The four lists have one length; axes appear
    /// at most once. Scalar dtypes.
    SliceNd {
        starts: Vec<isize>,
        ends: Vec<isize>,
        axes: Vec<isize>,
        steps: Vec<isize>,
    },
    /// Pads (or, with negative values, crops) each dimension: `pads = [begin_0.., end_0..]`,
    /// two entries per dimension. Scalar dtypes.
    Pad { pads: Vec<isize>, mode: PadMode },
    /// N-d cross-correlation (the deep-learning "convolution"). Inputs: `x` float
    /// `[n, c, d_1..d_k]`, `w` `[m, c/group, k_1..k_k]`, optional `b` `[m]`. For each spatial
    /// dim, `out = floor((d + pad_begin + pad_end - dilation·(k-1) - 1) / stride) + 1`;
    /// `y[n, o, p] = b[o] + Σ_{ci, q} x[n, g·c/group + ci, p·stride + q·dilation - pad_begin] ·
    /// w[o, ci, q]` with `g = o / (m/group)`, zero outside the input, summed in order of
    /// `(ci, q)`. One stride and dilation per spatial dim; empty `strides`/`dilations` mean 1 and
    /// an empty `PadSpec::Explicit` means no padding. `act` (the fusion pass sets it) is applied
    /// to every output value after the bias, as its own op would. Output F32.
    Conv {
        strides: Vec<usize>,
        dilations: Vec<usize>,
        pads: PadSpec,
        group: usize,
        #[serde(default)]
        act: LinearAct,
    },
    /// Sliding-window pooling over the spatial dims of `x` float `[n, c, d_1..d_k]`, one
    /// `kernel`, stride and dilation per spatial dim; the output size is as for `Conv`, or
    /// rounded up with `ceil_mode` (dropping a last window that would start in the end padding).
    /// Output F32.
    Pool {
        kind: PoolKind,
        kernel: Vec<usize>,
        strides: Vec<usize>,
        dilations: Vec<usize>,
        pads: PadSpec,
        ceil_mode: bool,
    },
    /// `y = x - max x - ln Σ exp(x - max x)` along `axis`. Float input, F32 output.
    LogSoftmax { axis: isize },
    /// Inference batch normalisation over the channel dim 1 of `x` `[n, c, ..]`:
    /// `y = (x - mean[c]) / sqrt(var[c] + eps) · scale[c] + b[c]`. Inputs: `x`, `scale`, `b`,
    /// `mean`, `var` (floats). Output F32.
    BatchNorm { eps: f32 },
    /// Layer normalisation over all dims from `axis` on: `y = (x - μ) / sqrt(σ² + eps) · w + b`
    /// (biased variance) with `w` (and optional `b`) broadcast onto those trailing dims.
    /// Inputs: `x`, `w`, optional `b`. Outputs: `y` F32, then `μ` and `1/sqrt(σ² + eps)` F32
    /// with the normalised dims kept as 1.
    LayerNormNd { axis: isize, eps: f32 },
    /// Keeps the upper (`upper`) or lower triangle of the last two dims relative to diagonal
    /// `k` (`j - i ≥ k` kept for upper, `j - i ≤ k` for lower), zeroing the rest. Scalar dtypes.
    Trilu { upper: bool, k: i64 },
    /// Transposed convolution (the gradient of `Conv` with respect to its input). Inputs: `x`
    /// float `[n, c, d_1..d_k]`, `w` `[c, m/group, k_1..k_k]`, optional `b` `[m]`. Each spatial
    /// output size is `stride·(d-1) + output_padding + dilation·(k-1) + 1 - pad_begin - pad_end`;
    /// `y[n, o, p] = b[o] + Σ x[n, ci, i] · w[ci, o', q]` over all `i, q` with
    /// `p = i·stride + q·dilation - pad_begin` (`o'` the index of `o` within its group).
    /// Output F32.
    ConvTranspose {
        strides: Vec<usize>,
        dilations: Vec<usize>,
        pads: Vec<usize>,
        output_padding: Vec<usize>,
        group: usize,
    },
    /// Linear quantisation: `y = saturate(round_half_even(x / scale) + zero_point)`. Inputs:
    /// `x` float, `scale` float (one value, or 1-D with one value per index of `axis`),
    /// optional `zero_point` U8 or I8 shaped like `scale` (absent: 0 as U8). Output: the
    /// zero point's dtype, saturated to its range.
    QuantizeLinear { axis: isize },
    /// `y = (x - zero_point) · scale`, scale and zero point as for `QuantizeLinear`. Inputs: `x`
    /// U8, I8 or I32; `scale` float; optional `zero_point` of `x`'s dtype. Output F32.
    DequantizeLinear { axis: isize },
    /// Integer matrix product `y = (a - a_zero) · (b - b_zero)`, exact in i32 (wrapping).
    /// Inputs: `a` U8/I8 `[.., m, k]`, `b` U8/I8 `[.., k, n]` (leading dims broadcast; rank ≥ 2
    /// each), optional `a_zero` (one value or `[m]`, per row), optional `b_zero` (one value or
    /// `[n]`, per column). Output I32 `[.., m, n]`.
    MatMulInteger,
    /// `y = data`, then for every position `p` of `idx`: `y[p with p[axis] = idx[p]] ⊕= upd[p]`
    /// in row-major order of `p` (`⊕` per `reduction`). Inputs: `data` scalar dtype, `idx`
    /// I32/I64 (negative counts from the end; out of range is an error), `upd` of `idx`'s dims
    /// and `data`'s dtype. Output like `data`.
    ScatterElements {
        axis: isize,
        reduction: ScatterReduction,
    },
    /// `y = data`, then for every index tuple `t = idx[i.., :]` (length `k ≤ rank`):
    /// `y[t, ..] ⊕= upd[i.., ..]`. `upd` has dims `idx.dims[..-1] ++ data.dims[k..]`.
    ScatterNd { reduction: ScatterReduction },
    /// `y[b.., i.., ..] = data[b.., idx[b.., i.., :], ..]` with the first `batch_dims` dims shared:
    /// output dims `idx.dims[..-1] ++ data.dims[batch_dims + k..]` for index tuples of length
    /// `k`. Inputs: `data` scalar dtype, `idx` I32/I64.
    GatherNd { batch_dims: usize },
    /// Writes the keys (or values) of `n` new tokens into a KV cache. Inputs: `cache` F32
    /// `[heads, capacity, d]`, `new` F32 `[n, heads, d]`. Output: the cache with
    /// `cache[h, start + t, :] = new[t, h, :]` for every `t < n` and every other row unchanged;
    /// `start + n ≤ capacity`. A device backend writes in place and returns a tensor over the
    /// same buffer, so the caller must treat the input cache as consumed.
    KvAppend { start: usize },
    /// Fused `act(a · w + bias)` (`a · wᵀ` with `rhs_transposed`): exactly `MatMul`, then `Add`
    /// of `bias` F32 `[n]` to every row, then the activation, each rounded to f32 as those ops
    /// are. Inputs: `a`, `w` (as `MatMul`), `bias`. Made by the graph's fusion pass.
    Linear {
        rhs_transposed: bool,
        act: LinearAct,
    },
    /// Fused residual add and RMS norm: inputs `a`, `b` F32 of one shape and `w` `[d]`;
    /// outputs `s = a + b` and `RmsNorm(s, w)` — exactly `Add` then `RmsNorm`.
    AddRmsNorm { eps: f32, weight_offset: f32 },
    /// Fused residual add and layer norm: inputs `a`, `b` F32 of one shape, optional `w` and
    /// bias `[d]`; outputs `s = a + b` and `LayerNorm(s, w, bias)` — exactly `Add` then
    /// `LayerNorm`.
    AddLayerNorm { eps: f32 },
}

impl Op {
    /// A short name for logs and errors (`"matmul"`, `"rms_norm"`).
    pub fn name(&self) -> &'static str {
        match self {
            Op::MatMul { .. } => "matmul",
            Op::Linear { .. } => "linear",
            Op::AddRmsNorm { .. } => "add_rms_norm",
            Op::AddLayerNorm { .. } => "add_layer_norm",
            Op::Add => "add",
            Op::Sub => "sub",
            Op::Mul => "mul",
            Op::Div => "div",
            Op::Scale { .. } => "scale",
            Op::RmsNorm { .. } => "rms_norm",
            Op::LayerNorm { .. } => "layer_norm",
            Op::GroupNorm { .. } => "group_norm",
            Op::Rope { .. } => "rope",
            Op::Sdpa { .. } => "sdpa",
            Op::Softmax { .. } => "softmax",
            Op::Silu => "silu",
            Op::Gelu { .. } => "gelu",
            Op::Relu => "relu",
            Op::Tanh => "tanh",
            Op::SwiGlu => "swiglu",
            Op::GeGlu { .. } => "geglu",
            Op::Embedding => "embedding",
            Op::Concat { .. } => "concat",
            Op::Split { .. } => "split",
            Op::Reshape { .. } => "reshape",
            Op::Permute { .. } => "permute",
            Op::Transpose { .. } => "transpose",
            Op::Slice { .. } => "slice",
            Op::ArgMax { .. } => "argmax",
            Op::TopK { .. } => "top_k",
            Op::CumSum { .. } => "cumsum",
            Op::Cast { .. } => "cast",
            Op::Unary { .. } => "unary",
            Op::Binary { .. } => "binary",
            Op::Where => "where",
            Op::Reduce { .. } => "reduce",
            Op::ArgReduce { .. } => "arg_reduce",
            Op::Gather { .. } => "gather",
            Op::GatherElements { .. } => "gather_elements",
            Op::Expand { .. } => "expand",
            Op::Tile { .. } => "tile",
            Op::SliceNd { .. } => "slice_nd",
            Op::Pad { .. } => "pad",
            Op::Conv { .. } => "conv",
            Op::Pool { .. } => "pool",
            Op::LogSoftmax { .. } => "log_softmax",
            Op::BatchNorm { .. } => "batch_norm",
            Op::LayerNormNd { .. } => "layer_norm_nd",
            Op::Trilu { .. } => "trilu",
            Op::ConvTranspose { .. } => "conv_transpose",
            Op::QuantizeLinear { .. } => "quantize_linear",
            Op::DequantizeLinear { .. } => "dequantize_linear",
            Op::MatMulInteger => "matmul_integer",
            Op::ScatterElements { .. } => "scatter_elements",
            Op::ScatterNd { .. } => "scatter_nd",
            Op::GatherNd { .. } => "gather_nd",
            Op::KvAppend { .. } => "kv_append",
        }
    }
}

//! Parameter types of the graph-level ops (`Op::Unary`, `Op::Binary`, `Op::Reduce`, conv and
//! pooling): the elementwise functions and window settings that ONNX-style graphs need.
//!
//! Each variant's doc is its math; the ops that use them document shapes and dtypes.

/// An elementwise function of one value (`Op::Unary`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum UnaryFn {
    /// `|x|`.
    Abs,
    /// `-x` (integers wrap).
    Neg,
    /// `eˣ`.
    Exp,
    /// `ln x` (`ln 0 = -inf`, negative → NaN).
    Log,
    /// `√x`.
    Sqrt,
    /// `1 / x`.
    Reciprocal,
    /// `1 / (1 + e⁻ˣ)`.
    Sigmoid,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    /// Largest integer ≤ x.
    Floor,
    /// Smallest integer ≥ x.
    Ceil,
    /// Nearest integer, halves to even.
    Round,
    /// The error function.
    Erf,
    /// -1, 0 or 1 (NaN stays NaN).
    Sign,
    /// `ln(1 + eˣ)`.
    Softplus,
    /// `x / (1 + |x|)`.
    Softsign,
    /// Logical not of a BOOL input.
    Not,
    /// BOOL output: `x` is NaN.
    IsNaN,
    /// BOOL output: `x` is `+inf` (when `positive`) or `-inf` (when `negative`).
    IsInf {
        positive: bool,
        negative: bool,
    },
    /// `max(x, 0)` (keeping the dtype, unlike `Op::Relu`).
    Relu,
    /// `tanh x` (keeping the dtype, unlike `Op::Tanh`).
    Tanh,
    /// `x · clamp(x/6 + 1/2, 0, 1)`.
    HardSwish,
    /// `x ≥ 0 ? x : alpha · x`.
    LeakyRelu {
        alpha: f32,
    },
    /// `x > 0 ? x : alpha · (eˣ - 1)`.
    Elu {
        alpha: f32,
    },
    /// `gamma · (x > 0 ? x : alpha · (eˣ - 1))`.
    Selu {
        alpha: f32,
        gamma: f32,
    },
    /// `max(0, x) + min(0, alpha · (e^(x/alpha) - 1))`.
    Celu {
        alpha: f32,
    },
    /// `clamp(alpha · x + beta, 0, 1)`.
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    /// `x > alpha ? x : 0`.
    ThresholdedRelu {
        alpha: f32,
    },
    /// `x < -lambd ? x + bias : x > lambd ? x - bias : 0`.
    Shrink {
        bias: f32,
        lambd: f32,
    },
}

/// An elementwise function of two broadcast values (`Op::Binary`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BinaryFn {
    Add,
    Sub,
    Mul,
    /// Floats: IEEE division. Integers: truncated toward zero; division by zero is an error.
    Div,
    /// `aᵇ` (integer bases: computed in f64 and truncated).
    Pow,
    /// The larger value (NaN if either is NaN).
    Max,
    /// The smaller value (NaN if either is NaN).
    Min,
    /// Remainder: with `fmod` the sign follows the dividend (C `fmod`), otherwise the divisor
    /// (Python `%`). Integer division by zero is an error.
    Mod {
        fmod: bool,
    },
    /// `a < 0 ? a · slope : a` with `b` the slope (ONNX `PRelu`).
    PRelu,
    /// Logical ops on BOOL inputs.
    And,
    Or,
    Xor,
    /// Comparisons; BOOL output.
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    /// Unsigned-style shifts of integers: `a << b`, `a >> b` (shift ≥ bit width gives 0).
    ShiftLeft,
    ShiftRight,
}

impl BinaryFn {
    /// True for the functions whose output is BOOL.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryFn::Equal
                | BinaryFn::Less
                | BinaryFn::LessOrEqual
                | BinaryFn::Greater
                | BinaryFn::GreaterOrEqual
        )
    }

    /// True for the logical functions (BOOL inputs).
    pub fn is_logical(self) -> bool {
        matches!(self, BinaryFn::And | BinaryFn::Or | BinaryFn::Xor)
    }
}

/// How `Op::Reduce` combines the values along its axes (in index order, accumulating in f32
/// for floats and in i64 for integers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReduceFn {
    /// `Σ x`.
    Sum,
    /// `Σ x / n`.
    Mean,
    /// Largest value (NaN propagates).
    Max,
    /// Smallest value (NaN propagates).
    Min,
    /// `Π x`.
    Prod,
    /// `Σ |x|`.
    L1,
    /// `√(Σ x²)`.
    L2,
    /// `ln Σ x`.
    LogSum,
    /// `ln Σ eˣ`, computed as `m + ln Σ e^(x-m)` with `m` the maximum.
    LogSumExp,
    /// `Σ x²`.
    SumSquare,
}

/// The window function of `Op::Pool`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum PoolKind {
    /// Largest value in the window (padding never wins).
    Max,
    /// Mean of the window; with `count_include_pad` padded positions count as zeros, otherwise
    /// only positions inside the input are averaged.
    Avg { count_include_pad: bool },
    /// `(Σ |x|ᵖ)^(1/p)` over the window.
    Lp { p: f32 },
}

/// How conv and pooling pad the spatial dimensions.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PadSpec {
    /// `[begin_1, .., begin_k, end_1, .., end_k]` zeros around the `k` spatial dimensions.
    Explicit(Vec<usize>),
    /// Output size `ceil(in / stride)`; the total padding needed is split with the extra
    /// element at the end (`SameUpper`) or at the beginning (`SameLower`).
    SameUpper,
    SameLower,
}

/// The value `Op::Pad` puts outside the input.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum PadMode {
    /// A constant (converted to the input dtype).
    Constant { value: f32 },
    /// Mirror without repeating the edge: `[a b c]` → `c b | a b c | b a`.
    Reflect,
    /// Repeat the edge value.
    Edge,
}

/// Serde support for a `DType` field by its name (`"F16"`), so ops have a text form (the graph's);
/// `#[serde(with = "cyb_ops::dtype_name")]`.
pub mod dtype_name {
    use cyb_tensor::DType;
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &DType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(d.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DType, D::Error> {
        let s = String::deserialize(d)?;
        DType::parse(&s).ok_or_else(|| D::Error::custom(format!("unknown dtype {s}")))
    }
}

/// How scatter ops combine an update with the value already there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ScatterReduction {
    /// Replace (with duplicate indices, the last update wins).
    None,
    Add,
    Mul,
    Max,
    Min,
}

//! The scalar float math of the elementwise and reduction ops, written once and instantiated
//! for f32 (every float dtype but F64) and f64 (F64, computed natively so DOUBLE keeps its
//! precision).

use crate::{BinaryFn, ReduceFn, UnaryFn};

macro_rules! real_math {
    ($t:ident, $unary:ident, $binary:ident, $reduce:ident, $erf:path) => {
        pub fn $unary(f: UnaryFn, x: $t) -> $t {
            // Op parameters are stored as f32.
            let p = |v: f32| v as $t;
            match f {
                UnaryFn::Abs => x.abs(),
                UnaryFn::Neg => -x,
                UnaryFn::Exp => x.exp(),
                UnaryFn::Log => x.ln(),
                UnaryFn::Sqrt => x.sqrt(),
                UnaryFn::Reciprocal => 1.0 / x,
                UnaryFn::Sigmoid => 1.0 / (1.0 + (-x).exp()),
                UnaryFn::Sin => x.sin(),
                UnaryFn::Cos => x.cos(),
                UnaryFn::Tan => x.tan(),
                UnaryFn::Asin => x.asin(),
                UnaryFn::Acos => x.acos(),
                UnaryFn::Atan => x.atan(),
                UnaryFn::Sinh => x.sinh(),
                UnaryFn::Cosh => x.cosh(),
                UnaryFn::Asinh => x.asinh(),
                UnaryFn::Acosh => x.acosh(),
                UnaryFn::Atanh => x.atanh(),
                UnaryFn::Floor => x.floor(),
                UnaryFn::Ceil => x.ceil(),
                UnaryFn::Round => x.round_ties_even(),
                UnaryFn::Erf => $erf(x),
                UnaryFn::Sign => {
                    if x.is_nan() {
                        x
                    } else if x > 0.0 {
                        1.0
                    } else if x < 0.0 {
                        -1.0
                    } else {
                        0.0
                    }
                }
                UnaryFn::Softplus => {
                    // ln(1 + eˣ) without overflow for large x.
                    if x > 20.0 {
                        x + (-x).exp().ln_1p()
                    } else {
                        x.exp().ln_1p()
                    }
                }
                UnaryFn::Softsign => x / (1.0 + x.abs()),
                UnaryFn::Relu => x.max(0.0),
                UnaryFn::Tanh => x.tanh(),
                UnaryFn::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
                UnaryFn::LeakyRelu { alpha } => {
                    if x >= 0.0 {
                        x
                    } else {
                        p(alpha) * x
                    }
                }
                UnaryFn::Elu { alpha } => {
                    if x > 0.0 {
                        x
                    } else {
                        p(alpha) * x.exp_m1()
                    }
                }
                UnaryFn::Selu { alpha, gamma } => {
                    p(gamma) * if x > 0.0 { x } else { p(alpha) * x.exp_m1() }
                }
                UnaryFn::Celu { alpha } => {
                    x.max(0.0) + (p(alpha) * (x / p(alpha)).exp_m1()).min(0.0)
                }
                UnaryFn::HardSigmoid { alpha, beta } => (p(alpha) * x + p(beta)).clamp(0.0, 1.0),
                UnaryFn::ThresholdedRelu { alpha } => {
                    if x > p(alpha) {
                        x
                    } else {
                        0.0
                    }
                }
                UnaryFn::Shrink { bias, lambd } => {
                    if x < -p(lambd) {
                        x + p(bias)
                    } else if x > p(lambd) {
                        x - p(bias)
                    } else {
                        0.0
                    }
                }
                UnaryFn::Not | UnaryFn::IsNaN | UnaryFn::IsInf { .. } => <$t>::NAN,
            }
        }

        pub fn $binary(f: BinaryFn, a: $t, b: $t) -> $t {
            match f {
                BinaryFn::Add => a + b,
                BinaryFn::Sub => a - b,
                BinaryFn::Mul => a * b,
                BinaryFn::Div => a / b,
                BinaryFn::Pow => a.powf(b),
                BinaryFn::Max | BinaryFn::Min if a.is_nan() || b.is_nan() => <$t>::NAN,
                BinaryFn::Max => a.max(b),
                BinaryFn::Min => a.min(b),
                BinaryFn::Mod { fmod: true } => a % b,
                BinaryFn::Mod { fmod: false } => {
                    let r = a % b;
                    if r != 0.0 && (r < 0.0) != (b < 0.0) {
                        r + b
                    } else {
                        r
                    }
                }
                BinaryFn::PRelu => {
                    if a < 0.0 {
                        a * b
                    } else {
                        a
                    }
                }
                _ => <$t>::NAN,
            }
        }

        pub(super) fn $reduce(f: ReduceFn, it: impl Iterator<Item = $t>, n: usize) -> $t {
            let nan_max = |a: $t, b: $t| {
                if a.is_nan() || b.is_nan() {
                    <$t>::NAN
                } else {
                    a.max(b)
                }
            };
            let nan_min = |a: $t, b: $t| {
                if a.is_nan() || b.is_nan() {
                    <$t>::NAN
                } else {
                    a.min(b)
                }
            };
            match f {
                ReduceFn::Sum => it.sum(),
                ReduceFn::Mean => it.sum::<$t>() / n as $t,
                ReduceFn::Max => it.fold(<$t>::NEG_INFINITY, nan_max),
                ReduceFn::Min => it.fold(<$t>::INFINITY, nan_min),
                ReduceFn::Prod => it.product(),
                ReduceFn::L1 => it.map(<$t>::abs).sum(),
                ReduceFn::L2 => it.map(|x| x * x).sum::<$t>().sqrt(),
                ReduceFn::LogSum => it.sum::<$t>().ln(),
                ReduceFn::SumSquare => it.map(|x| x * x).sum(),
                ReduceFn::LogSumExp => {
                    let v: Vec<$t> = it.collect();
                    let m = v.iter().copied().fold(<$t>::NEG_INFINITY, nan_max);
                    if m.is_infinite() || m.is_nan() {
                        return v.iter().map(|x| x.exp()).sum::<$t>().ln();
                    }
                    m + v.iter().map(|x| (x - m).exp()).sum::<$t>().ln()
                }
            }
        }
    };
}

real_math!(
    f32,
    unary_f32,
    binary_f32,
    reduce_f32,
    super::activation::erf
);
real_math!(
    f64,
    unary_f64,
    binary_f64,
    reduce_f64,
    super::activation::erf64
);

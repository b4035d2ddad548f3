//! `Unary`, `Binary` and `Where`: dtype-keeping elementwise ops with numpy broadcasting.

use super::activation::erf;
use super::values::{read, write_f32, write_i64, Vals};
use super::{broadcast_offset, broadcast_strides};
use crate::{BinaryFn, UnaryFn};
use cyb_tensor::{DType, Error, Result, Tensor, TensorInfo};

pub(super) fn unary(f: UnaryFn, x: &Tensor, out: &TensorInfo) -> Result<Tensor> {
    let dims = x.dims();
    match read(x)? {
        Vals::F(v) => {
            if matches!(f, UnaryFn::IsNaN | UnaryFn::IsInf { .. }) {
                let b: Vec<i64> = v
                    .iter()
                    .map(|&x| {
                        i64::from(match f {
                            UnaryFn::IsInf { positive, negative } => {
                                (positive && x == f32::INFINITY)
                                    || (negative && x == f32::NEG_INFINITY)
                            }
                            _ => x.is_nan(),
                        })
                    })
                    .collect();
                return write_i64(dims, DType::Bool, &b);
            }
            let y: Vec<f32> = v.iter().map(|&x| unary_f32(f, x)).collect();
            write_f32(dims, out.dtype, &y)
        }
        Vals::I(v) => {
            let y: Vec<i64> = v
                .iter()
                .map(|&x| match f {
                    UnaryFn::Abs => x.wrapping_abs(),
                    UnaryFn::Neg => x.wrapping_neg(),
                    UnaryFn::Sign => x.signum(),
                    UnaryFn::Relu => x.max(0),
                    _ => i64::from(x == 0),
                })
                .collect();
            write_i64(dims, out.dtype, &y)
        }
    }
}

fn unary_f32(f: UnaryFn, x: f32) -> f32 {
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
        UnaryFn::Erf => erf(x),
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
                alpha * x
            }
        }
        UnaryFn::Elu { alpha } => {
            if x > 0.0 {
                x
            } else {
                alpha * x.exp_m1()
            }
        }
        UnaryFn::Selu { alpha, gamma } => gamma * if x > 0.0 { x } else { alpha * x.exp_m1() },
        UnaryFn::Celu { alpha } => x.max(0.0) + (alpha * (x / alpha).exp_m1()).min(0.0),
        UnaryFn::HardSigmoid { alpha, beta } => (alpha * x + beta).clamp(0.0, 1.0),
        UnaryFn::ThresholdedRelu { alpha } => {
            if x > alpha {
                x
            } else {
                0.0
            }
        }
        UnaryFn::Shrink { bias, lambd } => {
            if x < -lambd {
                x + bias
            } else if x > lambd {
                x - bias
            } else {
                0.0
            }
        }
        UnaryFn::Not | UnaryFn::IsNaN | UnaryFn::IsInf { .. } => f32::NAN,
    }
}

/// For each output element, the flat offsets into `a` and `b`.
fn pairs(a: &[usize], b: &[usize], out: &[usize]) -> impl Iterator<Item = (usize, usize)> {
    let n: usize = out.iter().product();
    let (sa, sb) = (broadcast_strides(a, out), broadcast_strides(b, out));
    let out = out.to_vec();
    (0..n).map(move |i| {
        (
            broadcast_offset(i, &out, &sa),
            broadcast_offset(i, &out, &sb),
        )
    })
}

pub(super) fn binary(f: BinaryFn, a: &Tensor, b: &Tensor, out: &TensorInfo) -> Result<Tensor> {
    let od = out.shape.dims();
    let name = "binary";
    match (read(a)?, read(b)?) {
        (Vals::F(x), Vals::F(y)) => {
            let idx = pairs(a.dims(), b.dims(), od);
            if f.is_comparison() {
                let v: Vec<i64> = idx
                    .map(|(i, j)| i64::from(compare(f, x[i], y[j])))
                    .collect();
                return write_i64(od, DType::Bool, &v);
            }
            let v: Vec<f32> = idx.map(|(i, j)| binary_f32(f, x[i], y[j])).collect();
            write_f32(od, out.dtype, &v)
        }
        (Vals::F(x), Vals::I(y)) if f == BinaryFn::Pow => {
            let v: Vec<f32> = pairs(a.dims(), b.dims(), od)
                .map(|(i, j)| x[i].powf(y[j] as f32))
                .collect();
            write_f32(od, out.dtype, &v)
        }
        (Vals::I(x), Vals::F(y)) if f == BinaryFn::Pow => {
            let v: Vec<i64> = pairs(a.dims(), b.dims(), od)
                .map(|(i, j)| (x[i] as f64).powf(y[j] as f64) as i64)
                .collect();
            write_i64(od, out.dtype, &v)
        }
        (Vals::I(x), Vals::I(y)) => {
            let bits = a.dtype().block_bytes() as u32 * 8;
            let mut v = Vec::with_capacity(out.shape.numel());
            for (i, j) in pairs(a.dims(), b.dims(), od) {
                v.push(binary_i64(name, f, x[i], y[j], bits)?);
            }
            write_i64(od, out.dtype, &v)
        }
        _ => Err(Error::invalid(
            name,
            format!("{f:?} on {} and {}", a.dtype(), b.dtype()),
        )),
    }
}

fn compare<T: PartialOrd>(f: BinaryFn, a: T, b: T) -> bool {
    match f {
        BinaryFn::Equal => a == b,
        BinaryFn::Less => a < b,
        BinaryFn::LessOrEqual => a <= b,
        BinaryFn::Greater => a > b,
        _ => a >= b,
    }
}

fn binary_f32(f: BinaryFn, a: f32, b: f32) -> f32 {
    match f {
        BinaryFn::Add => a + b,
        BinaryFn::Sub => a - b,
        BinaryFn::Mul => a * b,
        BinaryFn::Div => a / b,
        BinaryFn::Pow => a.powf(b),
        BinaryFn::Max | BinaryFn::Min if a.is_nan() || b.is_nan() => f32::NAN,
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
        _ => f32::NAN,
    }
}

fn binary_i64(op: &str, f: BinaryFn, a: i64, b: i64, bits: u32) -> Result<i64> {
    let zero = || Error::invalid(op, format!("integer {f:?} by zero"));
    Ok(match f {
        BinaryFn::Add => a.wrapping_add(b),
        BinaryFn::Sub => a.wrapping_sub(b),
        BinaryFn::Mul => a.wrapping_mul(b),
        BinaryFn::Div => a.checked_div(b).ok_or_else(zero)?,
        BinaryFn::Pow => (a as f64).powf(b as f64) as i64,
        BinaryFn::Max => a.max(b),
        BinaryFn::Min => a.min(b),
        BinaryFn::Mod { fmod } => {
            let r = a.checked_rem(b).ok_or_else(zero)?;
            if !fmod && r != 0 && (r < 0) != (b < 0) {
                r + b
            } else {
                r
            }
        }
        BinaryFn::PRelu => {
            if a < 0 {
                a.wrapping_mul(b)
            } else {
                a
            }
        }
        BinaryFn::And => i64::from(a != 0 && b != 0),
        BinaryFn::Or => i64::from(a != 0 || b != 0),
        BinaryFn::Xor => i64::from((a != 0) != (b != 0)),
        BinaryFn::ShiftLeft | BinaryFn::ShiftRight => {
            if b < 0 || b >= bits as i64 {
                0
            } else {
                let mask = if bits >= 64 {
                    u64::MAX
                } else {
                    (1u64 << bits) - 1
                };
                let ua = (a as u64) & mask;
                let r = if f == BinaryFn::ShiftLeft {
                    ua << b
                } else {
                    ua >> b
                };
                (r & mask) as i64
            }
        }
        _ => i64::from(compare(f, a, b)),
    })
}

pub(super) fn where_(c: &Tensor, a: &Tensor, b: &Tensor, out: &TensorInfo) -> Result<Tensor> {
    let od = out.shape.dims();
    let cond = c.to_i64_vec()?;
    let (sc, sa, sb) = (
        broadcast_strides(c.dims(), od),
        broadcast_strides(a.dims(), od),
        broadcast_strides(b.dims(), od),
    );
    let es = a.dtype().block_bytes();
    let (ab, bb) = (super::host("where", a)?, super::host("where", b)?);
    let mut bytes = vec![0u8; out.shape.numel() * es];
    for (i, o) in bytes.chunks_exact_mut(es).enumerate() {
        let pick = cond[broadcast_offset(i, od, &sc)] != 0;
        let (src, s) = if pick { (ab, &sa) } else { (bb, &sb) };
        let j = broadcast_offset(i, od, s);
        o.copy_from_slice(&src[j * es..(j + 1) * es]);
    }
    Tensor::from_bytes(od, out.dtype, &bytes)
}

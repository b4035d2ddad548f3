//! `Unary`, `Binary` and `Where`: dtype-keeping elementwise ops with numpy broadcasting.

use super::real::{binary_f32, binary_f64, unary_f32, unary_f64};
use super::values::{read, write_f32, write_f64, write_i64, Vals};
use super::{broadcast_offset, broadcast_strides};
use crate::{BinaryFn, UnaryFn};
use cyb_tensor::{DType, Error, Result, Tensor, TensorInfo};

pub(super) fn unary(f: UnaryFn, x: &Tensor, out: &TensorInfo) -> Result<Tensor> {
    let dims = x.dims();
    let flag = |nan: bool, inf: i8| -> i64 {
        i64::from(match f {
            UnaryFn::IsInf { positive, negative } => (positive && inf > 0) || (negative && inf < 0),
            _ => nan,
        })
    };
    let is_flag = matches!(f, UnaryFn::IsNaN | UnaryFn::IsInf { .. });
    match read(x)? {
        Vals::F(v) if is_flag => {
            let b: Vec<i64> = v
                .iter()
                .map(|&x| flag(x.is_nan(), inf_sign(x.is_infinite(), x > 0.0)))
                .collect();
            write_i64(dims, DType::Bool, &b)
        }
        Vals::D(v) if is_flag => {
            let b: Vec<i64> = v
                .iter()
                .map(|&x| flag(x.is_nan(), inf_sign(x.is_infinite(), x > 0.0)))
                .collect();
            write_i64(dims, DType::Bool, &b)
        }
        Vals::F(v) => {
            let y: Vec<f32> = v.iter().map(|&x| unary_f32(f, x)).collect();
            write_f32(dims, out.dtype, &y)
        }
        Vals::D(v) => {
            let y: Vec<f64> = v.iter().map(|&x| unary_f64(f, x)).collect();
            write_f64(dims, out.dtype, &y)
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
            // Unsigned values are never negative: Abs, Relu and Sign read them as they are.
            let y = if x.dtype().is_unsigned() && f != UnaryFn::Neg {
                v.iter()
                    .zip(y)
                    .map(|(&x, y)| match f {
                        UnaryFn::Sign => i64::from(x != 0),
                        UnaryFn::Abs | UnaryFn::Relu => x,
                        _ => y,
                    })
                    .collect()
            } else {
                y
            };
            write_i64(dims, out.dtype, &y)
        }
    }
}

/// +1, -1 or 0 for an infinite positive, infinite negative or finite value.
fn inf_sign(infinite: bool, positive: bool) -> i8 {
    match (infinite, positive) {
        (false, _) => 0,
        (true, true) => 1,
        (true, false) => -1,
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
    let idx = || pairs(a.dims(), b.dims(), od);
    let cmp = |v: Vec<bool>| {
        write_i64(
            od,
            DType::Bool,
            &v.into_iter().map(i64::from).collect::<Vec<_>>(),
        )
    };
    match (read(a)?, read(b)?) {
        (Vals::F(x), Vals::F(y)) => {
            if f.is_comparison() {
                return cmp(idx().map(|(i, j)| compare(f, x[i], y[j])).collect());
            }
            let v: Vec<f32> = idx().map(|(i, j)| binary_f32(f, x[i], y[j])).collect();
            write_f32(od, out.dtype, &v)
        }
        (Vals::D(x), Vals::D(y)) => {
            if f.is_comparison() {
                return cmp(idx().map(|(i, j)| compare(f, x[i], y[j])).collect());
            }
            let v: Vec<f64> = idx().map(|(i, j)| binary_f64(f, x[i], y[j])).collect();
            write_f64(od, out.dtype, &v)
        }
        // Pow with mixed types: the result has the base's type, computed in f64.
        (x, y) if f == BinaryFn::Pow => {
            let (x, y) = (as_f64(x, a.dtype()), as_f64(y, b.dtype()));
            let v: Vec<f64> = idx().map(|(i, j)| x[i].powf(y[j])).collect();
            if a.dtype().is_integer() {
                let v: Vec<i64> = v.iter().map(|&p| p as i64).collect();
                return write_i64(od, out.dtype, &v);
            }
            write_f64(od, out.dtype, &v)
        }
        (Vals::I(x), Vals::I(y)) => {
            let bits = a.dtype().block_bytes() as u32 * 8;
            let mut v = Vec::with_capacity(out.shape.numel());
            if a.dtype() == DType::U64 {
                for (i, j) in idx() {
                    v.push(binary_u64(name, f, x[i] as u64, y[j] as u64)? as i64);
                }
            } else {
                for (i, j) in idx() {
                    v.push(binary_i64(name, f, x[i], y[j], bits)?);
                }
            }
            write_i64(od, out.dtype, &v)
        }
        _ => Err(Error::invalid(
            name,
            format!("{f:?} on {} and {}", a.dtype(), b.dtype()),
        )),
    }
}

/// Values as f64 (U64 keeps its unsigned range).
fn as_f64(v: Vals, dtype: DType) -> Vec<f64> {
    match v {
        Vals::F(v) => v.into_iter().map(f64::from).collect(),
        Vals::D(v) => v,
        Vals::I(v) if dtype == DType::U64 => v.into_iter().map(|x| x as u64 as f64).collect(),
        Vals::I(v) => v.into_iter().map(|x| x as f64).collect(),
    }
}

/// U64 arithmetic where the sign matters (order, division); the rest is the same bits as i64.
fn binary_u64(op: &str, f: BinaryFn, a: u64, b: u64) -> Result<u64> {
    let zero = || Error::invalid(op, format!("integer {f:?} by zero"));
    Ok(match f {
        BinaryFn::Div => a.checked_div(b).ok_or_else(zero)?,
        BinaryFn::Mod { .. } => a.checked_rem(b).ok_or_else(zero)?,
        BinaryFn::Max => a.max(b),
        BinaryFn::Min => a.min(b),
        BinaryFn::PRelu => a,
        BinaryFn::Pow => (a as f64).powf(b as f64) as u64,
        f if f.is_comparison() => u64::from(compare(f, a, b)),
        _ => binary_i64(op, f, a as i64, b as i64, 64)? as u64,
    })
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

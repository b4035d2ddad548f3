//! ONNX's integer (quantised) operators that combine several steps: dynamic quantisation,
//! quantised matmul and conv. Integer convolutions run as f32 convolutions of the
//! zero-point-shifted integers, which is exact while every sum stays below 2^24 in magnitude
//! (true for the kernel sizes of typical int8 models: 255² · 258 < 2^24 per output).

use crate::host_op::{req, HostRun};
use cyb_ops::Op;
use cyb_tensor::{DType, Error, Result, Tensor};

fn host_i64(r: &HostRun, t: &Tensor) -> Result<Vec<i64>> {
    r.d.to_host(t)?.to_i64_vec()
}

fn host_f32(r: &HostRun, t: &Tensor) -> Result<Vec<f32>> {
    r.d.to_host(t)?.to_f32_vec()
}

fn saturate(v: f32, dtype: DType) -> i64 {
    let (lo, hi) = if dtype == DType::I8 {
        (-128, 127)
    } else {
        (0, 255)
    };
    (v.round_ties_even() as i64).clamp(lo, hi)
}

fn ints(dims: &[usize], dtype: DType, v: &[i64]) -> Result<Tensor> {
    let bytes: Vec<u8> = match dtype {
        DType::I32 => v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect(),
        DType::I8 | DType::U8 => v.iter().map(|&x| x as u8).collect(),
        d => return Err(Error::invalid("quantized", format!("{d} output"))),
    };
    Tensor::from_bytes(dims, dtype, &bytes)
}

/// `y, y_scale, y_zero_point` for U8 with the range of `x` widened to include 0.
pub(crate) fn dynamic_quantize(r: &mut HostRun, inputs: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req("dynamic_quantize_linear", inputs, 0)?;
    let v = host_f32(r, x)?;
    let lo = v.iter().copied().fold(0f32, f32::min);
    let hi = v.iter().copied().fold(0f32, f32::max);
    let scale = (hi - lo) / 255.0;
    let zp = if scale == 0.0 {
        0
    } else {
        saturate(-lo / scale, DType::U8)
    };
    let q: Vec<i64> = v
        .iter()
        .map(|&x| {
            if scale == 0.0 {
                zp
            } else {
                ((x / scale).round_ties_even() as i64 + zp).clamp(0, 255)
            }
        })
        .collect();
    Ok(vec![
        ints(x.dims(), DType::U8, &q)?,
        Tensor::from_f32(&[], &[scale])?,
        ints(&[], DType::U8, &[zp])?,
    ])
}

/// Integer conv as an f32 conv of the shifted integers; returns the f32 sums `[n, m, ..]`.
fn shifted_conv(
    r: &mut HostRun,
    conv: &Op,
    x: &Tensor,
    xz: Option<&Tensor>,
    w: &Tensor,
    wz: Option<&Tensor>,
) -> Result<Tensor> {
    let shift = |r: &mut HostRun,
                 t: &Tensor,
                 z: Option<&Tensor>,
                 per_channel_dim0: bool|
     -> Result<Tensor> {
        let v = host_i64(r, t)?;
        let zs = match z {
            Some(z) => host_i64(r, z)?,
            None => vec![0],
        };
        let inner: usize = t.dims().iter().skip(1).product::<usize>().max(1);
        let f: Vec<f32> = v
            .iter()
            .enumerate()
            .map(|(i, &q)| {
                let zi = if zs.len() == 1 || !per_channel_dim0 {
                    zs[0]
                } else {
                    zs[(i / inner) % zs.len()]
                };
                (q - zi) as f32
            })
            .collect();
        Tensor::from_f32(t.dims(), &f)
    };
    let (xf, wf) = (shift(r, x, xz, false)?, shift(r, w, wz, true)?);
    r.one(conv, &[xf, wf])
}

pub(crate) fn conv_integer(
    r: &mut HostRun,
    conv: &Op,
    inputs: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let opt = |i: usize| inputs.get(i).and_then(Option::as_ref);
    let (x, w) = (
        req("conv_integer", inputs, 0)?,
        req("conv_integer", inputs, 1)?,
    );
    let y = shifted_conv(r, conv, x, opt(2), w, opt(3))?;
    let v: Vec<i64> = y.to_f32_vec()?.iter().map(|&f| f.round() as i64).collect();
    Ok(vec![ints(y.dims(), DType::I32, &v)?])
}

/// `saturate(round(acc · in_scale · w_scale[o] / y_scale) + y_zero)` for each output channel
/// `o` at dim `axis` of `acc`.
fn requantize(
    acc: &[f32],
    dims: &[usize],
    axis: usize,
    mult: &[f32],
    yz: i64,
    dtype: DType,
) -> Result<Tensor> {
    let inner: usize = dims[axis + 1..].iter().product::<usize>().max(1);
    let len = dims[axis].max(1);
    let q: Vec<i64> = acc
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let m = if mult.len() == 1 {
                mult[0]
            } else {
                mult[(i / inner) % len]
            };
            ((a * m).round_ties_even() as i64 + yz).clamp(
                if dtype == DType::I8 { -128 } else { 0 },
                if dtype == DType::I8 { 127 } else { 255 },
            )
        })
        .collect();
    ints(dims, dtype, &q)
}

pub(crate) fn qlinear_conv(
    r: &mut HostRun,
    conv: &Op,
    inputs: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let name = "qlinear_conv";
    let g = |i: usize| req(name, inputs, i);
    let (x, xs, xz, w, ws, wz, ys, yz) = (g(0)?, g(1)?, g(2)?, g(3)?, g(4)?, g(5)?, g(6)?, g(7)?);
    let acc_t = shifted_conv(r, conv, x, Some(xz), w, Some(wz))?;
    let mut acc = acc_t.to_f32_vec()?;
    let dims = acc_t.dims().to_vec();
    let inner: usize = dims[2..].iter().product::<usize>().max(1);
    if let Some(b) = inputs.get(8).and_then(Option::as_ref) {
        let bv = host_i64(r, b)?;
        for (i, a) in acc.iter_mut().enumerate() {
            *a += bv[(i / inner) % dims[1].max(1)] as f32;
        }
    }
    let (xs, ws, ys) = (host_f32(r, xs)?[0], host_f32(r, ws)?, host_f32(r, ys)?[0]);
    let mult: Vec<f32> = ws.iter().map(|&w| xs * w / ys).collect();
    let yz_v = host_i64(r, yz)?[0];
    Ok(vec![requantize(&acc, &dims, 1, &mult, yz_v, yz.dtype())?])
}

pub(crate) fn qlinear_matmul(r: &mut HostRun, inputs: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let name = "qlinear_matmul";
    let g = |i: usize| req(name, inputs, i);
    let (a, asc, az, b, bsc, bz, ys, yz) = (g(0)?, g(1)?, g(2)?, g(3)?, g(4)?, g(5)?, g(6)?, g(7)?);
    let acc = r.one(
        &Op::MatMulInteger,
        &[a.clone(), b.clone(), az.clone(), bz.clone()],
    )?;
    let accv: Vec<f32> = host_i64(r, &acc)?.iter().map(|&v| v as f32).collect();
    let (asv, bsv, ysv) = (host_f32(r, asc)?, host_f32(r, bsc)?, host_f32(r, ys)?[0]);
    if asv.len() != 1 {
        return Err(Error::invalid(name, "per-row a_scale is not supported"));
    }
    let mult: Vec<f32> = bsv.iter().map(|&s| asv[0] * s / ysv).collect();
    let dims = acc.dims().to_vec();
    let yz_v = host_i64(r, yz)?[0];
    Ok(vec![requantize(
        &accv,
        &dims,
        dims.len() - 1,
        &mult,
        yz_v,
        yz.dtype(),
    )?])
}

//! ONNX-style linear (de)quantisation and the exact integer matrix product.

use super::values::write_i64;
use super::{axis_of, broadcast_offset, broadcast_strides};
use cyb_tensor::{DType, Result, Tensor, TensorInfo};

/// Per-element index into a `scale` of one value or one value per index of `axis`.
fn channel(x: &Tensor, axis: isize, n_scale: usize) -> Result<impl Fn(usize) -> usize> {
    let (inner, len) = if n_scale > 1 {
        let a = axis_of("quantize_linear", x, axis)?;
        (
            x.dims()[a + 1..].iter().product::<usize>().max(1),
            x.dims()[a],
        )
    } else {
        (1, 1)
    };
    Ok(move |i: usize| (i / inner) % len.max(1))
}

pub(super) fn quantize(axis: isize, inputs: &[Tensor], out: &TensorInfo) -> Result<Tensor> {
    let x = inputs[0].to_f32_vec()?;
    let scale = inputs[1].to_f32_vec()?;
    let zp = match inputs.get(2) {
        Some(z) => z.to_i64_vec()?,
        None => vec![0; scale.len()],
    };
    let ch = channel(&inputs[0], axis, scale.len())?;
    let (lo, hi) = if out.dtype == DType::I8 {
        (-128, 127)
    } else {
        (0, 255)
    };
    let y: Vec<i64> = x
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let c = ch(i);
            let q = (v / scale[c]).round_ties_even() as i64 + zp[c];
            q.clamp(lo, hi)
        })
        .collect();
    write_i64(out.shape.dims(), out.dtype, &y)
}

pub(super) fn dequantize(axis: isize, inputs: &[Tensor]) -> Result<Tensor> {
    let x = inputs[0].to_i64_vec()?;
    let scale = inputs[1].to_f32_vec()?;
    let zp = match inputs.get(2) {
        Some(z) => z.to_i64_vec()?,
        None => vec![0; scale.len()],
    };
    let ch = channel(&inputs[0], axis, scale.len())?;
    let y: Vec<f32> = x
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let c = ch(i);
            (v - zp[c]) as f32 * scale[c]
        })
        .collect();
    Tensor::from_f32(inputs[0].dims(), &y)
}

pub(super) fn matmul_integer(inputs: &[Tensor], out: &TensorInfo) -> Result<Tensor> {
    let (a, b) = (inputs[0].to_i64_vec()?, inputs[1].to_i64_vec()?);
    let zero = |i: usize| -> Result<Vec<i64>> {
        match inputs.get(i) {
            Some(z) => z.to_i64_vec(),
            None => Ok(vec![0]),
        }
    };
    let (az, bz) = (zero(2)?, zero(3)?);
    let (ad, bd, od) = (inputs[0].dims(), inputs[1].dims(), out.shape.dims());
    let (m, k, n) = (ad[ad.len() - 2], ad[ad.len() - 1], bd[bd.len() - 1]);
    let batch = &od[..od.len() - 2];
    let (sa, sb) = (
        broadcast_strides(&ad[..ad.len() - 2], batch),
        broadcast_strides(&bd[..bd.len() - 2], batch),
    );
    let nb: usize = batch.iter().product();
    let mut y = vec![0i64; nb * m * n];
    for bi in 0..nb {
        let (oa, ob) = (
            broadcast_offset(bi, batch, &sa) * m * k,
            broadcast_offset(bi, batch, &sb) * k * n,
        );
        for i in 0..m {
            let za = az[if az.len() == 1 { 0 } else { i }];
            for j in 0..n {
                let zb = bz[if bz.len() == 1 { 0 } else { j }];
                let mut acc = 0i32;
                for p in 0..k {
                    let prod = (a[oa + i * k + p] - za) * (b[ob + p * n + j] - zb);
                    acc = acc.wrapping_add(prod as i32);
                }
                y[(bi * m + i) * n + j] = acc as i64;
            }
        }
    }
    write_i64(od, DType::I32, &y)
}

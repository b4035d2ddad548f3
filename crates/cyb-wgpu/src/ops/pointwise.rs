//! Elementwise ops (unary, broadcasting binary, gated units), rms_norm and softmax.

use crate::backend::{gpu_buf, State, WgpuBackend};
use crate::kernels::{Family, KernelKey};
use cyb_ops::{GeluApprox, Op};
use cyb_tensor::{Result, Tensor, TensorInfo};

/// Rank ≤ 4 after broadcasting (the binary kernel's index space).
pub(crate) fn broadcastable(inputs: &[TensorInfo]) -> bool {
    inputs.iter().all(|i| i.shape.rank() <= 4)
}

/// `dims` left-padded with 1s to rank 4.
fn pad4(dims: &[usize]) -> [usize; 4] {
    let mut out = [1usize; 4];
    let skip = 4 - dims.len().min(4);
    for (o, d) in out[skip..].iter_mut().zip(dims) {
        *o = *d;
    }
    out
}

/// Strides of `dims` (padded to 4) read at the output's index space `out`: 0 where broadcast.
fn broadcast_strides(dims: &[usize], out: &[usize; 4]) -> [u32; 4] {
    let d = pad4(dims);
    let mut s = [0u32; 4];
    let mut acc = 1usize;
    for i in (0..4).rev() {
        s[i] = if d[i] == 1 && out[i] != 1 {
            0
        } else {
            acc as u32
        };
        acc *= d[i];
    }
    s
}

pub(crate) fn execute(
    gpu: &WgpuBackend,
    st: &mut State,
    op: &Op,
    inputs: &[Tensor],
    out: &TensorInfo,
) -> Result<Tensor> {
    let (y, ybuf) = gpu.output(st, out.shape.dims(), out.dtype)?;
    let n = out.shape.numel();
    let groups = n.div_ceil(64) as u32;
    let x = gpu_buf(&inputs[0])?;
    let unary = |entry: &'static str, params: &[u32], st: &mut State| {
        let key = KernelKey::plain(Family::Unary, entry);
        gpu.dispatch(st, &key, params, &[&x, &ybuf], groups)
    };
    let tanh_form = |a: &GeluApprox| u32::from(*a == GeluApprox::Tanh);
    match op {
        Op::Silu => unary("silu", &[n as u32], st)?,
        Op::Relu => unary("relu", &[n as u32], st)?,
        Op::Tanh => unary("tanh_op", &[n as u32], st)?,
        Op::Scale { factor } => unary("scale", &[n as u32, factor.to_bits()], st)?,
        Op::Gelu { approx } => {
            let entry = match approx {
                GeluApprox::Erf => "gelu_erf_op",
                GeluApprox::Tanh => "gelu_tanh_op",
            };
            unary(entry, &[n as u32], st)?
        }
        Op::SwiGlu | Op::GeGlu { .. } if inputs.len() == 1 => {
            let half = out.shape.last() as u32;
            match op {
                Op::GeGlu { approx } => {
                    unary("geglu_fused", &[n as u32, 0, half, tanh_form(approx)], st)?
                }
                _ => unary("swiglu_fused", &[n as u32, 0, half], st)?,
            }
        }
        Op::SwiGlu | Op::GeGlu { .. } => {
            let (entry, form) = match op {
                Op::GeGlu { approx } => ("geglu", tanh_form(approx)),
                _ => ("swiglu", 0),
            };
            let mut p = [0u32; 14];
            p[0] = n as u32;
            p[13] = form;
            let b = gpu_buf(&inputs[1])?;
            let key = KernelKey::plain(Family::Binary, entry);
            gpu.dispatch(st, &key, &p, &[&x, &b, &ybuf], groups)?
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            let od = pad4(out.shape.dims());
            let sa = broadcast_strides(inputs[0].dims(), &od);
            let sb = broadcast_strides(inputs[1].dims(), &od);
            let mut p = vec![n as u32];
            p.extend(od.iter().map(|&d| d as u32));
            p.extend(sa);
            p.extend(sb);
            let entry = match op {
                Op::Add => "add",
                Op::Sub => "sub",
                Op::Mul => "mul",
                _ => "div",
            };
            let b = gpu_buf(&inputs[1])?;
            let key = KernelKey::plain(Family::Binary, entry);
            gpu.dispatch(st, &key, &p, &[&x, &b, &ybuf], groups)?
        }
        Op::RmsNorm { eps, weight_offset } => {
            let d = out.shape.last();
            let rows = n.checked_div(d).unwrap_or(0);
            let w = gpu_buf(&inputs[1])?;
            let key = KernelKey::plain(Family::Norm, "rms_norm");
            let p = [
                rows as u32,
                d as u32,
                eps.to_bits(),
                weight_offset.to_bits(),
            ];
            gpu.dispatch(st, &key, &p, &[&x, &w, &ybuf], rows as u32)?
        }
        Op::LayerNorm { eps } => {
            let d = out.shape.last();
            let rows = n.checked_div(d).unwrap_or(0);
            let w = inputs.get(1).map(gpu_buf).transpose()?;
            let b = inputs.get(2).map(gpu_buf).transpose()?;
            let key = KernelKey::plain(Family::LayerNorm, "layer_norm");
            let p = [
                rows as u32,
                d as u32,
                eps.to_bits(),
                u32::from(w.is_some()),
                u32::from(b.is_some()),
            ];
            let wb = w.as_ref().unwrap_or(&x);
            let bb = b.as_ref().unwrap_or(&x);
            gpu.dispatch(st, &key, &p, &[&x, wb, bb, &ybuf], rows as u32)?
        }
        Op::ArgMax { .. } | Op::Softmax { .. } => {
            // One workgroup per row of the input's last axis (argmax writes one I64 per row).
            let d = inputs[0].dims().last().copied().unwrap_or(1);
            let rows = inputs[0].numel().checked_div(d).unwrap_or(0);
            let (family, entry) = match op {
                Op::ArgMax { .. } => (Family::ArgMax, "argmax"),
                _ => (Family::Softmax, "softmax"),
            };
            let key = KernelKey::plain(family, entry);
            let p = [rows as u32, d as u32];
            gpu.dispatch(st, &key, &p, &[&x, &ybuf], rows as u32)?
        }
        other => {
            return Err(cyb_tensor::Error::UnsupportedOp {
                op: other.name().into(),
                backend: "wgpu".into(),
                input_dtype: inputs[0].dtype(),
            })
        }
    }
    Ok(y)
}

/// `Op::AddRmsNorm`: the residual sum and its RMS norm from one dispatch.
pub(crate) fn add_rms_norm(
    gpu: &WgpuBackend,
    st: &mut State,
    (eps, weight_offset): (f32, f32),
    inputs: &[Tensor],
    out: &TensorInfo,
) -> Result<Vec<Tensor>> {
    let dims = out.shape.dims();
    let (s, sbuf) = gpu.output(st, dims, out.dtype)?;
    let (y, ybuf) = gpu.output(st, dims, out.dtype)?;
    let d = out.shape.last();
    let rows = out.shape.numel().checked_div(d).unwrap_or(0);
    let (a, b, w) = (
        gpu_buf(&inputs[0])?,
        gpu_buf(&inputs[1])?,
        gpu_buf(&inputs[2])?,
    );
    let key = KernelKey::plain(Family::AddNorm, "add_rms_norm");
    let p = [
        rows as u32,
        d as u32,
        eps.to_bits(),
        weight_offset.to_bits(),
    ];
    gpu.dispatch(st, &key, &p, &[&a, &b, &w, &sbuf, &ybuf], rows as u32)?;
    Ok(vec![s, y])
}

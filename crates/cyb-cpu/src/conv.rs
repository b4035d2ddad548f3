//! `Conv` (one group, F32, any number of spatial dims) as a matrix product: each output
//! position's window of the input gathered into one row (im2col), times the kernel read as a
//! `[out_channels, in_channels · kernel]` weight matrix on the float GEMM, the bias added in its
//! epilogue. Each output is one dot product in a fixed order, so the thread count does not
//! change results.

use crate::features::KernelSet;
use crate::matmul;
use crate::matmul::quant_act::ActPrecision;
use crate::matmul::Scratch;
use crate::par::pool::ThreadPool;
use cyb_ops::{LinearAct, Op};
use cyb_tensor::{DType, Error, Result, Shape, Tensor, TensorInfo};

/// The largest gathered window matrix; bigger convolutions go to the reference.
const MAX_COLS_BYTES: usize = 64 << 20;

/// The window matrix `[batch · positions, in_channels · kernel]` of a supported conv, or `None`.
fn cols_dims(op: &Op, inputs: &[TensorInfo]) -> Option<(usize, usize)> {
    let Op::Conv {
        strides,
        dilations,
        pads,
        group,
    } = op
    else {
        return None;
    };
    let (x, w) = (inputs.first()?, inputs.get(1)?);
    let (xd, wd) = (x.shape.dims(), w.shape.dims());
    if *group != 1 || xd.len() < 3 || wd.len() != xd.len() || wd[1] != xd[1] {
        return None;
    }
    let g = cyb_ops::window_geometry("conv", &xd[2..], &wd[2..], strides, dilations, pads, false)
        .ok()?;
    let positions = g.out.iter().try_fold(xd[0], |a, &d| a.checked_mul(d))?;
    let width = wd[1..].iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    let bytes = positions.checked_mul(width)?.checked_mul(4)?;
    (bytes <= MAX_COLS_BYTES).then_some((positions, width))
}

/// F32 input, weight and bias, one group, a window matrix of modest size, and a GEMM for F32
/// weights on this kernel set.
pub(crate) fn supports(set: KernelSet, op: &Op, inputs: &[TensorInfo]) -> bool {
    if !(2..=3).contains(&inputs.len()) || inputs.iter().any(|i| i.dtype != DType::F32) {
        return false;
    }
    let Some((_, width)) = cols_dims(op, inputs) else {
        return false;
    };
    let info = |dims: &[usize]| -> Option<TensorInfo> {
        Some(TensorInfo {
            shape: Shape::new(dims).ok()?,
            dtype: DType::F32,
        })
    };
    let m = inputs[1].shape.dims()[0];
    match (info(&[1, width]), info(&[m, width])) {
        (Some(a), Some(w)) => width > 0 && matmul::supports(set, true, &[a, w]),
        _ => false,
    }
}

/// `y = conv(x, w) + b` (see `Op::Conv`) through the GEMM.
pub(crate) fn conv(
    set: KernelSet,
    act: ActPrecision,
    pool: &ThreadPool,
    scratch: &Scratch,
    op: &Op,
    inputs: &[Tensor],
) -> Result<Tensor> {
    let infos: Vec<TensorInfo> = inputs.iter().map(Tensor::info).collect();
    let (
        Some((rows, width)),
        Op::Conv {
            strides,
            dilations,
            pads,
            ..
        },
    ) = (cols_dims(op, &infos), op)
    else {
        return Err(Error::invalid("conv", "not a conv the cpu backend runs"));
    };
    let (x, w) = (&inputs[0], &inputs[1]);
    let (xd, wd) = (x.dims(), w.dims());
    let g = cyb_ops::window_geometry("conv", &xd[2..], &wd[2..], strides, dilations, pads, false)?;
    let (n, c, m) = (xd[0], xd[1], wd[0]);
    let sp_in = &xd[2..];
    let kdims = &wd[2..];
    let k_n: usize = kdims.iter().product();
    let in_n: usize = sp_in.iter().product();
    let out_n: usize = g.out.iter().product();
    let xs = x.as_f32()?;

    // Row b·out_n + o, column ci·k_n + k: the input under tap k of output position o.
    let mut cols = vec![0f32; rows * width];
    let (mut op_ix, mut kp) = (vec![0usize; g.out.len()], vec![0usize; kdims.len()]);
    for o in 0..out_n {
        unravel(o, &g.out, &mut op_ix);
        for k in 0..k_n {
            unravel(k, kdims, &mut kp);
            let mut off = Some(0usize);
            let mut stride = 1usize;
            for s in (0..sp_in.len()).rev() {
                let p = (op_ix[s] * g.strides[s] + kp[s] * g.dilations[s]) as isize
                    - g.pad_begin[s] as isize;
                if p < 0 || p >= sp_in[s] as isize {
                    off = None;
                    break;
                }
                off = off.map(|v| v + p as usize * stride);
                stride *= sp_in[s];
            }
            let Some(off) = off else { continue };
            for b in 0..n {
                let row = &mut cols[(b * out_n + o) * width..][..width];
                for ci in 0..c {
                    row[ci * k_n + k] = xs[(b * c + ci) * in_n + off];
                }
            }
        }
    }
    let a = Tensor::from_f32(&[rows, width], &cols)?;
    let wmat = w.reshape(&[m, width])?;
    let bias = match inputs.get(2) {
        Some(b) => Some(b.as_f32()?),
        None => None,
    };
    let linear = bias.as_deref().map(|b| (b, LinearAct::None));
    let y = matmul::matmul(set, act, pool, scratch, &a, &wmat, linear)?;
    let yv = y.as_f32()?;

    // [batch · positions, out_channels] → [batch, out_channels, positions..].
    let mut out = vec![0f32; n * m * out_n];
    for b in 0..n {
        for o in 0..out_n {
            let src = &yv[(b * out_n + o) * m..][..m];
            for (oc, &v) in src.iter().enumerate() {
                out[(b * m + oc) * out_n + o] = v;
            }
        }
    }
    let mut dims = vec![n, m];
    dims.extend_from_slice(&g.out);
    Tensor::from_f32(&dims, &out)
}

/// The multi-index of flat index `i` over `dims` (row-major).
fn unravel(mut i: usize, dims: &[usize], out: &mut [usize]) {
    for (d, o) in dims.iter().zip(out.iter_mut()).rev() {
        *o = i % d.max(&1);
        i /= d.max(&1);
    }
}

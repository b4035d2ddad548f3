//! `Conv`, `ConvTranspose` and `Pool` over any number of spatial dims. Output positions are
//! split across threads; each position sums in a fixed order, so results do not depend on the
//! thread count.

use super::floats;
use super::values::{strides, unravel, write_f32};
use crate::shape_rule_nd::window_geometry;
use crate::{PadSpec, PoolKind};
use cyb_tensor::{Result, Tensor, TensorInfo};
use rayon::prelude::*;

pub(super) fn conv(
    strides_: &[usize],
    dilations: &[usize],
    pads: &PadSpec,
    group: usize,
    inputs: &[Tensor],
    out: &TensorInfo,
) -> Result<Tensor> {
    let (x, w) = (floats(&inputs[0])?, floats(&inputs[1])?);
    let bias = match inputs.get(2) {
        Some(b) => Some(b.to_f32_vec()?),
        None => None,
    };
    let (xd, wd, od) = (inputs[0].dims(), inputs[1].dims(), out.shape.dims());
    let g = window_geometry("conv", &xd[2..], &wd[2..], strides_, dilations, pads, false)?;
    let (strides_, dilations) = (&g.strides[..], &g.dilations[..]);
    let (c, m) = (xd[1], wd[0]);
    let (cg, mg) = (c / group, m / group);
    let sp_in = &xd[2..];
    let kdims = &wd[2..];
    let k_n: usize = kdims.iter().product();
    let in_n: usize = sp_in.iter().product();
    let out_sp = &od[2..];
    let out_n: usize = out_sp.iter().product();
    let ins = strides(sp_in);
    // For each (output position, kernel offset), the input offset or None if in padding.
    let mut taps: Vec<Option<usize>> = Vec::with_capacity(out_n * k_n);
    let (mut op, mut kp) = (vec![0; out_sp.len()], vec![0; kdims.len()]);
    for o in 0..out_n {
        unravel(o, out_sp, &mut op);
        for k in 0..k_n {
            unravel(k, kdims, &mut kp);
            let mut off = Some(0usize);
            for s in 0..op.len() {
                let p =
                    (op[s] * strides_[s] + kp[s] * dilations[s]) as isize - g.pad_begin[s] as isize;
                if p < 0 || p >= sp_in[s] as isize {
                    off = None;
                    break;
                }
                off = off.map(|v| v + p as usize * ins[s]);
            }
            taps.push(off);
        }
    }
    let n = xd[0];
    let mut y = vec![0f32; n * m * out_n];
    y.par_chunks_mut(out_n.max(1))
        .enumerate()
        .for_each(|(nm, ys)| {
            let (b, oc) = (nm / m, nm % m);
            let gi = oc / mg;
            for (o, yv) in ys.iter_mut().enumerate() {
                let mut acc = bias.as_ref().map_or(0.0, |bv| bv[oc]);
                for ci in 0..cg {
                    let xbase = (b * c + gi * cg + ci) * in_n;
                    let wbase = (oc * cg + ci) * k_n;
                    for k in 0..k_n {
                        if let Some(t) = taps[o * k_n + k] {
                            acc += x[xbase + t] * w[wbase + k];
                        }
                    }
                }
                *yv = acc;
            }
        });
    Tensor::from_f32(od, &y)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn conv_transpose(
    strides_: &[usize],
    dilations: &[usize],
    pads: &[usize],
    group: usize,
    inputs: &[Tensor],
    out: &TensorInfo,
) -> Result<Tensor> {
    let (x, w) = (floats(&inputs[0])?, floats(&inputs[1])?);
    let (xd, wd, od) = (inputs[0].dims(), inputs[1].dims(), out.shape.dims());
    let (c, m) = (xd[1], od[1]);
    let (cg, mg) = (c / group, m / group);
    let sp_in = &xd[2..];
    let kdims = &wd[2..];
    let out_sp = &od[2..];
    let (in_n, k_n, out_n): (usize, usize, usize) = (
        sp_in.iter().product(),
        kdims.iter().product(),
        out_sp.iter().product(),
    );
    let os = strides(out_sp);
    let n = xd[0];
    let mut y = vec![0f32; n * m * out_n];
    if let Some(b) = inputs.get(2) {
        let bv = b.to_f32_vec()?;
        for (i, v) in y.iter_mut().enumerate() {
            *v = bv[(i / out_n.max(1)) % m];
        }
    }
    let (mut ip, mut kp) = (vec![0; sp_in.len()], vec![0; kdims.len()]);
    for b in 0..n {
        for ci in 0..c {
            let gi = ci / cg;
            for i in 0..in_n {
                unravel(i, sp_in, &mut ip);
                let xv = x[(b * c + ci) * in_n + i];
                for k in 0..k_n {
                    unravel(k, kdims, &mut kp);
                    let mut off = Some(0usize);
                    for s in 0..ip.len() {
                        let p = (ip[s] * strides_[s] + kp[s] * dilations[s]) as isize
                            - pads[s] as isize;
                        if p < 0 || p >= out_sp[s] as isize {
                            off = None;
                            break;
                        }
                        off = off.map(|v| v + p as usize * os[s]);
                    }
                    let Some(off) = off else { continue };
                    for oo in 0..mg {
                        let oc = gi * mg + oo;
                        y[(b * m + oc) * out_n + off] += xv * w[(ci * mg + oo) * k_n + k];
                    }
                }
            }
        }
    }
    Tensor::from_f32(od, &y)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn pool(
    kind: PoolKind,
    kernel: &[usize],
    strides_: &[usize],
    dilations: &[usize],
    pads: &PadSpec,
    ceil_mode: bool,
    x_t: &Tensor,
    out: &TensorInfo,
) -> Result<Tensor> {
    let x = floats(x_t)?;
    let (xd, od) = (x_t.dims(), out.shape.dims());
    let g = window_geometry(
        "pool",
        &xd[2..],
        kernel,
        strides_,
        dilations,
        pads,
        ceil_mode,
    )?;
    let (strides_, dilations) = (&g.strides[..], &g.dilations[..]);
    let sp_in = &xd[2..];
    let out_sp = &od[2..];
    let (in_n, out_n, k_n): (usize, usize, usize) = (
        sp_in.iter().product(),
        out_sp.iter().product(),
        kernel.iter().product(),
    );
    let pads_end = &g.pad_end;
    let ins = strides(sp_in);
    let mut y = vec![0f32; xd[0] * xd[1] * out_n];
    y.par_chunks_mut(out_n.max(1))
        .enumerate()
        .for_each(|(plane, ys)| {
            let xs = &x[plane * in_n..(plane + 1) * in_n];
            let (mut op, mut kp) = (vec![0; out_sp.len()], vec![0; kernel.len()]);
            for (o, yv) in ys.iter_mut().enumerate() {
                unravel(o, out_sp, &mut op);
                let (mut acc, mut count, mut padded_count) = match kind {
                    PoolKind::Max => (f32::NEG_INFINITY, 0usize, 0usize),
                    _ => (0.0, 0, 0),
                };
                for k in 0..k_n {
                    unravel(k, kernel, &mut kp);
                    let mut off = Some(0usize);
                    let mut in_pad_region = true;
                    for s in 0..op.len() {
                        let p = (op[s] * strides_[s] + kp[s] * dilations[s]) as isize
                            - g.pad_begin[s] as isize;
                        if p >= (sp_in[s] + pads_end[s]) as isize {
                            in_pad_region = false;
                        }
                        if p < 0 || p >= sp_in[s] as isize {
                            off = None;
                        } else {
                            off = off.map(|v| v + p as usize * ins[s]);
                        }
                    }
                    if in_pad_region {
                        padded_count += 1;
                    }
                    let Some(off) = off else { continue };
                    let v = xs[off];
                    count += 1;
                    acc = match kind {
                        PoolKind::Max => {
                            if v > acc || v.is_nan() {
                                v
                            } else {
                                acc
                            }
                        }
                        PoolKind::Avg { .. } => acc + v,
                        PoolKind::Lp { p } => acc + v.abs().powf(p),
                    };
                }
                *yv = match kind {
                    PoolKind::Max => acc,
                    PoolKind::Avg {
                        count_include_pad: true,
                    } => acc / padded_count.max(1) as f32,
                    PoolKind::Avg { .. } => acc / count.max(1) as f32,
                    PoolKind::Lp { p } => acc.powf(1.0 / p),
                };
            }
        });
    write_f32(od, out.dtype, &y)
}

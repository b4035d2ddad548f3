//! Index geometry shared by shape rules and the reference: sliding windows (conv, pooling),
//! numpy slicing with steps of either sign, and which dims a reduction removes.

use crate::shape_rule::resolve_axis;
use crate::PadSpec;
use cyb_tensor::{Error, Result};

/// Where a sliding window runs: output size, padding, stride and dilation per spatial dim.
pub struct WindowGeometry {
    pub out: Vec<usize>,
    pub pad_begin: Vec<usize>,
    pub pad_end: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
}

/// Output sizes and begin pads of a window of `kernel` over `spatial`.
pub fn window_geometry(
    op: &str,
    spatial: &[usize],
    kernel: &[usize],
    strides: &[usize],
    dilations: &[usize],
    pads: &PadSpec,
    ceil_mode: bool,
) -> Result<WindowGeometry> {
    let k = spatial.len();
    // Empty lists mean the defaults: stride 1, dilation 1, no padding.
    let ones = vec![1; k];
    let strides = if strides.is_empty() { &ones } else { strides };
    let dilations = if dilations.is_empty() {
        &ones
    } else {
        dilations
    };
    if kernel.len() != k || strides.len() != k || dilations.len() != k {
        return Err(Error::invalid(
            op,
            format!("{k} spatial dims need {k} kernel sizes, strides and dilations"),
        ));
    }
    if strides
        .iter()
        .chain(dilations)
        .chain(kernel)
        .any(|&v| v == 0)
    {
        return Err(Error::invalid(
            op,
            "kernel sizes, strides and dilations must be ≥ 1",
        ));
    }
    let mut out = Vec::with_capacity(k);
    let mut pad_begin = Vec::with_capacity(k);
    let mut pad_end = Vec::with_capacity(k);
    for i in 0..k {
        let (d, s) = (spatial[i] as i128, strides[i] as i128);
        let span = dilations[i] as i128 * (kernel[i] as i128 - 1) + 1;
        let (pb, pe) = match pads {
            PadSpec::Explicit(p) if p.is_empty() => (0, 0),
            PadSpec::Explicit(p) => {
                if p.len() != 2 * k {
                    return Err(Error::invalid(
                        op,
                        format!("{} pads for {k} spatial dims", p.len()),
                    ));
                }
                (p[i] as i128, p[i + k] as i128)
            }
            PadSpec::SameUpper | PadSpec::SameLower => {
                let o = (d + s - 1) / s;
                let total = ((o - 1) * s + span - d).max(0);
                let small = total / 2;
                if *pads == PadSpec::SameUpper {
                    (small, total - small)
                } else {
                    (total - small, small)
                }
            }
        };
        let room = d + pb + pe - span;
        if room < 0 {
            return Err(Error::invalid(
                op,
                format!("window {span} is larger than padded input {}", d + pb + pe),
            ));
        }
        let mut o = if ceil_mode {
            (room + s - 1) / s + 1
        } else {
            room / s + 1
        };
        if ceil_mode && (o - 1) * s >= d + pb {
            o -= 1;
        }
        if o > u32::MAX as i128 || pb > u32::MAX as i128 {
            return Err(Error::invalid(op, "window geometry overflows"));
        }
        out.push(o as usize);
        pad_begin.push(pb as usize);
        pad_end.push(pe as usize);
    }
    Ok(WindowGeometry {
        out,
        pad_begin,
        pad_end,
        strides: strides.to_vec(),
        dilations: dilations.to_vec(),
    })
}

/// numpy slicing for a step of either sign: first index and count.
pub fn slice_steps(len: usize, start: isize, end: isize, step: isize) -> (isize, usize) {
    let n = len as i128;
    let (s, e, st) = (start as i128, end as i128, step as i128);
    let fix = |v: i128| if v < 0 { v + n } else { v };
    let (s, e) = (fix(s), fix(e));
    let (first, count) = if st > 0 {
        let (s, e) = (s.clamp(0, n), e.clamp(0, n));
        (s, if e > s { (e - s + st - 1) / st } else { 0 })
    } else {
        let (s, e) = (s.clamp(-1, n - 1), e.clamp(-1, n - 1));
        (
            s,
            if s > e {
                (s - e + (-st) - 1) / (-st)
            } else {
                0
            },
        )
    };
    (first as isize, count as usize)
}

/// Which dims a reduction over `axes` (all when empty) removes.
pub(crate) fn axis_mask(op: &str, rank: usize, axes: &[isize]) -> Result<Vec<bool>> {
    if axes.is_empty() {
        return Ok(vec![true; rank]);
    }
    let mut mask = vec![false; rank];
    for &a in axes {
        let a = resolve_axis(op, rank, a)?;
        if std::mem::replace(&mut mask[a], true) {
            return Err(Error::invalid(op, format!("axis {a} repeated")));
        }
    }
    Ok(mask)
}

pub(crate) fn reduced(dims: &[usize], mask: &[bool], keepdims: bool) -> Vec<usize> {
    dims.iter()
        .zip(mask)
        .filter_map(|(&d, &m)| match (m, keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

//! ONNX `Resize` (and `Upsample`): separable nearest / linear / cubic interpolation over any
//! dims, with ONNX's coordinate transformations. Each output dim gets a list of
//! (input index, weight) taps; an output element is the tap-weighted sum over all dims.

use crate::host_op::{cast_to, req, HostRun};
use cyb_tensor::memory::filled_vec;
use cyb_tensor::{Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ResizeMode {
    Nearest,
    Linear,
    Cubic,
}

/// How an output coordinate maps back to the input (ONNX `coordinate_transformation_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CoordMode {
    HalfPixel,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfCropAndResize,
    /// `(x + 0.5) / scale` (ONNX opsets 11–12, for nearest).
    TfHalfPixelForNn,
}

/// Rounding of the nearest mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum NearestMode {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

/// Parameters of a resize node. Inputs: `x` at 0; `roi`, `scales` and `sizes` at the given
/// positions when present (opset ≥ 11: 1, 2, 3; opset 10 `Resize` and 9 `Upsample`: scales at 1),
/// or scales from `scales` (opset 7 `Upsample`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ResizeSpec {
    pub mode: ResizeMode,
    pub coord: CoordMode,
    pub nearest: NearestMode,
    pub cubic_a: f32,
    pub exclude_outside: bool,
    pub extrapolation_value: f32,
    pub axes: Option<Vec<i64>>,
    pub scales: Option<Vec<f32>>,
    pub roi_at: Option<usize>,
    pub scales_at: Option<usize>,
    pub sizes_at: Option<usize>,
}

type Taps = Vec<Option<Vec<(usize, f32)>>>;

pub(crate) fn resize(
    r: &mut HostRun,
    s: &ResizeSpec,
    inputs: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let op = "resize";
    let x = req(op, inputs, 0)?;
    let rank = x.dims().len();
    let get = |at: Option<usize>| {
        at.and_then(|i| inputs.get(i))
            .and_then(Option::as_ref)
            .filter(|t| t.numel() > 0)
    };
    let axes: Vec<usize> = match &s.axes {
        Some(a) => a
            .iter()
            .map(|&v| cyb_ops::resolve_axis(op, rank, v as isize))
            .collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    let floats = |r: &mut HostRun, t: &Tensor| -> Result<Vec<f32>> { r.d.to_host(t)?.to_f32_vec() };
    let mut scale = vec![1f32; rank];
    let mut out = x.dims().to_vec();
    if let Some(t) = get(s.sizes_at) {
        let v = r.ints(t)?;
        if v.len() != axes.len() {
            return Err(Error::invalid(
                op,
                format!("{} sizes for {} axes", v.len(), axes.len()),
            ));
        }
        for (&a, &n) in axes.iter().zip(&v) {
            out[a] = usize::try_from(n).map_err(|_| Error::invalid(op, format!("size {n}")))?;
            scale[a] = out[a] as f32 / x.dims()[a] as f32;
        }
    } else {
        let v = match (get(s.scales_at), &s.scales) {
            (Some(t), _) => floats(r, t)?,
            (None, Some(v)) => v.clone(),
            _ => return Err(Error::invalid(op, "neither scales nor sizes given")),
        };
        if v.len() != axes.len() {
            return Err(Error::invalid(
                op,
                format!("{} scales for {} axes", v.len(), axes.len()),
            ));
        }
        for (&a, &f) in axes.iter().zip(&v) {
            if !(f > 0.0 && f.is_finite()) {
                return Err(Error::invalid(op, format!("scale {f}")));
            }
            scale[a] = f;
            let n = (x.dims()[a] as f64 * f as f64).floor();
            if n > 1e9 {
                return Err(Error::invalid(op, format!("output dim {n}")));
            }
            out[a] = n as usize;
        }
    }
    let roi = match get(s.roi_at) {
        Some(t) => Some(floats(r, t)?),
        None => None,
    };
    let mut taps_per_dim: Vec<Taps> = Vec::with_capacity(rank);
    for d in 0..rank {
        let (start, end) = match (&roi, axes.iter().position(|&a| a == d)) {
            (Some(v), Some(i)) if v.len() == 2 * axes.len() => (v[i], v[i + axes.len()]),
            _ => (0.0, 1.0),
        };
        taps_per_dim.push(dim_taps(s, x.dims()[d], out[d], scale[d], start, end));
    }
    let xv = r.d.to_host(x)?.to_f32_vec()?;
    let in_strides = strides(x.dims());
    let mut y = filled_vec("resize", &out, 0f32)?;
    if rank >= 2 && taps_per_dim[..rank - 2].iter().all(is_identity) {
        planes(
            &xv,
            x.dims(),
            &out,
            &taps_per_dim,
            s.extrapolation_value,
            &mut y,
        );
        let t = Tensor::from_f32(&out, &y)?;
        return Ok(vec![cast_to(r, t, x.dtype())?]);
    }
    let mut idx = vec![0usize; rank];
    for (flat, yv) in y.iter_mut().enumerate() {
        let mut rem = flat;
        for dd in (0..rank).rev() {
            idx[dd] = rem % out[dd].max(1);
            rem /= out[dd].max(1);
        }
        *yv = gather(&xv, &in_strides, &taps_per_dim, &idx, 0, 0).unwrap_or(s.extrapolation_value);
    }
    let t = Tensor::from_f32(&out, &y)?;
    Ok(vec![cast_to(r, t, x.dtype())?])
}

/// Whether a dim's taps copy it unchanged (output `o` is input `o` times one).
fn is_identity(t: &Taps) -> bool {
    t.iter()
        .enumerate()
        .all(|(o, l)| matches!(l.as_deref(), Some([(i, w)]) if *i == o && *w == 1.0))
}

/// [`resize`] when only the last two dims change (images, feature maps): plane by plane, row
/// by row, on the threads, each output the same fold over the same taps as [`gather`] (the
/// unchanged outer dims add `0 + 1·v`), so the values are those of the general path.
fn planes(x: &[f32], xd: &[usize], out: &[usize], taps: &[Taps], extra: f32, y: &mut [f32]) {
    use rayon::prelude::*;
    let rank = xd.len();
    let (ih, iw) = (xd[rank - 2], xd[rank - 1]);
    let (oh, ow) = (out[rank - 2], out[rank - 1]);
    let (ty, tx) = (&taps[rank - 2], &taps[rank - 1]);
    if oh * ow == 0 || ih * iw == 0 {
        return;
    }
    let inner = |xp: &[f32], oy: usize, ox: usize| -> Option<f32> {
        let mut acc = 0f32;
        for &(iy, wy) in ty[oy].as_ref()? {
            let row = &xp[iy * iw..][..iw];
            let mut a = 0f32;
            for &(ix, wx) in tx[ox].as_ref()? {
                a += wx * row[ix];
            }
            acc += wy * a;
        }
        Some(acc)
    };
    y.par_chunks_mut(ow).enumerate().for_each(|(r, yr)| {
        let (plane, oy) = (r / oh, r % oh);
        let xp = &x[plane * ih * iw..][..ih * iw];
        for (ox, v) in yr.iter_mut().enumerate() {
            *v = inner(xp, oy, ox).map_or(extra, |a| 0.0 + a);
        }
    });
}

/// Weighted sum over the taps of dims `d..`; `None` if some dim extrapolates.
fn gather(
    x: &[f32],
    st: &[usize],
    taps: &[Taps],
    idx: &[usize],
    d: usize,
    base: usize,
) -> Option<f32> {
    if d == taps.len() {
        return Some(x[base]);
    }
    let list = taps[d][idx[d]].as_ref()?;
    let mut acc = 0f32;
    for &(i, w) in list {
        acc += w * gather(x, st, taps, idx, d + 1, base + i * st[d])?;
    }
    Some(acc)
}

fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// Taps of every output index of one dim (`None`: outside the crop box, extrapolated).
fn dim_taps(
    s: &ResizeSpec,
    len_in: usize,
    len_out: usize,
    scale: f32,
    start: f32,
    end: f32,
) -> Taps {
    // ONNX measures the output length as `len_in · scale`, unrounded (it matters for
    // align_corners and the crop box when scales, not sizes, are given).
    let (li, lo) = (len_in as f32, len_in as f32 * scale);
    (0..len_out)
        .map(|o| {
            let o = o as f32;
            let xo = match s.coord {
                CoordMode::HalfPixel => (o + 0.5) / scale - 0.5,
                CoordMode::PytorchHalfPixel => {
                    if lo > 1.0 {
                        (o + 0.5) / scale - 0.5
                    } else {
                        0.0
                    }
                }
                CoordMode::AlignCorners => {
                    if lo > 1.0 {
                        o * (li - 1.0) / (lo - 1.0)
                    } else {
                        0.0
                    }
                }
                CoordMode::Asymmetric => o / scale,
                CoordMode::TfHalfPixelForNn => (o + 0.5) / scale,
                CoordMode::TfCropAndResize => {
                    if lo > 1.0 {
                        start * (li - 1.0) + o * (end - start) * (li - 1.0) / (lo - 1.0)
                    } else {
                        0.5 * (start + end) * (li - 1.0)
                    }
                }
            };
            if s.coord == CoordMode::TfCropAndResize && (xo < 0.0 || xo > li - 1.0) {
                return None;
            }
            let last = len_in.saturating_sub(1) as isize;
            let clamp = |i: isize| i.clamp(0, last) as usize;
            Some(match s.mode {
                ResizeMode::Nearest => {
                    let f = xo.floor();
                    let frac = xo - f;
                    let i = match s.nearest {
                        NearestMode::Floor => f,
                        NearestMode::Ceil => xo.ceil(),
                        NearestMode::RoundPreferFloor => {
                            if frac == 0.5 {
                                f
                            } else {
                                xo.round()
                            }
                        }
                        NearestMode::RoundPreferCeil => {
                            if frac == 0.5 {
                                f + 1.0
                            } else {
                                xo.round()
                            }
                        }
                    };
                    vec![(clamp(i as isize), 1.0)]
                }
                ResizeMode::Linear => {
                    let xc = xo.clamp(0.0, li - 1.0);
                    let f = xc.floor();
                    let w = xc - f;
                    let i = f as isize;
                    vec![(clamp(i), 1.0 - w), (clamp(i + 1), w)]
                }
                ResizeMode::Cubic => {
                    let f = xo.floor();
                    let t = xo - f;
                    let c = |d: f32| cubic_weight(d, s.cubic_a);
                    let i = f as isize;
                    let mut taps: Vec<(isize, f32)> =
                        (-1..=2).map(|k| (i + k, c(t - k as f32))).collect();
                    if s.exclude_outside {
                        taps.retain(|&(j, _)| (0..=last).contains(&j));
                        let sum: f32 = taps.iter().map(|&(_, w)| w).sum();
                        taps.iter_mut().for_each(|(_, w)| *w /= sum);
                    }
                    taps.into_iter().map(|(j, w)| (clamp(j), w)).collect()
                }
            })
        })
        .collect()
}

/// Keys' cubic convolution kernel with coefficient `a` at distance `d` (ONNX Resize's cubic
/// mode; GridSample's bicubic uses `a = -0.75`).
pub(crate) fn cubic_weight(d: f32, a: f32) -> f32 {
    let d = d.abs();
    if d <= 1.0 {
        ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
    } else if d < 2.0 {
        ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
    } else {
        0.0
    }
}

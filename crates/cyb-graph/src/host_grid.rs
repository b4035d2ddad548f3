//! ONNX GridSample (opset 16, 4-D): samples `x [n, c, h, w]` at the normalised positions of
//! `grid [n, h_out, w_out, 2]` (`(x, y)` in [-1, 1]) with nearest, bilinear or bicubic
//! interpolation and zeros, border or reflection padding.

use crate::host_op::{cast_to, req, HostRun};
use cyb_tensor::memory::filled_vec;
use cyb_tensor::{Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GridMode {
    Nearest,
    Bilinear,
    Bicubic,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GridPadding {
    Zeros,
    Border,
    Reflection,
}

/// Folds `x` into `[lo, hi]` by mirroring at the ends.
fn reflect(x: f32, lo: f32, hi: f32) -> f32 {
    let range = hi - lo;
    if range <= 0.0 {
        return lo;
    }
    let (d, from_lo) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let n = (d / range).floor();
    let r = d - n * range;
    let even = (n as i64) % 2 == 0;
    match (from_lo, even) {
        (true, true) | (false, false) => lo + r,
        _ => hi - r,
    }
}

fn cubic(t: f32) -> [f32; 4] {
    let c = |d: f32| crate::host_resize::cubic_weight(d, -0.75);
    [c(t + 1.0), c(t), c(1.0 - t), c(2.0 - t)]
}

pub(crate) fn grid_sample(
    r: &mut HostRun,
    inputs: &[Option<Tensor>],
    mode: GridMode,
    padding: GridPadding,
    align: bool,
) -> Result<Vec<Tensor>> {
    let op = "grid_sample";
    let (x_t, g_t) = (req(op, inputs, 0)?, req(op, inputs, 1)?);
    let (xd, gd) = (x_t.dims(), g_t.dims());
    if xd.len() != 4 || gd.len() != 4 || gd[3] != 2 || gd[0] != xd[0] {
        return Err(Error::shape(op, xd, gd));
    }
    let (n, c, h, w) = (xd[0], xd[1], xd[2], xd[3]);
    let (ho, wo) = (gd[1], gd[2]);
    let x = r.d.to_host(x_t)?.to_f32_vec()?;
    let g = r.d.to_host(g_t)?.to_f32_vec()?;
    let denorm = |v: f32, len: usize| {
        if align {
            (v + 1.0) / 2.0 * (len as f32 - 1.0)
        } else {
            ((v + 1.0) * len as f32 - 1.0) / 2.0
        }
    };
    let bounds = |len: usize| {
        if align {
            (0.0, len as f32 - 1.0)
        } else {
            (-0.5, len as f32 - 0.5)
        }
    };
    let mut y = filled_vec("grid_sample", &[n, c, ho, wo], 0f32)?;
    for b in 0..n {
        for i in 0..ho * wo {
            let gi = (b * ho * wo + i) * 2;
            let (mut fx, mut fy) = (denorm(g[gi], w), denorm(g[gi + 1], h));
            match padding {
                GridPadding::Border => {
                    fx = fx.clamp(0.0, w as f32 - 1.0);
                    fy = fy.clamp(0.0, h as f32 - 1.0);
                }
                GridPadding::Reflection => {
                    let (bx, by) = (bounds(w), bounds(h));
                    fx = reflect(fx, bx.0, bx.1);
                    fy = reflect(fy, by.0, by.1);
                }
                GridPadding::Zeros => {}
            }
            for ch in 0..c {
                let plane = &x[(b * c + ch) * h * w..(b * c + ch + 1) * h * w];
                let at = |yy: i64, xx: i64| -> f32 {
                    let (mut yy, mut xx) = (yy, xx);
                    let inside = |v: i64, len: usize| v >= 0 && v < len as i64;
                    match padding {
                        GridPadding::Zeros => {
                            if !inside(yy, h) || !inside(xx, w) {
                                return 0.0;
                            }
                        }
                        GridPadding::Border => {
                            yy = yy.clamp(0, h as i64 - 1);
                            xx = xx.clamp(0, w as i64 - 1);
                        }
                        GridPadding::Reflection => {
                            let (bx, by) = (bounds(w), bounds(h));
                            yy = (reflect(yy as f32, by.0, by.1) as i64).clamp(0, h as i64 - 1);
                            xx = (reflect(xx as f32, bx.0, bx.1) as i64).clamp(0, w as i64 - 1);
                        }
                    }
                    plane[yy as usize * w + xx as usize]
                };
                let v = match mode {
                    GridMode::Nearest => {
                        at(fy.round_ties_even() as i64, fx.round_ties_even() as i64)
                    }
                    GridMode::Bilinear => {
                        let (x0, y0) = (fx.floor(), fy.floor());
                        let (dx, dy) = (fx - x0, fy - y0);
                        let (x0, y0) = (x0 as i64, y0 as i64);
                        at(y0, x0) * (1.0 - dx) * (1.0 - dy)
                            + at(y0, x0 + 1) * dx * (1.0 - dy)
                            + at(y0 + 1, x0) * (1.0 - dx) * dy
                            + at(y0 + 1, x0 + 1) * dx * dy
                    }
                    GridMode::Bicubic => {
                        let (x0, y0) = (fx.floor(), fy.floor());
                        let (cx, cy) = (cubic(fx - x0), cubic(fy - y0));
                        let (x0, y0) = (x0 as i64, y0 as i64);
                        let mut acc = 0f32;
                        for (j, wy) in cy.iter().enumerate() {
                            for (k, wx) in cx.iter().enumerate() {
                                acc += wy * wx * at(y0 - 1 + j as i64, x0 - 1 + k as i64);
                            }
                        }
                        acc
                    }
                };
                y[((b * c + ch) * ho * wo) + i] = v;
            }
        }
    }
    let t = Tensor::from_f32(&[n, c, ho, wo], &y)?;
    Ok(vec![cast_to(r, t, x_t.dtype())?])
}

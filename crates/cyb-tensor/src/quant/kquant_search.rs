//! Scale searches shared by the K-quant quantizers.
//!
//! Each takes one sub-block of values and chooses integer levels `L` plus a scale (and, for the
//! asymmetric formats, a min) that minimise a weighted error, the way ggml's reference
//! quantizers do. The arithmetic is written in ggml's order (left to right, f32 throughout) so
//! that the levels and scales come out identical, which is what makes our quantized files
//! byte-equal to llama.cpp's.

use super::nearest_int;

/// Below this magnitude a group counts as all zero.
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

/// Symmetric levels in `[0, 2*nmax)` for `x ≈ scale * (L - nmax)`, weights `w = x²`.
///
/// Starts from the scale that maps the largest-magnitude value (with its sign) to `-nmax`,
/// then tries 18 nearby scales `(nmax ± 0.1·k) / max` and keeps the one whose least-squares
/// fit `scale = Σwxl / Σwl²` explains the most weighted energy (`(Σwxl)² / Σwl²`).
/// Returns the least-squares scale; an all-zero group gives scale 0 and levels 0.
pub(super) fn symmetric_weighted(x: &[f32], nmax: i32, levels: &mut [u8]) -> f32 {
    let (max, amax) = super::signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let l = level(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let mut iscale = -(nmax as f32) / max;
    for (o, &v) in levels.iter_mut().zip(x) {
        *o = (level(iscale, v) + nmax) as u8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for step in (-9..=9).filter(|&s| s != 0) {
        iscale = -(nmax as f32 + 0.1 * step as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (o, &v) in levels.iter_mut().zip(x) {
                *o = (level(iscale, v) + nmax) as u8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Symmetric levels in `[0, 2*nmax)` for Q3_K, refined one value at a time.
///
/// After the initial `-nmax / max` mapping, up to five sweeps move each level to the one that
/// would be optimal if all other levels stayed put, keeping a move only if it raises the
/// explained energy `(Σwxl)² / Σwl²` (weights `w = x²`). Returns `Σwxl / Σwl²`.
/// An all-zero group gives scale 0 and levels 0 (not `nmax`), as ggml does.
pub(super) fn symmetric_refined(x: &[f32], nmax: i32, levels: &mut [u8]) -> f32 {
    let (max, amax) = super::signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut l = [0i32; 16];
    let l = &mut l[..x.len().min(16)];
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (li, &v) in l.iter_mut().zip(x) {
        *li = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        let w = v * v;
        sumlx += w * v * *li as f32;
        suml2 += w * *li as f32 * *li as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for (li, &v) in l.iter_mut().zip(x) {
            let w = v * v;
            let mut slx = sumlx - w * v * *li as f32;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * *li as f32 * *li as f32;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *li {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *li = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for (o, &li) in levels.iter_mut().zip(l.iter()) {
        *o = (li + nmax) as u8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// How an asymmetric search measures error and which scales it tries.
pub(super) struct AffineSearch {
    /// Largest level.
    pub nmax: i32,
    /// The tried inverse scales are `(nmax + rmin + rdelta·k) / (max - min)`,
    /// for `k` in `0..=nstep`.
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    /// Weighted absolute error if true, weighted squared error otherwise.
    pub use_mad: bool,
}

/// Asymmetric levels in `[0, nmax]` for `x ≈ scale * L - min_out`, with `min ≤ 0`.
///
/// Starts from the plain `[min(x, 0), max(x)]` mapping; for each tried scale it rounds the
/// levels and solves the weighted least-squares fit for scale and offset (forcing the offset to
/// 0 if it would come out positive), keeping the candidate with the smallest weighted error.
/// Returns `(scale, min_out)` where `min_out = -offset ≥ 0`.
pub(super) fn affine_weighted(
    x: &[f32],
    weights: &[f32],
    p: &AffineSearch,
    levels: &mut [u8],
) -> (f32, f32) {
    let nmax = p.nmax;
    let Some((&x0, rest)) = x.split_first() else {
        return (0.0, 0.0);
    };
    let (mut min, mut max) = (x0, x0);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x0;
    for (&v, &w) in rest.iter().zip(&weights[1..]) {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
        sum_w += w;
        sum_x += w * v;
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels.fill(0);
        return (0.0, -min);
    }
    let err = |diff: f32| if p.use_mad { diff.abs() } else { diff * diff };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for ((o, &v), &w) in levels.iter_mut().zip(x).zip(weights) {
        let l = nearest_int(iscale * (v - min)).clamp(0, nmax);
        *o = l as u8;
        best_error += w * err(scale * l as f32 + min - v);
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    let mut aux = [0u8; 32];
    let aux = &mut aux[..x.len().min(32)];
    for step in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * step as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for ((a, &v), &w) in aux.iter_mut().zip(x).zip(weights) {
            let l = nearest_int(iscale * (v - min)).clamp(0, nmax);
            *a = l as u8;
            let l = l as f32;
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for ((&a, &v), &w) in aux.iter().zip(x).zip(weights) {
                cur_error += w * err(this_scale * a as f32 + this_min - v);
            }
            if cur_error < best_error {
                levels[..aux.len()].copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

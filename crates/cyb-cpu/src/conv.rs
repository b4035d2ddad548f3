//! `Conv`, `ConvTranspose` and `Pool` on F32.
//!
//! One-group convolutions over one or two spatial dims run as `y[b] = w · cols[b]` on the
//! float GEMM with the output in NCHW directly (`by_panels`): the windows of 32 output
//! positions at a time are packed into one panel of the GEMM's layout right before it is
//! multiplied, and the kernel's rows are its activation rows; where those positions read
//! consecutive input values under every tap (column stride 1, no padding under them) the
//! AVX-512 tile reads the input in place instead, with the same sums in the same order. Other
//! one-group convolutions (more spatial dims, or a CPU without the packed GEMM) gather each
//! output position's window into one row (im2col) times the kernel as a weight matrix. Each
//! output is one dot product in a fixed order, so the thread count does not change results.
//!
//! Grouped convolutions of few input channels per group (depthwise ones: one) over one or two
//! spatial dims run directly (`grouped`): each output plane is the bias plus, per input channel
//! of its group and per kernel tap, the weight times a zero-padded copy of the input plane
//! shifted under that tap (its columns split by the column stride, so every tap reads
//! contiguous runs). The planes are shared among the threads; each plane's sums run in one
//! fixed order. Transposed convolutions and max / average pooling work plane by plane too.

use crate::features::KernelSet;
use crate::matmul;
use crate::matmul::quant_act::ActPrecision;
use crate::matmul::Scratch;
use crate::par::pool::ThreadPool;
use cyb_ops::{LinearAct, Op, PoolKind};
use cyb_tensor::{DType, Error, Result, Shape, Tensor, TensorInfo};

/// Output positions (over the batch) below which a one-group conv takes the window-matrix
/// GEMM rather than panels of positions.
const FEW_POSITIONS: usize = 8;

/// The largest gathered window matrix; bigger convolutions go to the reference.
const MAX_COLS_BYTES: usize = 64 << 20;

/// The window matrix `[batch · positions, in_channels · kernel]` of a supported conv, or `None`.
fn cols_dims(op: &Op, inputs: &[TensorInfo]) -> Option<(usize, usize)> {
    let Op::Conv {
        strides,
        dilations,
        pads,
        group,
        ..
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

/// Most input channels per group the direct grouped kernel takes.
const GROUPED_MAX_CHANNELS: usize = 8;

/// A grouped conv the direct kernel runs: more than one group, at most
/// [`GROUPED_MAX_CHANNELS`] input channels per group, one or two spatial dims, consistent
/// channel counts and a bias of one value per output channel.
fn grouped_geometry(op: &Op, inputs: &[TensorInfo]) -> Option<cyb_ops::WindowGeometry> {
    let Op::Conv {
        strides,
        dilations,
        pads,
        group,
        ..
    } = op
    else {
        return None;
    };
    let (x, w) = (inputs.first()?, inputs.get(1)?);
    let (xd, wd) = (x.shape.dims(), w.shape.dims());
    let g = *group;
    let ok = g > 1
        && (3..=4).contains(&xd.len())
        && wd.len() == xd.len()
        && xd[1] == g.checked_mul(wd[1])?
        && wd[1] <= GROUPED_MAX_CHANNELS
        && wd[0] % g == 0
        && inputs.get(2).is_none_or(|b| b.shape.dims() == [wd[0]]);
    if !ok {
        return None;
    }
    cyb_ops::window_geometry("conv", &xd[2..], &wd[2..], strides, dilations, pads, false).ok()
}

/// F32 input, weight and bias, and a conv that the panel GEMM or the grouped kernel takes, or
/// one group with a window matrix of modest size and a GEMM for F32 weights on this kernel
/// set (im2col).
pub(crate) fn supports(set: KernelSet, op: &Op, inputs: &[TensorInfo]) -> bool {
    if !(2..=3).contains(&inputs.len()) || inputs.iter().any(|i| i.dtype != DType::F32) {
        return false;
    }
    if grouped_geometry(op, inputs).is_some() || panels_take(set, op, inputs) {
        return true;
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
    precision: ActPrecision,
    pool: &ThreadPool,
    scratch: &Scratch,
    op: &Op,
    inputs: &[Tensor],
) -> Result<Tensor> {
    let infos: Vec<TensorInfo> = inputs.iter().map(Tensor::info).collect();
    if let Some(g) = grouped_geometry(op, &infos) {
        return grouped(crate::par::Par { pool, set }, op, &g, inputs);
    }
    // Few output positions (a conv over a few frames): a panel of NR positions would be
    // mostly padding, while the window matrix is small and the matmul reads the kernel as
    // packed weights (packed once, then cached).
    let cols = cols_dims(op, &infos);
    if cols.is_none_or(|(rows, _)| rows >= FEW_POSITIONS) {
        if let Some(y) = by_panels(set, pool, op, inputs)? {
            return Ok(y);
        }
    }
    let (
        Some((rows, width)),
        Op::Conv {
            strides,
            dilations,
            pads,
            act,
            ..
        },
    ) = (cols, op)
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
    let y = matmul::matmul(set, precision, pool, scratch, &a, &wmat, linear)?;
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
    if *act != LinearAct::None {
        crate::elementwise::bias_act(set, std::iter::once(&mut out[..]), None, *act);
    }
    let mut dims = vec![n, m];
    dims.extend_from_slice(&g.out);
    Tensor::from_f32(&dims, &out)
}

/// Bytes of one panel of packed windows [`by_panels`] takes (beyond: the im2col path, then the
/// reference).
const MAX_PANEL_BYTES: usize = 64 << 20;

/// Whether [`by_panels`] runs this conv: one group over one or two spatial dims, consistent
/// channel counts, a bias of one value per output channel, the packed float GEMM on this
/// kernel set, and a panel (`NR` positions × input channels × taps) of modest size.
fn panels_take(set: KernelSet, op: &Op, inputs: &[TensorInfo]) -> bool {
    let Op::Conv {
        strides,
        dilations,
        pads,
        group: 1,
        ..
    } = op
    else {
        return false;
    };
    let (Some(x), Some(w)) = (inputs.first(), inputs.get(1)) else {
        return false;
    };
    let (xd, wd) = (x.shape.dims(), w.shape.dims());
    let panel_bytes = wd
        .iter()
        .skip(1)
        .try_fold(matmul::sgemm::tile::NR * 4, |a, &d| a.checked_mul(d));
    matmul::sgemm::tile(DType::F32, set).is_some()
        && (3..=4).contains(&xd.len())
        && wd.len() == xd.len()
        && wd[1] == xd[1]
        && panel_bytes.is_some_and(|b| b > 0 && b <= MAX_PANEL_BYTES)
        && inputs.get(2).is_none_or(|b| b.shape.dims() == [wd[0]])
        && cyb_ops::window_geometry("conv", &xd[2..], &wd[2..], strides, dilations, pads, false)
            .is_ok()
}

/// A one-group conv over one or two spatial dims as `y[b] = w · cols[b]` with the output in
/// NCHW directly: the kernel's `[out_channels, in_channels · taps]` rows are the GEMM's
/// activation rows, read in place, and the windows of `NR` output positions at a time are
/// packed into one panel of the float GEMM's layout (one run of `NR` values per input channel
/// and tap) right before the register tiles multiply it, so the panel stays in cache and
/// there is neither an im2col matrix nor a transpose of the result. Panels are shared among
/// the threads; every output is one sum over the channels and taps in order, then its bias,
/// whatever the thread count. `None` where the packed GEMM has no kernel for this CPU or the
/// shape is outside this path.
fn by_panels(
    set: KernelSet,
    pool: &ThreadPool,
    op: &Op,
    inputs: &[Tensor],
) -> Result<Option<Tensor>> {
    use matmul::sgemm::{
        self,
        tile::{MR, NR},
    };
    let infos: Vec<TensorInfo> = inputs.iter().map(Tensor::info).collect();
    let (
        true,
        Some(tile),
        Op::Conv {
            strides,
            dilations,
            pads,
            act,
            ..
        },
    ) = (
        panels_take(set, op, &infos),
        sgemm::tile(DType::F32, set),
        op,
    )
    else {
        return Ok(None);
    };
    let (x, w) = (&inputs[0], &inputs[1]);
    let (xd, wd) = (x.dims(), w.dims());
    let g = cyb_ops::window_geometry("conv", &xd[2..], &wd[2..], strides, dilations, pads, false)?;
    let (n, c, m) = (xd[0], xd[1], wd[0]);
    let [ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw] = window_grid(xd, &wd[2..], &g);
    let (taps, positions) = (kh * kw, oh * ow);
    let k = c * taps;
    let panels = positions.div_ceil(NR);
    let panel_bytes = k * NR * 4;
    if positions == 0 || m == 0 {
        return Ok(None);
    }
    let (xs, ws) = (x.as_f32()?, w.as_f32()?);
    let bias = inputs.get(2).map(Tensor::as_f32).transpose()?;
    let (xs, ws, bias) = (&*xs, &*ws, bias.as_deref());
    let mut dims = vec![n, m];
    dims.extend_from_slice(&g.out);
    cyb_tensor::memory::check_tensor("conv", &dims, DType::F32)?;
    let mut buf = cyb_tensor::AlignedBuf::for_overwrite(n * m * positions * 4);
    let out =
        crate::par::pool::DisjointOut::new(bytemuck::cast_slice_mut::<u8, f32>(buf.as_bytes_mut()));
    let units = n * panels;
    let parts = crate::par::pool::balanced_parts(units, pool.threads(), panel_bytes);
    let windows = WindowRuns {
        set,
        dims: [c, ih, iw, oh, ow, kh, kw],
        geometry: [sh, sw, dh, dw, ph, pw],
    };
    pool.run_parts(parts, &|t| {
        let mut panel = cyb_tensor::AlignedBuf::for_overwrite(panel_bytes);
        let mut part = [0f32; MR * NR];
        for u in crate::par::pool::split(units, parts, t) {
            let (b, p) = (u / panels, u % panels);
            let xb = &xs[b * c * ih * iw..][..c * ih * iw];
            // The taps read in place where the panel's positions are one run of consecutive
            // input values under every tap, else packed.
            let direct = windows.first_input(p * NR);
            if direct.is_none() {
                let dst: &mut [f32] = bytemuck::cast_slice_mut(panel.as_bytes_mut());
                // Compiled for the vector units (strided runs become shuffles).
                crate::par::wide(
                    set,
                    #[inline(always)]
                    || {
                        pack_windows(
                            xb,
                            dst,
                            p * NR,
                            (c, ih, iw),
                            (oh, ow),
                            (kh, kw),
                            [sh, sw, dh, dw, ph, pw],
                        )
                    },
                );
            }
            let nc = NR.min(positions - p * NR);
            for r0 in (0..m).step_by(MR) {
                let nr = MR.min(m - r0);
                let rows = &ws[r0 * k..(r0 + nr) * k];
                // Rows of image b are rows b·m.. of the output read as one [n·m, positions]
                // matrix.
                let (y0, at) = (b * m + r0, (b * m + r0) * positions + p * NR);
                // SAFETY: `tile` is the F32 tile of this CPU's kernel set, and the window tile
                // is only taken on AVX-512 (`WindowRuns::first_input`); columns p·NR.. of rows
                // y0..y0 + nr belong to this unit only.
                unsafe {
                    match direct {
                        #[cfg(target_arch = "x86_64")]
                        Some(first) => matmul::sgemm::x86::f32_window_tile(
                            &xb[first..],
                            windows.taps(),
                            rows,
                            k,
                            nr,
                            out.strided(at, at + (nr - 1) * positions + NR),
                            positions,
                        ),
                        _ => matmul::sgemm::tile_into(
                            tile,
                            panel.as_bytes(),
                            rows,
                            k,
                            k,
                            (y0, nr),
                            (p * NR, nc, positions),
                            &out,
                            &mut part,
                            (true, true),
                            None,
                            None,
                        ),
                    }
                    if bias.is_some() || *act != LinearAct::None {
                        let mut segs: [&mut [f32]; MR] = Default::default();
                        for (r, seg) in segs.iter_mut().enumerate().take(nr) {
                            *seg = out.slice(at + r * positions..at + r * positions + nc);
                            if let Some(bias) = bias {
                                let v = bias[r0 + r];
                                seg.iter_mut().for_each(|o| *o += v);
                            }
                        }
                        // The activation on the tile's rows while they are in L1.
                        if *act != LinearAct::None {
                            crate::elementwise::bias_act(
                                set,
                                segs.into_iter().take(nr),
                                None,
                                *act,
                            );
                        }
                    }
                }
            }
        }
    });
    crate::par::f32_tensor(&dims, buf).map(Some)
}

/// Where a conv's panels can be read in place (`f32_window_tile`): input and output dims
/// `[c, ih, iw, oh, ow, kh, kw]` and `[sh, sw, dh, dw, ph, pw]` of one image.
struct WindowRuns {
    set: KernelSet,
    dims: [usize; 7],
    geometry: [usize; 6],
}

impl WindowRuns {
    /// The input offset (in one image) under the first tap of output positions
    /// `first..first + NR`, when these are one run of a row with column stride 1 and every
    /// tap's run lies inside the input (no padding under it), on a CPU with the window tile.
    fn first_input(&self, first: usize) -> Option<usize> {
        use matmul::sgemm::tile::NR;
        let [_, ih, iw, _, ow, kh, kw] = self.dims;
        let [sh, sw, dh, dw, ph, pw] = self.geometry;
        let usable = cfg!(target_arch = "x86_64") && self.set == KernelSet::Avx512;
        if !usable || sw != 1 || kh == 0 || kw == 0 {
            return None;
        }
        let (oy, ox) = (first / ow, first % ow);
        let top = (oy * sh).checked_sub(ph)?;
        let left = ox.checked_sub(pw)?;
        let inside =
            ox + NR <= ow && top + (kh - 1) * dh < ih && left + NR - 1 + (kw - 1) * dw < iw;
        inside.then_some(top * iw + left)
    }

    #[cfg(target_arch = "x86_64")]
    fn taps(&self) -> matmul::sgemm::x86::Taps {
        let [c, ih, iw, _, _, kh, kw] = self.dims;
        let [_, _, dh, dw, _, _] = self.geometry;
        matmul::sgemm::x86::Taps {
            counts: [c, kh, kw],
            steps: [ih * iw, dh * iw, dw],
        }
    }
}

/// The panel of output positions `first..first + NR` (fewer at the end: zeros past them) of
/// one image `x` (`[c, ih, iw]`): for each input channel and tap (the kernel's order), the
/// `NR` input values under it, zero where the window leaves the image. Positions in one output
/// row are copied as runs.
#[inline(always)]
fn pack_windows(
    x: &[f32],
    dst: &mut [f32],
    first: usize,
    (c, ih, iw): (usize, usize, usize),
    (oh, ow): (usize, usize),
    (kh, kw): (usize, usize),
    [sh, sw, dh, dw, ph, pw]: [usize; 6],
) {
    use matmul::sgemm::tile::NR;
    let count = NR.min(oh * ow - first);
    if count < NR {
        for row in dst.chunks_exact_mut(NR) {
            row[count..].fill(0.0);
        }
    }
    // Every value of the panel is written once: the input under the tap, or zero.
    let mut j = 0;
    while j < count {
        // A run of positions in one output row: columns ox0.. of row oy.
        let (oy, ox0) = ((first + j) / ow, (first + j) % ow);
        let len = (ow - ox0).min(count - j);
        for ky in 0..kh {
            let iy = (oy * sh + ky * dh) as isize - ph as isize;
            let row_inside = iy >= 0 && iy < ih as isize;
            for kx in 0..kw {
                // Columns t of the run whose input column (ox0 + t)·sw + kx·dw − pw is inside.
                let shift = ((ox0 * sw + kx * dw) as isize) - pw as isize;
                let cols = if row_inside {
                    inside(shift, sw, iw, len)
                } else {
                    0..0
                };
                let start = (cols.start * sw) as isize + shift;
                let src0 = (iy.max(0) as usize * iw).saturating_add_signed(start);
                for ci in 0..c {
                    let row = &mut dst[((ci * kh + ky) * kw + kx) * NR + j..][..len];
                    if cols.is_empty() {
                        row.fill(0.0);
                        continue;
                    }
                    row[..cols.start].fill(0.0);
                    row[cols.end..].fill(0.0);
                    let xr = &x[ci * ih * iw + src0..];
                    if sw == 1 {
                        row[cols.clone()].copy_from_slice(&xr[..cols.len()]);
                    } else {
                        for (t, o) in row[cols.clone()].iter_mut().enumerate() {
                            *o = xr[t * sw];
                        }
                    }
                }
            }
        }
        j += len;
    }
}

/// A thread's buffers of the grouped kernel, kept from one plane (and call) to the next.
#[derive(Default)]
struct GroupedScratch {
    /// The padded input plane (`sw` phases of `phase` values), zero outside the image.
    padded: Vec<f32>,
    /// One padded input row (`sw · wq` values), zero outside the image.
    row: Vec<f32>,
    /// A plane's sums on rows `wq` wide (row stride 1).
    acc: Vec<f32>,
    /// Each tap's weight and offset in `padded`.
    taps: Vec<(f32, usize)>,
    /// The geometry `padded` and `row` are laid out for.
    laid_out: Option<[usize; 12]>,
}

thread_local! {
    static GROUPED: std::cell::RefCell<GroupedScratch> =
        std::cell::RefCell::new(GroupedScratch::default());
}

/// A grouped conv of few channels per group over one or two spatial dims (see the module doc).
fn grouped(
    par: crate::par::Par<'_>,
    op: &Op,
    g: &cyb_ops::WindowGeometry,
    inputs: &[Tensor],
) -> Result<Tensor> {
    let Op::Conv { group, act, .. } = op else {
        return Err(Error::invalid("conv", "not a conv"));
    };
    let act = *act;
    // The activation on each finished plane, still in cache.
    let finish = |y: &mut [f32]| {
        if act != LinearAct::None {
            crate::elementwise::bias_act(par.set, std::iter::once(y), None, act);
        }
    };
    let (x, w) = (&inputs[0], &inputs[1]);
    let (xd, wd) = (x.dims(), w.dims());
    let (c, m, cg) = (xd[1], wd[0], wd[1]);
    let mg = m / group;
    let [ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw] = window_grid(xd, &wd[2..], g);
    // The padded input plane, its columns split by their remainder modulo the column stride
    // (phase q holds padded columns q, q + sw, ...), so that every tap reads a contiguous run:
    // output column ox under tap column kx reads padded column ox·sw + kx·dw, which is phase
    // (kx·dw) mod sw at ox + (kx·dw) div sw.
    let (xs, ws) = (x.as_f32()?, w.as_f32()?);
    let bias = inputs.get(2).map(Tensor::as_f32).transpose()?;
    let (xs, ws, bias) = (&*xs, &*ws, bias.as_deref());
    let mut dims = vec![xd[0], m];
    dims.extend_from_slice(&g.out);
    if oh == 0 || ow == 0 || kh == 0 || kw == 0 {
        return by_planes(par, &dims, |idx, y| {
            y.fill(bias.map_or(0.0, |b| b[idx % m]));
            finish(y);
        });
    }
    let rows = (oh - 1) * sh + (kh - 1) * dh + 1;
    let wq = ow + ((kw - 1) * dw).div_ceil(sw);
    let phase = rows * wq + wq;
    // With one row stride each tap is one run over all output rows at once, computed on rows
    // `wq` wide (the columns past `ow` are dropped).
    let flat = sh == 1;
    by_planes(
        par,
        &dims,
        #[inline(always)]
        |idx, y| {
            let (b, oc) = (idx / m, idx % m);
            let gi = oc / mg;
            let geometry = [ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw];
            // This thread's buffers, taken out of its slot so the loops below stay in this
            // function, compiled for the vector units.
            let mut scratch = GROUPED.take();
            let GroupedScratch {
                padded,
                row,
                acc,
                taps,
                laid_out,
            } = &mut scratch;
            // The cells no input value lands in are the same for every plane of this
            // geometry: zero once, then only the image's cells are written again.
            if *laid_out != Some(geometry) {
                padded.clear();
                padded.resize(sw * phase, 0.0);
                row.clear();
                row.resize(sw * wq, 0.0);
                *laid_out = Some(geometry);
            }
            // Sums on the wider rows (flat), or in place in `y`.
            let b0 = bias.map_or(0.0, |b| b[oc]);
            if flat {
                acc.clear();
                acc.resize(oh * wq, b0);
            } else {
                y.fill(b0);
            }
            for ci in 0..cg {
                let xp = &xs[(b * c + gi * cg + ci) * ih * iw..][..ih * iw];
                for r in 0..rows {
                    let iy = r as isize - ph as isize;
                    if iy < 0 || iy >= ih as isize {
                        continue;
                    }
                    let xr = &xp[iy as usize * iw..][..iw];
                    if sw == 2 {
                        // The padded row, then its even and odd columns in one pass.
                        let start = pw.min(row.len());
                        let take = iw.min(row.len() - start);
                        row[start..start + take].copy_from_slice(&xr[..take]);
                        let (even, odd) = padded.split_at_mut(phase);
                        let (even, odd) = (&mut even[r * wq..][..wq], &mut odd[r * wq..][..wq]);
                        for ((e, o), pair) in even.iter_mut().zip(odd).zip(row.chunks_exact(2)) {
                            *e = pair[0];
                            *o = pair[1];
                        }
                        continue;
                    }
                    for q in 0..sw {
                        let dst = &mut padded[q * phase + r * wq..][..wq];
                        // Padded column q + j·sw is input column q + j·sw − pw.
                        let shift = q as isize - pw as isize;
                        let cols = inside(shift, sw, iw, wq);
                        let first = ((cols.start * sw) as isize + shift) as usize;
                        if sw == 1 {
                            dst[cols.clone()].copy_from_slice(&xr[first..first + cols.len()]);
                        } else {
                            for (t, o) in dst[cols.clone()].iter_mut().enumerate() {
                                *o = xr[first + t * sw];
                            }
                        }
                    }
                }
                let wk = &ws[(oc * cg + ci) * kh * kw..][..kh * kw];
                let tap = |t: usize| {
                    let (ky, kx) = (t / kw, t % kw);
                    let (q, off) = ((kx * dw) % sw, (kx * dw) / sw);
                    (q * phase + ky * dh * wq + off, q * phase + off)
                };
                if flat {
                    // Every tap is one run over all output rows: blocks of outputs stay in
                    // registers while the taps pass over them (each output still sums the
                    // taps in order).
                    taps.clear();
                    taps.extend(wk.iter().enumerate().map(|(t, &wv)| (wv, tap(t).0)));
                    accumulate_taps(acc, padded, taps);
                    continue;
                }
                for (t, &wv) in wk.iter().enumerate() {
                    let ky = t / kw;
                    let at = tap(t).1;
                    for oy in 0..oh {
                        let run = &padded[at + (oy * sh + ky * dh) * wq..][..ow];
                        for (o, &v) in y[oy * ow..][..ow].iter_mut().zip(run) {
                            *o += wv * v;
                        }
                    }
                }
            }
            if flat {
                for (yr, ar) in y.chunks_exact_mut(ow).zip(acc.chunks_exact(wq)) {
                    yr.copy_from_slice(&ar[..ow]);
                }
            }
            finish(y);
            GROUPED.set(scratch);
        },
    )
}

/// `acc[o] += Σ_taps w · src[at + o]` for every `o`, the taps added in order, `TAP_BLOCK`
/// outputs at a time held in registers across all the taps.
#[inline(always)]
fn accumulate_taps(acc: &mut [f32], src: &[f32], taps: &[(f32, usize)]) {
    const TAP_BLOCK: usize = 64;
    let n = acc.len();
    let mut o0 = 0;
    while o0 + TAP_BLOCK <= n {
        let block = &mut acc[o0..o0 + TAP_BLOCK];
        let mut a: [f32; TAP_BLOCK] = block.try_into().expect("a block of TAP_BLOCK");
        for &(w, at) in taps {
            let run: &[f32; TAP_BLOCK] = src[at + o0..at + o0 + TAP_BLOCK]
                .try_into()
                .expect("a run of TAP_BLOCK");
            for i in 0..TAP_BLOCK {
                a[i] += w * run[i];
            }
        }
        block.copy_from_slice(&a);
        o0 += TAP_BLOCK;
    }
    for &(w, at) in taps {
        for (o, &v) in acc[o0..].iter_mut().zip(&src[at + o0..at + n]) {
            *o += w * v;
        }
    }
}

/// The `j` in `0..count` for which `j·stride + shift` lies in `0..limit`.
fn inside(shift: isize, stride: usize, limit: usize, count: usize) -> std::ops::Range<usize> {
    let lo = if shift >= 0 {
        0
    } else {
        (-shift as usize).div_ceil(stride)
    };
    let hi = if (limit as isize) > shift {
        ((limit as isize - 1 - shift) as usize / stride + 1).min(count)
    } else {
        0
    };
    lo..hi.max(lo)
}

/// [`grid`] of a window op over `xd` (`[n, c, spatial..]`) with `kernel` and geometry `g`.
fn window_grid(xd: &[usize], kernel: &[usize], g: &cyb_ops::WindowGeometry) -> [usize; 12] {
    grid(
        &xd[2..],
        &g.out,
        kernel,
        &g.strides,
        &g.dilations,
        &g.pad_begin,
    )
}

/// A window op over one or two spatial dims as rows and columns (one dim is a plane of one
/// row): input, output and kernel rows and columns, strides, dilations and begin pads, in the
/// order `[ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw]`.
fn grid(
    input: &[usize],
    out: &[usize],
    kernel: &[usize],
    strides: &[usize],
    dilations: &[usize],
    pad_begin: &[usize],
) -> [usize; 12] {
    let ((ih, iw), (oh, ow), (kh, kw)) = (rows_cols(input), rows_cols(out), rows_cols(kernel));
    let (sh, sw) = pair(strides, 1);
    let (dh, dw) = pair(dilations, 1);
    // Begin pads (a list of begin and end pads gives its first half).
    let (ph, pw) = pair(&pad_begin[..input.len().min(pad_begin.len())], 0);
    [ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw]
}

/// Rows and columns of one or two spatial dims (one dim is a plane of one row).
fn rows_cols(d: &[usize]) -> (usize, usize) {
    if d.len() == 1 {
        (1, d[0])
    } else {
        (d[0], d[1])
    }
}

/// A per-dim setting of one or two spatial dims as (rows, columns); one dim's rows get
/// `default`.
fn pair(v: &[usize], default: usize) -> (usize, usize) {
    if v.len() == 1 {
        (default, v[0])
    } else {
        (v[0], v[1])
    }
}

/// An F32 tensor of `dims` (`[batch, channels, spatial..]`) whose planes are each filled on
/// the pool by `fill(plane index, plane)`.
fn by_planes(
    par: crate::par::Par<'_>,
    dims: &[usize],
    fill: impl Fn(usize, &mut [f32]) + Sync,
) -> Result<Tensor> {
    cyb_tensor::memory::check_tensor("conv", dims, DType::F32)?;
    let planes = dims[0] * dims[1];
    let plane: usize = dims[2..].iter().product();
    let mut buf = cyb_tensor::AlignedBuf::for_overwrite(planes * plane * 4);
    let out = crate::par::pool::DisjointOut::new(bytemuck::cast_slice_mut(buf.as_bytes_mut()));
    let parts = planes.min(par.pool.threads() * 4).max(1);
    par.pool.run_parts(parts, &|p| {
        // Compiled for the CPU's vector units.
        crate::par::wide(
            par.set,
            #[inline(always)]
            || {
                for idx in crate::par::pool::split(planes, parts, p) {
                    // SAFETY: each plane index belongs to one part.
                    fill(idx, unsafe { out.slice(idx * plane..(idx + 1) * plane) });
                }
            },
        )
    });
    crate::par::f32_tensor(dims, buf)
}

/// Whether the cpu backend runs this `ConvTranspose`: F32, one or two spatial dims, the
/// geometry lists as long as the spatial rank, channels that split into the groups.
pub(crate) fn supports_transpose(op: &Op, inputs: &[TensorInfo]) -> bool {
    let Op::ConvTranspose {
        strides,
        dilations,
        pads,
        group,
        ..
    } = op
    else {
        return false;
    };
    let (Some(x), Some(w)) = (inputs.first(), inputs.get(1)) else {
        return false;
    };
    let (xd, wd) = (x.shape.dims(), w.shape.dims());
    let k = xd.len().saturating_sub(2);
    (2..=3).contains(&inputs.len())
        && inputs.iter().all(|i| i.dtype == DType::F32)
        && (1..=2).contains(&k)
        && wd.len() == xd.len()
        && *group > 0
        && xd[1] == wd[0]
        && xd[1] % group == 0
        && strides.len() == k
        && dilations.len() == k
        && pads.len() >= k
        && strides.iter().all(|&s| s > 0)
        && inputs
            .get(2)
            .is_none_or(|b| b.shape.dims() == [wd[1] * group])
        && cyb_ops::output_infos(op, inputs).is_ok()
}

/// `ConvTranspose` over one or two spatial dims: each output plane (batch, output channel) is
/// the bias plus, per input channel of its group and kernel tap, the input plane scattered
/// through the tap (`y[i·s + k·d − p] += w · x[i]`), row by row. Planes are shared among the
/// threads; each plane's sums run in one fixed order.
pub(crate) fn conv_transpose(
    par: crate::par::Par<'_>,
    op: &Op,
    inputs: &[Tensor],
) -> Result<Tensor> {
    let Op::ConvTranspose {
        strides,
        dilations,
        pads,
        group,
        ..
    } = op
    else {
        return Err(Error::invalid("conv_transpose", "not a conv_transpose"));
    };
    let infos: Vec<TensorInfo> = inputs.iter().map(Tensor::info).collect();
    let out = cyb_ops::output_infos(op, &infos)?;
    let od = out[0].shape.dims().to_vec();
    if *group == 1 {
        if let Some(y) = transpose_by_panels(par, op, inputs, &od)? {
            return Ok(y);
        }
    }
    let (x, w) = (&inputs[0], &inputs[1]);
    let (xd, wd) = (x.dims(), w.dims());
    let (c, m) = (xd[1], od[1]);
    let (cg, mg) = (c / group, m / group);
    let [ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw] =
        grid(&xd[2..], &od[2..], &wd[2..], strides, dilations, pads);
    let (xs, ws) = (x.as_f32()?, w.as_f32()?);
    let bias = inputs.get(2).map(Tensor::as_f32).transpose()?;
    let (xs, ws, bias) = (&*xs, &*ws, bias.as_deref());
    by_planes(
        par,
        &od,
        #[inline(always)]
        |idx, y| {
            let (b, oc) = (idx / m, idx % m);
            let (gi, oo) = (oc / mg, oc % mg);
            y.fill(bias.map_or(0.0, |b| b[oc]));
            for ci in gi * cg..(gi + 1) * cg {
                let xp = &xs[(b * c + ci) * ih * iw..][..ih * iw];
                let wk = &ws[(ci * mg + oo) * kh * kw..][..kh * kw];
                for (t, &wv) in wk.iter().enumerate() {
                    let (ky, kx) = (t / kw, t % kw);
                    // Input columns ix whose output column ix·sw + kx·dw − pw is inside.
                    let shift = (kx * dw) as isize - pw as isize;
                    let cols = inside(shift, sw, ow, iw);
                    if cols.is_empty() {
                        continue;
                    }
                    for iy in 0..ih {
                        let oy = (iy * sh + ky * dh) as isize - ph as isize;
                        if oy < 0 || oy >= oh as isize {
                            continue;
                        }
                        let xr = &xp[iy * iw..][..iw];
                        let yr = &mut y[oy as usize * ow..][..ow];
                        let first = (cols.start * sw) as isize + shift;
                        for (j, &v) in xr[cols.clone()].iter().enumerate() {
                            yr[first as usize + j * sw] += wv * v;
                        }
                    }
                }
            }
        },
    )
}

/// A one-group `ConvTranspose` as a GEMM then a scatter: `cols[b] = wᵀ · x[b]` on the packed
/// float GEMM (`[out_channels · taps, positions]`: the kernel's rows per output channel and tap
/// are the activation rows, each image's planes packed straight into panels), then each
/// output plane is its bias plus, tap by tap, that tap's row of `cols` added at
/// `i·stride + k·dilation − pad`. `None` where the packed GEMM has no kernel for this CPU or
/// the buffers would be too large.
fn transpose_by_panels(
    par: crate::par::Par<'_>,
    op: &Op,
    inputs: &[Tensor],
    od: &[usize],
) -> Result<Option<Tensor>> {
    use matmul::sgemm::{self, tile::NR};
    let Op::ConvTranspose {
        strides,
        dilations,
        pads,
        ..
    } = op
    else {
        return Ok(None);
    };
    let Some(tile) = sgemm::tile(DType::F32, par.set) else {
        return Ok(None);
    };
    let (x, w) = (&inputs[0], &inputs[1]);
    let (xd, wd) = (x.dims(), w.dims());
    let (n, c, m) = (xd[0], xd[1], od[1]);
    let [ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw] =
        grid(&xd[2..], &od[2..], &wd[2..], strides, dilations, pads);
    let (taps, positions) = (kh * kw, ih * iw);
    let rows = m * taps;
    let panels = positions.div_ceil(NR);
    let packed_bytes = panels.saturating_mul(c).saturating_mul(NR * 4);
    let cols_bytes = n
        .saturating_mul(rows)
        .saturating_mul(positions)
        .saturating_mul(4);
    if c == 0 || rows == 0 || positions == 0 || packed_bytes.max(cols_bytes) > MAX_PANEL_BYTES {
        return Ok(None);
    }
    let (xs, ws) = (x.as_f32()?, w.as_f32()?);
    let bias = inputs.get(2).map(Tensor::as_f32).transpose()?;
    let (xs, bias) = (&*xs, bias.as_deref());
    // Row co·taps + t of wᵀ: the weights of output channel co and tap t over the input
    // channels (w is [c, m, kh, kw]).
    let mut wt = vec![0f32; rows * c];
    for ci in 0..c {
        for (r, &v) in ws[ci * rows..][..rows].iter().enumerate() {
            wt[r * c + ci] = v;
        }
    }
    let mut packed = sgemm::Panels {
        n: positions,
        k: c,
        elem: 4,
        data: cyb_tensor::AlignedBuf::for_overwrite(packed_bytes),
        successor: std::sync::Mutex::new(std::sync::Weak::new()),
    };
    let mut cols = cyb_tensor::AlignedBuf::for_overwrite(cols_bytes);
    let cols: &mut [f32] = bytemuck::cast_slice_mut(cols.as_bytes_mut());
    for (b, cb) in cols.chunks_exact_mut(rows * positions).enumerate() {
        let xb = &xs[b * c * positions..][..c * positions];
        let dst = crate::par::pool::DisjointOut::new(bytemuck::cast_slice_mut::<u8, f32>(
            packed.data.as_bytes_mut(),
        ));
        let parts = panels.min(par.pool.threads() * 4);
        par.pool.run_parts(parts, &|t| {
            for p in crate::par::pool::split(panels, parts, t) {
                // SAFETY: panel p belongs to this part only.
                let panel = unsafe { dst.slice(p * c * NR..(p + 1) * c * NR) };
                let count = NR.min(positions - p * NR);
                panel.fill(0.0);
                for ci in 0..c {
                    panel[ci * NR..][..count]
                        .copy_from_slice(&xb[ci * positions + p * NR..][..count]);
                }
            }
        });
        // SAFETY: `tile` is the F32 tile of this CPU's kernel set.
        unsafe { sgemm::gemm(par.pool, tile, &packed, &wt, rows, cb, None, None) };
    }
    let cols = &*cols;
    by_planes(
        par,
        od,
        #[inline(always)]
        |idx, y| {
            let (b, co) = (idx / m, idx % m);
            y.fill(bias.map_or(0.0, |v| v[co]));
            for t in 0..taps {
                let (ky, kx) = (t / kw, t % kw);
                let row = &cols[(b * rows + co * taps + t) * positions..][..positions];
                // Input columns ix whose output column ix·sw + kx·dw − pw is inside.
                let shift = (kx * dw) as isize - pw as isize;
                let span = inside(shift, sw, ow, iw);
                if span.is_empty() {
                    continue;
                }
                let first = ((span.start * sw) as isize + shift) as usize;
                for iy in 0..ih {
                    let oy = (iy * sh + ky * dh) as isize - ph as isize;
                    if oy < 0 || oy >= oh as isize {
                        continue;
                    }
                    let src = &row[iy * iw..][span.clone()];
                    let yr = &mut y[oy as usize * ow..][..ow];
                    if sw == 1 {
                        for (o, &v) in yr[first..first + src.len()].iter_mut().zip(src) {
                            *o += v;
                        }
                    } else {
                        for (j, &v) in src.iter().enumerate() {
                            yr[first + j * sw] += v;
                        }
                    }
                }
            }
        },
    )
    .map(Some)
}

/// The multi-index of flat index `i` over `dims` (row-major).
fn unravel(mut i: usize, dims: &[usize], out: &mut [usize]) {
    for (d, o) in dims.iter().zip(out.iter_mut()).rev() {
        *o = i % d.max(&1);
        i /= d.max(&1);
    }
}

/// Whether the cpu backend runs this `Pool`: max or average pooling of an F32 tensor over one
/// or two spatial dims, a kernel of that rank.
pub(crate) fn supports_pool(op: &Op, inputs: &[TensorInfo]) -> bool {
    let Op::Pool { kind, kernel, .. } = op else {
        return false;
    };
    let [x] = inputs else { return false };
    matches!(kind, PoolKind::Max | PoolKind::Avg { .. })
        && x.dtype == DType::F32
        && (3..=4).contains(&x.shape.rank())
        && kernel.len() == x.shape.rank() - 2
        && cyb_ops::output_infos(op, inputs).is_ok_and(|o| o[0].dtype == DType::F32)
}

/// Max and average pooling over one or two spatial dims, plane by plane on the pool, each
/// output the reference's fold over its window's taps in the same order: the largest value
/// (NaN wins, padding never does), or the sum over the taps inside the input divided by their
/// count (with `count_include_pad`, by the taps inside the padded input).
pub(crate) fn pool(par: crate::par::Par<'_>, op: &Op, inputs: &[Tensor]) -> Result<Tensor> {
    let Op::Pool {
        kind,
        kernel,
        strides,
        dilations,
        pads,
        ceil_mode,
    } = op
    else {
        return Err(Error::invalid("pool", "not a pool"));
    };
    let x = &inputs[0];
    let xd = x.dims();
    let g = cyb_ops::window_geometry(
        "pool",
        &xd[2..],
        kernel,
        strides,
        dilations,
        pads,
        *ceil_mode,
    )?;
    let [ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw] = window_grid(xd, kernel, &g);
    let (eh, ew) = pair(&g.pad_end, 0);
    let xs = x.as_f32()?;
    let xs = &*xs;
    let kind = *kind;
    let max = kind == PoolKind::Max;
    // The windows read a padded plane: `ph` rows and `pw` columns before the input, as many
    // after as the last window (ceil mode) or the end pads reach, each pad the fold's neutral
    // value (-inf for max, which never wins; 0 for a sum, which changes no bit of it).
    let (rows, cols) = (
        ((oh - 1) * sh + (kh - 1) * dh + 1).max(ph + ih),
        ((ow - 1) * sw + (kw - 1) * dw + 1).max(pw + iw),
    );
    let neutral = if max { f32::NEG_INFINITY } else { 0.0 };
    // An average's divisor is separable: the taps of output (y, x) inside the input (or the
    // padded input) are the row taps inside times the column taps inside.
    let with_pads = kind
        == PoolKind::Avg {
            count_include_pad: true,
        };
    // Taps of output `o` along one dim at padded positions `o * s + t * d` (input position
    // minus begin pad `p`): inside the input of `n`, or before its end pad `end`.
    let inside = |o: usize, s: usize, k: usize, d: usize, p: usize, n: usize, end: usize| {
        (0..k)
            .map(|t| o * s + t * d)
            .filter(|&at| {
                if with_pads {
                    at < p + n + end
                } else {
                    at >= p && at < p + n
                }
            })
            .count()
    };
    let row_taps: Vec<usize> = (0..oh).map(|o| inside(o, sh, kh, dh, ph, ih, eh)).collect();
    let col_taps: Vec<usize> = (0..ow).map(|o| inside(o, sw, kw, dw, pw, iw, ew)).collect();
    let mut dims = vec![xd[0], xd[1]];
    dims.extend_from_slice(&g.out);
    by_planes(
        par,
        &dims,
        #[inline(always)]
        |idx, y| {
            let xp = &xs[idx * ih * iw..][..ih * iw];
            let mut padded = vec![neutral; rows * cols];
            for (r, src) in xp.chunks_exact(iw).enumerate() {
                padded[(r + ph) * cols + pw..][..iw].copy_from_slice(src);
            }
            for (oy, acc) in y.chunks_exact_mut(ow).enumerate() {
                acc.fill(neutral);
                // Taps in the reference's order: rows, then columns.
                for ky in 0..kh {
                    let row = &padded[(oy * sh + ky * dh) * cols..][..cols];
                    for kx in 0..kw {
                        let taps = &row[kx * dw..];
                        if sw == 1 {
                            let taps = &taps[..ow];
                            if max {
                                for (a, &v) in acc.iter_mut().zip(taps) {
                                    *a = if v > *a || v.is_nan() { v } else { *a };
                                }
                            } else {
                                for (a, &v) in acc.iter_mut().zip(taps) {
                                    *a += v;
                                }
                            }
                        } else {
                            for (ox, a) in acc.iter_mut().enumerate() {
                                let v = taps[ox * sw];
                                *a = match max {
                                    true if v > *a || v.is_nan() => v,
                                    true => *a,
                                    false => *a + v,
                                };
                            }
                        }
                    }
                }
                if !max {
                    for (a, &c) in acc.iter_mut().zip(&col_taps) {
                        *a /= (row_taps[oy] * c).max(1) as f32;
                    }
                }
            }
        },
    )
}

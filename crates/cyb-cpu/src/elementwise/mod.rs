//! The small ops of the decode loop: elementwise arithmetic, activations, RoPE, embedding
//! lookup, and the layout ops that only move data (reshape is free: it shares the storage; RMS
//! norm is in `norm/rms.rs`). Element-wise ops and the `Linear` epilogue run on the pool when
//! the tensor is large (encoders, prefill), one thread at decode sizes where a parallel section
//! costs more than the work. Each computes what the reference computes, in the same order, so
//! results are equal to it or within its rounding (the tests check within 1e-5).

use crate::par::Par;
use cyb_ops::{Op, RopeLayout};
use cyb_tensor::{AlignedBuf, DType, Error, Result, Shape, Storage, Tensor, TensorInfo};
use std::sync::Arc;

fn f32_in(infos: &[TensorInfo]) -> bool {
    infos.iter().all(|i| i.dtype == DType::F32)
}

/// True when `b` broadcasts onto `a` by repeating whole trailing rows (`b` equals `a`'s last
/// dimensions, leading ones optional): the bias and residual forms models use.
fn trailing_broadcast(a: &[usize], b: &[usize]) -> bool {
    let b = {
        let lead_ones = b.iter().take_while(|&&d| d == 1).count().min(b.len());
        &b[lead_ones..]
    };
    b.len() <= a.len() && a[a.len() - b.len()..] == *b
}

pub(crate) fn supports(op: &Op, inputs: &[TensorInfo]) -> bool {
    match op {
        Op::Reshape { .. } => true,
        // Between f32 and f16 (a half-precision copy of keys and values, say), rounded to
        // nearest even as the reference does.
        Op::Cast { to } => {
            inputs.len() == 1
                && matches!(
                    (inputs[0].dtype, *to),
                    (DType::F32, DType::F16) | (DType::F16, DType::F32)
                )
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            f32_in(inputs) && inputs.len() == 2 && cyb_ops::output_infos(op, inputs).is_ok()
        }
        // The graph path's element-wise ops on f32 with an f32 result (comparisons and the
        // logical ops give BOOL: the reference's).
        Op::Binary { f } => {
            use cyb_ops::BinaryFn as B;
            matches!(
                f,
                B::Add | B::Sub | B::Mul | B::Div | B::Pow | B::Max | B::Min | B::PRelu
            ) && f32_in(inputs)
                && inputs.len() == 2
                && f32_out(op, inputs)
        }
        Op::Unary { .. } => f32_in(inputs) && inputs.len() == 1 && f32_out(op, inputs),
        Op::Reduce { f, axes, .. } => {
            use cyb_ops::ReduceFn as R;
            matches!(f, R::Sum | R::Mean | R::Max | R::Min)
                && f32_in(inputs)
                && inputs.len() == 1
                && f32_out(op, inputs)
                && trailing_axes(axes, inputs[0].shape.rank()).is_some()
        }
        Op::Softmax { axis } => {
            f32_in(inputs)
                && inputs.len() == 1
                && inputs[0].shape.rank() >= 1
                && last_axis(*axis, inputs[0].shape.rank())
        }
        Op::BatchNorm { .. } => {
            f32_in(inputs)
                && inputs.len() == 5
                && inputs[0].shape.rank() >= 2
                && inputs[1..]
                    .iter()
                    .all(|p| p.shape.numel() == inputs[0].shape.dims()[1])
        }
        Op::Scale { .. } | Op::Silu | Op::Tanh | Op::Relu | Op::SwiGlu | Op::Gelu { .. } => {
            f32_in(inputs)
        }
        Op::Permute { .. } | Op::Transpose { .. } => f32_in(inputs),
        Op::Rope { .. } => {
            inputs.first().is_some_and(|x| x.dtype == DType::F32)
                && inputs.get(2).is_none_or(|f| f.dtype == DType::F32)
        }
        Op::Embedding => {
            let t = inputs[0].dtype;
            matches!(t, DType::F32 | DType::F16 | DType::BF16)
                || cyb_tensor::quant::dequantize(t, &[], &mut []).is_ok()
        }
        _ => false,
    }
}

/// Whether `op`'s one output is F32.
fn f32_out(op: &Op, inputs: &[TensorInfo]) -> bool {
    cyb_ops::output_infos(op, inputs).is_ok_and(|o| o.len() == 1 && o[0].dtype == DType::F32)
}

/// An F32 tensor of `dims` filled by `fill`.
pub(crate) fn make(dims: &[usize], fill: impl FnOnce(&mut [f32]) -> Result<()>) -> Result<Tensor> {
    let n: usize = dims.iter().product();
    let mut buf = AlignedBuf::for_overwrite(n * 4);
    fill(bytemuck::cast_slice_mut(buf.as_bytes_mut()))?;
    Tensor::new(Shape::new(dims)?, DType::F32, Storage::Host(Arc::new(buf)))
}

pub(crate) fn execute(op: &Op, inputs: &[Tensor], par: Par<'_>) -> Result<Tensor> {
    let infos: Vec<TensorInfo> = inputs.iter().map(Tensor::info).collect();
    let out = cyb_ops::output_infos(op, &infos)?;
    let od = out[0].shape.dims();
    let x = &inputs[0];
    match op {
        Op::Reshape { .. } => x.reshape(od),
        Op::Cast { to: DType::F16 } => {
            use half::slice::HalfFloatSliceExt;
            let v = x.as_f32()?;
            let mut buf = AlignedBuf::for_overwrite(v.len() * 2);
            let out: &mut [half::f16] = bytemuck::cast_slice_mut(buf.as_bytes_mut());
            out.convert_from_f32_slice(&v);
            Tensor::new(Shape::new(od)?, DType::F16, Storage::Host(Arc::new(buf)))
        }
        Op::Cast { to } => Tensor::from_f32_as(od, &x.to_f32_vec()?, *to),
        Op::Add => binary(par, x, &inputs[1], od, |a, b| a + b),
        Op::Sub => binary(par, x, &inputs[1], od, |a, b| a - b),
        Op::Mul => binary(par, x, &inputs[1], od, |a, b| a * b),
        Op::Div => binary(par, x, &inputs[1], od, |a, b| a / b),
        // The arithmetic ones as plain closures (they vectorize), the rest through the
        // reference's scalar function; the same values either way.
        Op::Binary { f } => match *f {
            cyb_ops::BinaryFn::Add => binary(par, x, &inputs[1], od, |a, b| a + b),
            cyb_ops::BinaryFn::Sub => binary(par, x, &inputs[1], od, |a, b| a - b),
            cyb_ops::BinaryFn::Mul => binary(par, x, &inputs[1], od, |a, b| a * b),
            cyb_ops::BinaryFn::Div => binary(par, x, &inputs[1], od, |a, b| a / b),
            // NaN in either operand gives NaN, as the reference's; written as a select so the
            // loop vectorizes.
            cyb_ops::BinaryFn::Max => binary(par, x, &inputs[1], od, nan_max),
            cyb_ops::BinaryFn::Min => binary(par, x, &inputs[1], od, nan_min),
            // x² (layer norms written out) as one product: the square correctly rounded, where
            // libm's `powf` is within an ulp of it.
            cyb_ops::BinaryFn::Pow if scalar_is(&inputs[1], 2.0) => unary(par, x, |v| v * v),
            f => binary(par, x, &inputs[1], od, move |a, b| {
                cyb_ops::reference::binary_f32(f, a, b)
            }),
        },
        Op::Unary { f } => unary_fn(par, x, *f),
        Op::BatchNorm { eps } => batch_norm(par, *eps, inputs),
        Op::Softmax { .. } => softmax_rows(par, x),
        Op::Reduce { f, axes, .. } => reduce_rows(par, x, *f, axes, od),
        Op::Scale { factor } => unary(par, x, |v| v * factor),
        Op::Silu => unary(par, x, silu),
        Op::Tanh => unary(par, x, crate::math::tanh),
        Op::Relu => unary(par, x, |v| v.max(0.0)),
        Op::Gelu { approx } => match approx {
            cyb_ops::GeluApprox::Erf => unary(par, x, crate::math::gelu_erf),
            cyb_ops::GeluApprox::Tanh => unary(par, x, gelu_tanh),
        },
        Op::SwiGlu => swiglu(par, inputs, od),
        Op::Permute { perm } => permute(par, x, perm, od),
        Op::Transpose { a, b } => {
            let rank = x.dims().len();
            let resolve = |v: isize| if v < 0 { v + rank as isize } else { v } as usize;
            let mut perm: Vec<usize> = (0..rank).collect();
            perm.swap(resolve(*a), resolve(*b));
            permute(par, x, &perm, od)
        }
        Op::Rope {
            layout,
            rot_dims,
            base,
            scaling,
        } => {
            let (mut inv_freq, attn_factor) =
                cyb_ops::reference::rope_frequencies(*rot_dims, *base as f64, scaling);
            if let Some(f) = inputs.get(2) {
                for (fr, &div) in inv_freq.iter_mut().zip(f.as_f32()?.iter()) {
                    *fr /= div as f64;
                }
            }
            rope(par, *layout, &inv_freq, attn_factor, inputs)
        }
        Op::Embedding => embedding(x, &inputs[1], od),
        _ => Err(Error::UnsupportedOp {
            op: op.name().into(),
            backend: "cpu".into(),
            input_dtype: x.dtype(),
        }),
    }
}

/// How many trailing dims `axes` (all when empty; negative from the end) name, when they are
/// exactly the last ones of `rank`, each once.
fn trailing_axes(axes: &[isize], rank: usize) -> Option<usize> {
    if axes.is_empty() {
        return Some(rank);
    }
    let mut seen = vec![false; rank];
    for &a in axes {
        let a = if a < 0 { a + rank as isize } else { a };
        let slot = seen.get_mut(usize::try_from(a).ok()?)?;
        if *slot {
            return None;
        }
        *slot = true;
    }
    let k = axes.len();
    seen[rank - k..].iter().all(|&s| s).then_some(k)
}

/// Sum, mean, max or min over the trailing dims: each output reduces one contiguous row in
/// order, as the reference folds it (NaN propagates through max and min); rows on the pool.
fn reduce_rows(
    par: Par<'_>,
    x: &Tensor,
    f: cyb_ops::ReduceFn,
    axes: &[isize],
    od: &[usize],
) -> Result<Tensor> {
    use cyb_ops::ReduceFn as R;
    let d = x.dims();
    let k = trailing_axes(axes, d.len()).unwrap_or(d.len());
    let n: usize = d[d.len() - k..].iter().product();
    let xs = x.as_f32()?;
    let fold = move |row: &[f32]| -> f32 {
        match f {
            R::Max => row.iter().copied().fold(f32::NEG_INFINITY, nan_max),
            R::Min => row.iter().copied().fold(f32::INFINITY, nan_min),
            R::Mean => row.iter().sum::<f32>() / n as f32,
            _ => row.iter().sum::<f32>(),
        }
    };
    if n == 0 {
        return make(od, |y| {
            y.fill(fold(&[]));
            Ok(())
        });
    }
    par.make(
        od,
        1,
        #[inline(always)]
        |first, y| {
            for (i, o) in y.iter_mut().enumerate() {
                *o = fold(&xs[(first + i) * n..][..n]);
            }
        },
    )
}

/// Whether `axis` names the last of `rank` dims.
fn last_axis(axis: isize, rank: usize) -> bool {
    axis == -1 || axis == rank as isize - 1
}

/// Softmax along the last axis, row by row on the pool: the reference's steps (the largest
/// value, `exp(x − max)`, their sum in order, each divided by it) with the vectorized `exp`
/// (about 1 ulp from libm's). A row of all `-inf` gives NaN, as the reference.
fn softmax_rows(par: Par<'_>, x: &Tensor) -> Result<Tensor> {
    let d = x.dims();
    let n = d.last().copied().unwrap_or(1);
    let xs = x.as_f32()?;
    if n == 0 || xs.is_empty() {
        return make(d, |_| Ok(()));
    }
    par.make(
        d,
        n,
        #[inline(always)]
        |row, y| {
            for (yr, xr) in y.chunks_exact_mut(n).zip(xs[row * n..].chunks_exact(n)) {
                let max = xr.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                for (o, &v) in yr.iter_mut().zip(xr) {
                    *o = crate::math::exp(v - max);
                }
                let sum = yr.iter().fold(0.0, |s, v| s + v);
                yr.iter_mut().for_each(|o| *o /= sum);
            }
        },
    )
}

/// The larger of two values, NaN if either is (the reference's `Max`); a select, so loops of
/// it vectorize.
#[inline(always)]
fn nan_max(a: f32, b: f32) -> f32 {
    let m = a.max(b);
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        m
    }
}

/// The smaller of two values, NaN if either is (the reference's `Min`).
#[inline(always)]
fn nan_min(a: f32, b: f32) -> f32 {
    let m = a.min(b);
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        m
    }
}

/// Whether `t` is one F32 value equal to `v`.
fn scalar_is(t: &Tensor, v: f32) -> bool {
    t.dims().iter().product::<usize>() == 1 && t.as_f32().is_ok_and(|x| x[0] == v)
}

/// `Op::Unary`: the functions models spend time in as their own loops (each vectorizes, and
/// computes the reference's formula), the rest through the reference's scalar function.
fn unary_fn(par: Par<'_>, x: &Tensor, f: cyb_ops::UnaryFn) -> Result<Tensor> {
    use cyb_ops::UnaryFn as U;
    match f {
        U::Relu => unary(par, x, |v| v.max(0.0)),
        U::Neg => unary(par, x, |v| -v),
        U::Abs => unary(par, x, f32::abs),
        U::Sqrt => unary(par, x, f32::sqrt),
        U::Reciprocal => unary(par, x, |v| 1.0 / v),
        U::Sigmoid => unary(par, x, |v| 1.0 / (1.0 + crate::math::exp(-v))),
        U::HardSwish => unary(par, x, |v| v * (v / 6.0 + 0.5).clamp(0.0, 1.0)),
        U::HardSigmoid { alpha, beta } => {
            unary(par, x, move |v| (alpha * v + beta).clamp(0.0, 1.0))
        }
        U::LeakyRelu { alpha } => unary(par, x, move |v| if v >= 0.0 { v } else { alpha * v }),
        // A closed form within 1.5e-7 of erf (the reference sums its series, exact to f32 and
        // many times slower).
        U::Erf => unary(par, x, crate::math::erf),
        U::Tanh => unary(par, x, crate::math::tanh),
        f => unary(par, x, move |v| cyb_ops::reference::unary_f32(f, v)),
    }
}

/// Inference batch normalization over axis 1, plane by plane, with the reference's formula
/// (`(x − mean) / √(var + eps) · scale + bias`, in that order, so results are the same bits).
fn batch_norm(par: Par<'_>, eps: f32, inputs: &[Tensor]) -> Result<Tensor> {
    let x = inputs[0].as_f32()?;
    let p: Vec<_> = inputs[1..]
        .iter()
        .map(Tensor::as_f32)
        .collect::<Result<_>>()?;
    let (scale, bias, mean, var) = (&*p[0], &*p[1], &*p[2], &*p[3]);
    let d = inputs[0].dims();
    let c = d[1].max(1);
    let inner: usize = d[2..].iter().product();
    if inner == 0 || x.is_empty() {
        return make(d, |_| Ok(()));
    }
    par.make(
        d,
        inner,
        #[inline(always)]
        |plane, y| {
            for (i, (yp, xp)) in y
                .chunks_mut(inner)
                .zip(x[plane * inner..].chunks(inner))
                .enumerate()
            {
                let ch = (plane + i) % c;
                let (m, sd, s, b) = (mean[ch], (var[ch] + eps).sqrt(), scale[ch], bias[ch]);
                for (o, &v) in yp.iter_mut().zip(xp) {
                    *o = (v - m) / sd * s + b;
                }
            }
        },
    )
}

/// The reference's silu with `math::exp` (about 1 ulp from libm's, and it vectorizes: a 1B
/// model's prefill spent ~9% of its time in libm's `exp` of the gated units).
#[inline(always)]
fn silu(x: f32) -> f32 {
    x / (1.0 + crate::math::exp(-x))
}

/// The tanh GELU, the reference's formula. (The erf form is `math::gelu_erf`: a closed-form
/// erf, absolute error ≤ 1.5e-7, instead of the reference's series, which is exact to f32 but
/// several times slower; encoders spend much of their time here.)
fn gelu_tanh(x: f32) -> f32 {
    let k = (2.0 / std::f32::consts::PI).sqrt();
    0.5 * x * (1.0 + crate::math::tanh(k * (x + 0.044715 * x * x * x)))
}

/// `f(a, b)` element-wise, `b` equal to `a`'s shape or repeated over its trailing rows.
pub(crate) fn binary(
    par: Par<'_>,
    a: &Tensor,
    b: &Tensor,
    od: &[usize],
    f: impl Fn(f32, f32) -> f32 + Sync,
) -> Result<Tensor> {
    let (a_dims, b_dims) = (a.dims(), b.dims());
    let (a, b) = (a.as_f32()?, b.as_f32()?);
    let (a, b) = (&*a, &*b);
    let p = b.len();
    if p == 0 || a.is_empty() {
        return make(od, |_| Ok(()));
    }
    if p == a.len() && a_dims == b_dims {
        // Same shape: any split of the elements.
        return par.make(
            od,
            1,
            #[inline(always)]
            |start, y| {
                let (ac, bc) = (&a[start..start + y.len()], &b[start..start + y.len()]);
                for ((o, &x), &z) in y.iter_mut().zip(ac).zip(bc) {
                    *o = f(x, z);
                }
            },
        );
    }
    let numel: usize = od.iter().product();
    // One operand a single value (`x + 3`, the bounds of a clip): a flat loop with it held.
    if p == 1 && a.len() == numel {
        let z = b[0];
        return par.make(
            od,
            1,
            #[inline(always)]
            |start, y| {
                let n = y.len();
                for (o, &x) in y.iter_mut().zip(&a[start..start + n]) {
                    *o = f(x, z);
                }
            },
        );
    }
    if a.len() == 1 && p == numel {
        let x = a[0];
        return par.make(
            od,
            1,
            #[inline(always)]
            |start, y| {
                let n = y.len();
                for (o, &z) in y.iter_mut().zip(&b[start..start + n]) {
                    *o = f(x, z);
                }
            },
        );
    }
    if a.len() == numel && trailing_broadcast(a_dims, b_dims) {
        return par.make(
            od,
            p,
            #[inline(always)]
            |row, y| {
                for (yc, ac) in y.chunks_mut(p).zip(a[row * p..].chunks(p)) {
                    for ((o, &x), &z) in yc.iter_mut().zip(ac).zip(b) {
                        *o = f(x, z);
                    }
                }
            },
        );
    }
    // Any other broadcast: runs of the output along which each operand either moves by one or
    // stays (dims merged while every operand keeps its pattern), row by row.
    let runs = broadcast_runs(od, a_dims, b_dims);
    let Some(&(n, sa, sb)) = runs.last() else {
        return make(od, |y| {
            if let Some(o) = y.first_mut() {
                *o = f(a[0], b[0]);
            }
            Ok(())
        });
    };
    let outer = &runs[..runs.len() - 1];
    par.make(
        od,
        n,
        #[inline(always)]
        |row, y| {
            for (i, yr) in y.chunks_mut(n).enumerate() {
                let (mut oa, mut ob, mut rest) = (0, 0, row + i);
                for &(d, da, db) in outer.iter().rev() {
                    let k = rest % d;
                    rest /= d;
                    oa += k * da;
                    ob += k * db;
                }
                match (sa, sb) {
                    (1, 0) => {
                        let z = b[ob];
                        for (o, &x) in yr.iter_mut().zip(&a[oa..oa + n]) {
                            *o = f(x, z);
                        }
                    }
                    (0, 1) => {
                        let x = a[oa];
                        for (o, &z) in yr.iter_mut().zip(&b[ob..ob + n]) {
                            *o = f(x, z);
                        }
                    }
                    (1, 1) => {
                        for ((o, &x), &z) in yr.iter_mut().zip(&a[oa..oa + n]).zip(&b[ob..ob + n]) {
                            *o = f(x, z);
                        }
                    }
                    _ => yr.fill(f(a[oa], b[ob])),
                }
            }
        },
    )
}

/// The output `od` as runs `(size, stride in a, stride in b)`, outermost first, for operands
/// of dims `a` and `b` broadcast to it (numpy rules: right-aligned, size 1 repeats): adjacent
/// dims are merged while each operand either spans both or repeats over both. Dims of size 1
/// are dropped.
fn broadcast_runs(od: &[usize], a: &[usize], b: &[usize]) -> Vec<(usize, usize, usize)> {
    let r = od.len();
    let dim = |d: &[usize], i: usize| -> usize { (i + d.len()).checked_sub(r).map_or(1, |j| d[j]) };
    // Element strides of each operand, 0 where it repeats.
    let strides = |d: &[usize]| -> Vec<usize> {
        let mut st = vec![0; r];
        let mut s = 1;
        for i in (0..r).rev() {
            let n = dim(d, i);
            st[i] = if n == 1 { 0 } else { s };
            s *= n;
        }
        st
    };
    let (sa, sb) = (strides(a), strides(b));
    let mut runs: Vec<(usize, usize, usize)> = Vec::new();
    for i in 0..r {
        let n = od[i];
        if n == 1 {
            continue;
        }
        let (da, db) = (sa[i], sb[i]);
        match runs.last_mut() {
            // The previous (outer) run continues into this dim for both operands: a repeating
            // operand repeats in both, a moving one moves contiguously from this dim into it.
            Some((pn, pa, pb))
                if (*pa == 0) == (da == 0)
                    && (*pb == 0) == (db == 0)
                    && (*pa == 0 || *pa == da * n)
                    && (*pb == 0 || *pb == db * n) =>
            {
                *pn *= n;
                *pa = da;
                *pb = db;
            }
            _ => runs.push((n, da, db)),
        }
    }
    // The innermost run's strides are 0 or 1 (an operand that moves there has only dims of
    // size 1 after it), which the row loop relies on.
    debug_assert!(runs.last().is_none_or(|&(_, a, b)| a <= 1 && b <= 1));
    runs
}

fn unary(par: Par<'_>, x: &Tensor, f: impl Fn(f32) -> f32 + Sync) -> Result<Tensor> {
    let a = x.as_f32()?;
    let a = &*a;
    par.make(
        x.dims(),
        1,
        #[inline(always)]
        |start, y| {
            for (o, &v) in y.iter_mut().zip(&a[start..]) {
                *o = f(v);
            }
        },
    )
}

/// `silu(gate) · up`, the gate and up halves either two inputs or the two halves of each row of
/// one; rows split over the pool.
fn swiglu(par: Par<'_>, inputs: &[Tensor], od: &[usize]) -> Result<Tensor> {
    let g = inputs[0].as_f32()?;
    let g = &*g;
    let n = od.last().copied().unwrap_or(0);
    if n == 0 {
        return make(od, |_| Ok(()));
    }
    match inputs.get(1) {
        Some(u) => {
            let u = u.as_f32()?;
            let u = &*u;
            par.make(
                od,
                1,
                #[inline(always)]
                |start, y| {
                    let end = start + y.len();
                    for ((o, &gv), &uv) in y.iter_mut().zip(&g[start..end]).zip(&u[start..end]) {
                        *o = silu(gv) * uv;
                    }
                },
            )
        }
        None => par.make(
            od,
            n,
            #[inline(always)]
            |row, y| {
                for (yr, r) in y.chunks_mut(n).zip(g[row * 2 * n..].chunks(2 * n)) {
                    let (gs, us) = r.split_at(n);
                    for ((o, &gv), &uv) in yr.iter_mut().zip(gs).zip(us) {
                        *o = silu(gv) * uv;
                    }
                }
            },
        ),
    }
}

/// The epilogue of `Op::Linear`, `act(y + bias)` (`act(y)` without biases), in place on
/// output row segments (`bias` the biases of their columns), compiled for `set`'s vector units.
#[inline]
pub(crate) fn bias_act<'a>(
    set: crate::features::KernelSet,
    rows: impl Iterator<Item = &'a mut [f32]>,
    bias: Option<&[f32]>,
    act: cyb_ops::LinearAct,
) {
    use cyb_ops::LinearAct;
    #[inline(always)]
    fn apply<'a>(
        rows: impl Iterator<Item = &'a mut [f32]>,
        bias: Option<&[f32]>,
        f: impl Fn(f32) -> f32,
    ) {
        for y in rows {
            match bias {
                Some(bias) => {
                    for (o, &b) in y.iter_mut().zip(bias) {
                        *o = f(*o + b);
                    }
                }
                None => {
                    for o in y.iter_mut() {
                        *o = f(*o);
                    }
                }
            }
        }
    }
    crate::par::wide(
        set,
        #[inline(always)]
        || match act {
            LinearAct::None => apply(rows, bias, |x| x),
            LinearAct::Relu => apply(rows, bias, |x| x.max(0.0)),
            LinearAct::Silu => apply(rows, bias, silu),
            LinearAct::Tanh => apply(rows, bias, crate::math::tanh),
            LinearAct::Gelu(cyb_ops::GeluApprox::Erf) => apply(rows, bias, crate::math::gelu_erf),
            LinearAct::Gelu(cyb_ops::GeluApprox::Tanh) => apply(rows, bias, gelu_tanh),
        },
    )
}

fn permute(par: Par<'_>, x: &Tensor, perm: &[usize], od: &[usize]) -> Result<Tensor> {
    // Axes longer than 1 in their old order (a decode step's `[1, heads, d]` ↔ `[heads, 1,
    // d]`): the same values in the same order, so the output shares the input's storage.
    let moved = perm.iter().filter(|&&p| x.dims()[p] > 1);
    if moved.clone().zip(moved.skip(1)).all(|(a, b)| a < b) {
        return x.reshape(od);
    }
    let a = x.as_f32()?;
    let a = &*a;
    let xd = x.dims();
    let rank = xd.len();
    let mut in_strides = vec![1usize; rank];
    for i in (0..rank.saturating_sub(1)).rev() {
        in_strides[i] = in_strides[i + 1] * xd[i + 1];
    }
    // Stride in the input of each output axis.
    let strides: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let inner = od.last().copied().unwrap_or(1).max(1);
    let inner_stride = strides.last().copied().unwrap_or(1);
    let outer = &od[..rank.saturating_sub(1)];
    par.make(od, inner, |first, y| {
        // The output coordinates of row `first` (divisions once per part, not per row), then
        // an odometer over them with the matching input offset.
        let mut coord = vec![0usize; outer.len()];
        let mut rest = first;
        for (c, &n) in coord.iter_mut().zip(outer).rev() {
            *c = rest % n.max(1);
            rest /= n.max(1);
        }
        let mut base: usize = coord.iter().zip(&strides).map(|(c, s)| c * s).sum();
        for row in y.chunks_mut(inner) {
            if inner_stride == 1 {
                let src = &a[base..base + inner];
                // 16-value pieces copy inline (short rows, e.g. attention heads, would
                // otherwise be one memcpy call each).
                let (pieces, rest) = row.as_chunks_mut::<16>();
                let (src_pieces, src_rest) = src.as_chunks::<16>();
                for (o, x) in pieces.iter_mut().zip(src_pieces) {
                    *o = *x;
                }
                rest.copy_from_slice(src_rest);
            } else {
                for (j, o) in row.iter_mut().enumerate() {
                    *o = a[base + j * inner_stride];
                }
            }
            for ax in (0..coord.len()).rev() {
                coord[ax] += 1;
                base += strides[ax];
                if coord[ax] < outer[ax] {
                    break;
                }
                base -= strides[ax] * outer[ax];
                coord[ax] = 0;
            }
        }
    })
}

fn rope(
    par: Par<'_>,
    layout: RopeLayout,
    inv_freq: &[f64],
    attn: f64,
    inputs: &[Tensor],
) -> Result<Tensor> {
    let x = inputs[0].as_f32()?;
    let x = &*x;
    let positions = inputs[1].to_i64_vec()?;
    let dims = inputs[0].dims();
    let r = dims.len();
    let (seq, heads, head_dim) = (dims[r - 3], dims[r - 2], dims[r - 1]);
    let half = inv_freq.len();
    if head_dim == 0 {
        return make(dims, |y| {
            y.copy_from_slice(x);
            Ok(())
        });
    }
    // The reference's table: angles in f64, rounded to f32 once; (cos, sin) per position and
    // frequency.
    let mut table = Vec::with_capacity(positions.len() * 2 * half);
    for &pos in &positions {
        for f in inv_freq {
            let theta = pos as f64 * f;
            table.extend([(theta.cos() * attn) as f32, (theta.sin() * attn) as f32]);
        }
    }
    let table = &table;
    par.make(
        dims,
        head_dim,
        #[inline(always)]
        |row0, y| {
            for (j, (v, xs)) in y
                .chunks_mut(head_dim)
                .zip(x[row0 * head_dim..].chunks(head_dim))
                .enumerate()
            {
                v.copy_from_slice(xs);
                let s = ((row0 + j) / heads.max(1)) % seq.max(1);
                let cs = &table[s * 2 * half..(s + 1) * 2 * half];
                for (i, c) in cs.chunks(2).enumerate() {
                    let (a, b) = match layout {
                        RopeLayout::Normal => (2 * i, 2 * i + 1),
                        RopeLayout::Neox => (i, i + half),
                    };
                    let (x0, x1) = (v[a], v[b]);
                    v[a] = x0 * c[0] - x1 * c[1];
                    v[b] = x0 * c[1] + x1 * c[0];
                }
            }
        },
    )
}

fn embedding(table: &Tensor, ids_t: &Tensor, od: &[usize]) -> Result<Tensor> {
    let ids = ids_t.to_i64_vec()?;
    let (vocab, dim) = (table.dims()[0], table.dims()[1]);
    let dtype = table.dtype();
    let row_bytes = dtype.bytes_for(dim).ok_or_else(|| {
        Error::invalid(
            "embedding",
            format!("rows of {dim} are not whole {dtype} blocks"),
        )
    })?;
    let bytes = table
        .host_bytes()
        .ok_or_else(|| Error::invalid("embedding", "table is not in host memory"))?;
    make(od, |y| {
        if dim == 0 {
            return Ok(());
        }
        for (out, &id) in y.chunks_mut(dim).zip(&ids) {
            let row = usize::try_from(id)
                .ok()
                .filter(|&r| r < vocab)
                .ok_or_else(|| {
                    Error::invalid(
                        "embedding",
                        format!("id {id} is outside the table's 0..{vocab}"),
                    )
                })?;
            let src = &bytes[row * row_bytes..(row + 1) * row_bytes];
            match dtype {
                DType::F32 => {
                    for (o, c) in out.iter_mut().zip(src.chunks_exact(4)) {
                        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    }
                }
                DType::F16 => {
                    for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
                        *o = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
                    }
                }
                DType::BF16 => {
                    for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
                        *o = half::bf16::from_le_bytes([c[0], c[1]]).to_f32();
                    }
                }
                _ => cyb_tensor::quant::dequantize(dtype, src, out)?,
            }
        }
        Ok(())
    })
}

//! How each [`HostOp`] runs: read the small parameter inputs on the host, build the ops, run
//! them through the dispatcher.

use crate::host_op::{axis, cast_to, filled, filled_with, req, to_usize, HostOp, HostRun};
use cyb_ops::{BinaryFn, Op, PadMode, ReduceFn};
use cyb_tensor::memory::check_tensor;
use cyb_tensor::{DType, Error, Result, Tensor};

/// Runs `h` on `inputs` (absent optional inputs are `None`), giving `n_out` outputs.
pub(crate) fn run(
    h: &HostOp,
    inputs: &[Option<Tensor>],
    n_out: usize,
    r: &mut HostRun,
) -> Result<Vec<Tensor>> {
    let name = h.name();
    let x = || req(name, inputs, 0);
    let opt = |i: usize| inputs.get(i).and_then(Option::as_ref);
    let one = |t: Tensor| Ok(vec![t]);
    match h {
        HostOp::Identity => {
            let x = x()?.clone();
            let mut out = vec![x.clone()];
            for _ in 1..n_out {
                out.push(filled(x.dims(), DType::Bool, 1.0)?);
            }
            Ok(out)
        }
        HostOp::Shape { start, end } => {
            let d = x()?.dims();
            let n = d.len() as i64;
            let fix = |v: i64| (if v < 0 { v + n } else { v }).clamp(0, n) as usize;
            let (s, e) = (fix(*start), fix(end.unwrap_or(n)));
            let v: Vec<i64> = d[s..e.max(s)].iter().map(|&v| v as i64).collect();
            one(Tensor::from_i64(&[v.len()], &v)?)
        }
        HostOp::Size => one(Tensor::from_i64(&[], &[x()?.numel() as i64])?),
        HostOp::ConstantOfShape {
            dtype,
            value,
            int_value,
        } => {
            let dims = to_usize(name, &r.ints(x()?)?)?;
            one(filled_with(&dims, *dtype, *value, *int_value)?)
        }
        HostOp::Range => range(r, inputs),
        HostOp::Reshape { allowzero } => {
            let x = x()?;
            let spec = r.ints(req(name, inputs, 1)?)?;
            let mut dims = Vec::with_capacity(spec.len());
            for (i, &s) in spec.iter().enumerate() {
                dims.push(match s {
                    0 if !allowzero => *x.dims().get(i).ok_or_else(|| {
                        Error::invalid(
                            name,
                            format!("0 at position {i} but input rank is {}", x.dims().len()),
                        )
                    })? as isize,
                    -1 => -1,
                    s if s < 0 => return Err(Error::invalid(name, format!("bad dim {s}"))),
                    s => s as isize,
                });
            }
            one(r.one(&Op::Reshape { dims }, std::slice::from_ref(x))?)
        }
        HostOp::Expand => {
            let dims = to_usize(name, &r.ints(req(name, inputs, 1)?)?)?;
            one(r.one(&Op::Expand { dims }, &[x()?.clone()])?)
        }
        HostOp::Tile => {
            let repeats = to_usize(name, &r.ints(req(name, inputs, 1)?)?)?;
            one(r.one(&Op::Tile { repeats }, &[x()?.clone()])?)
        }
        HostOp::Slice => {
            let x = x()?;
            let starts = r.ints(req(name, inputs, 1)?)?;
            let ends = r.ints(req(name, inputs, 2)?)?;
            let axes = match opt(3) {
                Some(t) => r.ints(t)?,
                None => (0..starts.len() as i64).collect(),
            };
            let steps = match opt(4) {
                Some(t) => r.ints(t)?,
                None => vec![1; starts.len()],
            };
            let c = |v: Vec<i64>| {
                v.into_iter()
                    .map(|x| x.clamp(isize::MIN as i64, isize::MAX as i64) as isize)
                    .collect()
            };
            let op = Op::SliceNd {
                starts: c(starts),
                ends: c(ends),
                axes: c(axes),
                steps: c(steps),
            };
            one(r.one(&op, std::slice::from_ref(x))?)
        }
        HostOp::Squeeze { axes } => {
            let x = x()?;
            let d = x.dims();
            let axes = match (axes, opt(1)) {
                (Some(a), _) => Some(a.clone()),
                (None, Some(t)) => Some(r.ints(t)?),
                _ => None,
            };
            let keep: Vec<usize> = match axes {
                Some(a) => {
                    let mut drop = vec![false; d.len()];
                    for v in a {
                        let i = axis(name, v, d.len())?;
                        if d[i] != 1 {
                            return Err(Error::invalid(
                                name,
                                format!("dim {i} is {}, not 1", d[i]),
                            ));
                        }
                        drop[i] = true;
                    }
                    (0..d.len()).filter(|&i| !drop[i]).map(|i| d[i]).collect()
                }
                None => d.iter().copied().filter(|&v| v != 1).collect(),
            };
            one(r.reshape(x, &keep)?)
        }
        HostOp::Unsqueeze { axes } => {
            let x = x()?;
            let a = match (axes, opt(1)) {
                (Some(a), _) => a.clone(),
                (None, Some(t)) => r.ints(t)?,
                _ => return Err(Error::invalid(name, "axes are required")),
            };
            let rank = x.dims().len() + a.len();
            let mut ins = vec![false; rank];
            for v in a {
                let i = axis(name, v, rank)?;
                if std::mem::replace(&mut ins[i], true) {
                    return Err(Error::invalid(name, format!("axis {i} repeated")));
                }
            }
            let mut src = x.dims().iter();
            let dims: Vec<usize> = ins
                .iter()
                .map(|&new| if new { Some(1) } else { src.next().copied() })
                .collect::<Option<_>>()
                .ok_or_else(|| Error::invalid(name, "axes do not fit the rank"))?;
            one(r.reshape(x, &dims)?)
        }
        HostOp::Flatten { axis: a } => {
            let x = x()?;
            let d = x.dims();
            let n = d.len() as i64;
            let a = if *a < 0 { a + n } else { *a };
            if !(0..=n).contains(&a) {
                return Err(Error::invalid(
                    name,
                    format!("axis {a} out of range for rank {n}"),
                ));
            }
            let (l, rr) = d.split_at(a as usize);
            one(r.reshape(x, &[l.iter().product(), rr.iter().product()])?)
        }
        HostOp::TopK { axis: a, largest } => {
            let x = x()?;
            let k = r.ints(req(name, inputs, 1)?)?;
            let k = *k
                .first()
                .ok_or_else(|| Error::invalid(name, "k is empty"))?;
            let k = usize::try_from(k).map_err(|_| Error::invalid(name, format!("k = {k}")))?;
            let op = Op::TopK {
                k,
                axis: *a as isize,
                largest: *largest,
            };
            let mut out = r.op(&op, std::slice::from_ref(x))?;
            if out.len() != 2 {
                return Err(Error::invalid(name, "top_k gave a wrong output count"));
            }
            let idx = out
                .pop()
                .ok_or_else(|| Error::invalid(name, "no indices"))?;
            let vals = out.pop().ok_or_else(|| Error::invalid(name, "no values"))?;
            Ok(vec![cast_to(r, vals, x.dtype())?, idx])
        }
        HostOp::Split {
            axis: a,
            sizes,
            num_outputs,
        } => {
            let x = x()?;
            let ax = axis(name, *a, x.dims().len())?;
            let len = x.dims()[ax];
            let sizes = match (sizes, opt(1)) {
                (Some(s), _) => to_usize(name, s)?,
                (None, Some(t)) => to_usize(name, &r.ints(t)?)?,
                _ => {
                    let n = (*num_outputs).max(1);
                    let part = len.div_ceil(n);
                    (0..n)
                        .map(|i| part.min(len.saturating_sub(i * part)))
                        .collect()
                }
            };
            r.op(
                &Op::Split {
                    axis: ax as isize,
                    sizes,
                },
                std::slice::from_ref(x),
            )
        }
        HostOp::CumSum { exclusive, reverse } => {
            let x = x()?;
            let a = r.ints(req(name, inputs, 1)?)?;
            let a = *a
                .first()
                .ok_or_else(|| Error::invalid(name, "axis is empty"))?;
            let op = Op::CumSum {
                axis: a as isize,
                exclusive: *exclusive,
                reverse: *reverse,
            };
            let y = r.one(&op, std::slice::from_ref(x))?;
            one(cast_to(r, y, x.dtype())?)
        }
        HostOp::Pad { mode, pads, value } => {
            let x = x()?;
            let rank = x.dims().len();
            let pads = match (pads, opt(1)) {
                (Some(p), _) => p.clone(),
                (None, Some(t)) => r.ints(t)?,
                _ => return Err(Error::invalid(name, "pads are required")),
            };
            let value = match opt(2) {
                Some(t) if t.numel() > 0 => {
                    r.d.to_host(t)?
                        .to_f32_vec()?
                        .first()
                        .copied()
                        .unwrap_or(0.0)
                }
                _ => *value,
            };
            let pads = match opt(3) {
                Some(t) => {
                    let axes = r.ints(t)?;
                    if pads.len() != 2 * axes.len() {
                        return Err(Error::invalid(name, "pads do not match axes"));
                    }
                    let mut full = vec![0i64; 2 * rank];
                    for (i, &a) in axes.iter().enumerate() {
                        let a = axis(name, a, rank)?;
                        full[a] = pads[i];
                        full[a + rank] = pads[i + axes.len()];
                    }
                    full
                }
                None => pads,
            };
            let mode = match mode {
                PadMode::Constant { .. } => PadMode::Constant { value },
                m => *m,
            };
            let pads = pads.iter().map(|&p| p as isize).collect();
            one(r.one(&Op::Pad { pads, mode }, std::slice::from_ref(x))?)
        }
        HostOp::MatMul => {
            crate::host_linalg::matmul(r, req(name, inputs, 0)?, req(name, inputs, 1)?)
        }
        HostOp::MatMulTransposed => {
            crate::host_linalg::matmul_transposed(r, req(name, inputs, 0)?, req(name, inputs, 1)?)
        }
        HostOp::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        } => crate::host_linalg::gemm(r, inputs, *alpha, *beta, *trans_a, *trans_b),
        HostOp::Softmax {
            axis: a,
            coerce_2d,
            kind,
        } => crate::host_linalg::softmax(r, x()?, *a, *coerce_2d, *kind),
        HostOp::Clip => {
            let mut y = x()?.clone();
            for (i, f) in [(1, BinaryFn::Max), (2, BinaryFn::Min)] {
                if let Some(b) = opt(i) {
                    let b = cast_to(r, b.clone(), y.dtype())?;
                    y = r.one(&Op::Binary { f }, &[y, b])?;
                }
            }
            one(y)
        }
        HostOp::Reduce {
            f,
            keepdims,
            axes,
            noop_with_empty_axes,
        } => {
            let x = x()?;
            let axes = match (axes, opt(1)) {
                (Some(a), _) => a.clone(),
                (None, Some(t)) => r.ints(t)?,
                _ => Vec::new(),
            };
            if axes.is_empty() && *noop_with_empty_axes {
                return one(x.clone());
            }
            let op = Op::Reduce {
                f: *f,
                axes: axes.iter().map(|&a| a as isize).collect(),
                keepdims: *keepdims,
            };
            one(r.one(&op, std::slice::from_ref(x))?)
        }
        HostOp::CastLike => {
            let to = req(name, inputs, 1)?.dtype();
            one(r.one(&Op::Cast { to }, &[x()?.clone()])?)
        }
        HostOp::Variadic { f, mean } => {
            let all: Vec<&Tensor> = inputs.iter().flatten().collect();
            let (first, rest) = all
                .split_first()
                .ok_or_else(|| Error::invalid(name, "needs at least one input"))?;
            let mut y = (*first).clone();
            for t in rest {
                y = r.one(&Op::Binary { f: *f }, &[y, (*t).clone()])?;
            }
            if *mean {
                let n = filled(&[], y.dtype(), all.len() as f64)?;
                y = r.one(&Op::Binary { f: BinaryFn::Div }, &[y, n])?;
            }
            one(y)
        }
        HostOp::GlobalPool { max } => {
            let x = x()?;
            let op = Op::Reduce {
                f: if *max { ReduceFn::Max } else { ReduceFn::Mean },
                axes: (2..x.dims().len() as isize).collect(),
                keepdims: true,
            };
            one(r.one(&op, std::slice::from_ref(x))?)
        }
        HostOp::InstanceNorm { eps } => {
            let x = x()?;
            let c = *x
                .dims()
                .get(1)
                .ok_or_else(|| Error::invalid(name, "input rank < 2"))?;
            let ins = [
                x.clone(),
                req(name, inputs, 1)?.clone(),
                req(name, inputs, 2)?.clone(),
            ];
            let y = r.one(
                &Op::GroupNorm {
                    groups: c,
                    eps: *eps,
                },
                &ins,
            )?;
            one(cast_to(r, y, x.dtype())?)
        }
        HostOp::DepthToSpace { blocksize, crd } => {
            crate::host_linalg::depth_to_space(r, x()?, *blocksize, *crd)
        }
        HostOp::SpaceToDepth { blocksize } => {
            crate::host_linalg::space_to_depth(r, x()?, *blocksize)
        }
        HostOp::NonZero => {
            let x = r.d.to_host(x()?)?;
            let nz: Vec<bool> = if x.dtype().is_float() {
                x.to_f32_vec()?.iter().map(|&v| v != 0.0).collect()
            } else {
                x.to_i64_vec()?.iter().map(|&v| v != 0).collect()
            };
            let d = x.dims();
            let hits: Vec<usize> = (0..nz.len()).filter(|&i| nz[i]).collect();
            let mut out = vec![0i64; d.len() * hits.len()];
            for (j, &flat) in hits.iter().enumerate() {
                let mut rem = flat;
                for k in (0..d.len()).rev() {
                    out[k * hits.len() + j] = (rem % d[k].max(1)) as i64;
                    rem /= d[k].max(1);
                }
            }
            one(Tensor::from_i64(&[d.len(), hits.len()], &out)?)
        }
        HostOp::Trilu { upper } => {
            let k = match opt(1) {
                Some(t) => *r
                    .ints(t)?
                    .first()
                    .ok_or_else(|| Error::invalid(name, "k is empty"))?,
                None => 0,
            };
            one(r.one(&Op::Trilu { upper: *upper, k }, &[x()?.clone()])?)
        }
        HostOp::NllLoss {
            reduction,
            ignore_index,
        } => {
            let (x, t) = (x()?, req(name, inputs, 1)?);
            one(crate::host_loss::nll(
                r,
                x,
                t,
                opt(2),
                *reduction,
                *ignore_index,
            )?)
        }
        HostOp::SoftmaxCrossEntropy {
            reduction,
            ignore_index,
        } => {
            let (x, t) = (x()?, req(name, inputs, 1)?);
            crate::host_loss::softmax_cross_entropy(r, x, t, opt(2), *reduction, *ignore_index)
        }
        HostOp::DynamicQuantizeLinear => crate::host_quant::dynamic_quantize(r, inputs),
        HostOp::ConvInteger { conv } => crate::host_quant::conv_integer(r, conv, inputs),
        HostOp::QLinearConv { conv } => crate::host_quant::qlinear_conv(r, conv, inputs),
        HostOp::QLinearMatMul => crate::host_quant::qlinear_matmul(r, inputs),
        HostOp::Window {
            kind,
            periodic,
            dtype,
        } => crate::host_misc::window(r, x()?, *kind, *periodic, *dtype),
        HostOp::Compress { axis: a } => crate::host_misc::compress(r, inputs, *a),
        HostOp::Einsum { equation } => crate::host_einsum::einsum(r, equation, inputs),
        HostOp::Optimizer(o) => crate::host_train::optimizer(r, o, inputs),
        HostOp::TfIdf(s) => crate::host_tfidf::tfidf(r, s, inputs),
        HostOp::MelWeightMatrix { dtype } => crate::host_dft::mel_weight_matrix(r, inputs, *dtype),
        HostOp::EyeLike { k, dtype } => {
            let dt = dtype
                .as_deref()
                .map(|d| DType::parse(d).ok_or_else(|| Error::invalid(name, format!("dtype {d}"))))
                .transpose()?;
            crate::host_misc::eye_like(r, x()?, *k, dt)
        }
        HostOp::RandomLike { dist, seed, dtype } => {
            let dt = dtype
                .as_deref()
                .map(|d| DType::parse(d).ok_or_else(|| Error::invalid(name, format!("dtype {d}"))))
                .transpose()?;
            crate::host_random::random_like(r, x()?, *dist, *seed, dt)
        }
        HostOp::Lrn {
            alpha,
            beta,
            bias,
            size,
        } => crate::host_misc::lrn(r, x()?, *alpha, *beta, *bias, *size),
        HostOp::MeanVarianceNormalization { axes } => crate::host_misc::mvn(r, x()?, axes),
        HostOp::ReverseSequence {
            batch_axis,
            time_axis,
        } => crate::host_misc::reverse_sequence(r, inputs, *batch_axis, *time_axis),
        HostOp::Det => crate::host_misc::det(r, x()?),
        HostOp::NonMaxSuppression { center_point_box } => {
            crate::host_misc::non_max_suppression(r, inputs, *center_point_box)
        }
        HostOp::ConvTransposeSized(spec) => crate::host_misc::conv_transpose_sized(r, inputs, spec),
        HostOp::GridSample {
            mode,
            padding,
            align_corners,
        } => crate::host_grid::grid_sample(r, inputs, *mode, *padding, *align_corners),
        HostOp::If {
            then_branch,
            else_branch,
        } => crate::subgraph::run_if(r, &then_branch.0, &else_branch.0, inputs),
        HostOp::Loop { body, n_carried } => {
            crate::subgraph::run_loop(r, &body.0, *n_carried, inputs)
        }
        HostOp::Dropout => crate::host_misc::dropout(r, inputs, n_out),
        HostOp::Unique { axis: a, sorted } => crate::host_misc::unique(r, x()?, *a, *sorted),
        HostOp::MaxPoolWithIndices { pool, column_major } => {
            crate::host_misc::max_pool_indices(r, pool, *column_major, x()?)
        }
        HostOp::MaxUnpool {
            kernel,
            strides,
            pads,
        } => crate::host_misc::max_unpool(r, inputs, kernel, strides, pads),
        HostOp::Dft {
            axis: a,
            inverse,
            onesided,
        } => crate::host_dft::dft(r, inputs, *a, *inverse, *onesided),
        HostOp::Stft { onesided } => crate::host_dft::stft(r, inputs, *onesided),
        HostOp::BatchNormTraining { eps, momentum } => {
            crate::host_misc::batch_norm_training(r, inputs, *eps, *momentum)
        }
        HostOp::Scan { body, spec } => crate::subgraph::run_scan(r, &body.0, spec, inputs),
        HostOp::Rnn(spec) => crate::host_rnn::rnn(r, spec, inputs),
        HostOp::Resize(spec) => crate::host_resize::resize(r, spec, inputs),
        HostOp::OneHot { axis: a } => crate::host_linalg::one_hot(r, inputs, *a),
    }
}

fn range(r: &mut HostRun, inputs: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let name = "range";
    let start = req(name, inputs, 0)?;
    let dtype = start.dtype();
    let host = |i: usize| -> Result<Tensor> { r.d.to_host(req(name, inputs, i)?) };
    let (s, l, d) = (host(0)?, host(1)?, host(2)?);
    if dtype.is_float() {
        let v = |t: &Tensor| -> Result<f64> {
            t.to_f64_vec()?
                .first()
                .copied()
                .ok_or_else(|| Error::invalid(name, "empty scalar"))
        };
        let (s, l, d) = (v(&s)?, v(&l)?, v(&d)?);
        if d == 0.0 || !d.is_finite() {
            return Err(Error::invalid(name, format!("delta {d}")));
        }
        let n = ((l - s) / d).ceil().max(0.0);
        check_tensor(name, &[n.min(usize::MAX as f64) as usize], DType::F64)?;
        let vals: Vec<f64> = (0..n as usize).map(|i| s + i as f64 * d).collect();
        return Ok(vec![Tensor::from_f64_as(&[vals.len()], &vals, dtype)?]);
    }
    let v = |t: &Tensor| -> Result<i64> {
        t.to_i64_vec()?
            .first()
            .copied()
            .ok_or_else(|| Error::invalid(name, "empty scalar"))
    };
    let (s, l, d) = (v(&s)?, v(&l)?, v(&d)?);
    if d == 0 {
        return Err(Error::invalid(name, "delta 0"));
    }
    let n = ((l as i128 - s as i128) + d as i128 - d.signum() as i128) / d as i128;
    let n = n.max(0);
    check_tensor(
        name,
        &[usize::try_from(n).unwrap_or(usize::MAX)],
        DType::I64,
    )?;
    let vals: Vec<i64> = (0..n as i64).map(|i| s + i * d).collect();
    let t = Tensor::from_i64(&[vals.len()], &vals)?;
    Ok(vec![cast_to(r, t, dtype)?])
}

//! Smaller ONNX operators computed on the host: window functions, Compress, EyeLike, LRN,
//! mean-variance normalisation, ReverseSequence, Det, NonMaxSuppression, and ConvTranspose
//! whose padding depends on the input size.

use crate::host_op::{axis, cast_to, req, HostRun};
use cyb_ops::Op;
use cyb_tensor::memory::filled_vec;
use cyb_tensor::{DType, Error, Result, Tensor};

/// Which window [`crate::HostOp::Window`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WindowKind {
    Hann,
    Hamming,
    Blackman,
}

fn f32s(r: &HostRun, t: &Tensor) -> Result<Vec<f32>> {
    r.d.to_host(t)?.to_f32_vec()
}

fn first_int(r: &HostRun, t: &Tensor, op: &str) -> Result<i64> {
    r.d.to_host(t)?
        .to_i64_vec()?
        .first()
        .copied()
        .ok_or_else(|| Error::invalid(op, "empty scalar"))
}

pub(crate) fn window(
    r: &mut HostRun,
    size: &Tensor,
    kind: WindowKind,
    periodic: bool,
    dtype: DType,
) -> Result<Vec<Tensor>> {
    let n = first_int(r, size, "window")?;
    let n = usize::try_from(n)
        .ok()
        .filter(|&n| n < 1 << 28)
        .ok_or_else(|| Error::invalid("window", format!("size {n}")))?;
    let d = if periodic {
        n as f64
    } else {
        (n as f64 - 1.0).max(1.0)
    };
    let tau = std::f64::consts::TAU;
    let w: Vec<f32> = (0..n)
        .map(|i| {
            let x = tau * i as f64 / d;
            (match kind {
                WindowKind::Hann => 0.5 - 0.5 * x.cos(),
                WindowKind::Hamming => 25.0 / 46.0 - 21.0 / 46.0 * x.cos(),
                WindowKind::Blackman => 0.42 - 0.5 * x.cos() + 0.08 * (2.0 * x).cos(),
            }) as f32
        })
        .collect();
    let t = Tensor::from_f32(&[n], &w)?;
    Ok(vec![cast_to(r, t, dtype)?])
}

pub(crate) fn compress(
    r: &mut HostRun,
    inputs: &[Option<Tensor>],
    ax: Option<i64>,
) -> Result<Vec<Tensor>> {
    let x = req("compress", inputs, 0)?;
    let cond = r.d.to_host(req("compress", inputs, 1)?)?.to_i64_vec()?;
    let (x, a) = match ax {
        Some(a) => (x.clone(), axis("compress", a, x.dims().len())?),
        None => (r.reshape(x, &[x.numel()])?, 0),
    };
    let len = x.dims()[a];
    let keep: Vec<i64> = (0..cond.len().min(len))
        .filter(|&i| cond[i] != 0)
        .map(|i| i as i64)
        .collect();
    let idx = Tensor::from_i64(&[keep.len()], &keep)?;
    Ok(vec![r.one(&Op::Gather { axis: a as isize }, &[x, idx])?])
}

pub(crate) fn eye_like(
    r: &mut HostRun,
    x: &Tensor,
    k: i64,
    dtype: Option<DType>,
) -> Result<Vec<Tensor>> {
    let d = x.dims();
    if d.len() != 2 {
        return Err(Error::invalid(
            "eye_like",
            format!("input {d:?} is not 2-D"),
        ));
    }
    let v: Vec<f32> = (0..d[0] * d[1])
        .map(|i| f32::from(u8::from((i % d[1]) as i64 - (i / d[1]) as i64 == k)))
        .collect();
    let t = Tensor::from_f32(d, &v)?;
    Ok(vec![cast_to(r, t, dtype.unwrap_or(x.dtype()))?])
}

pub(crate) fn lrn(
    r: &mut HostRun,
    x: &Tensor,
    alpha: f32,
    beta: f32,
    bias: f32,
    size: usize,
) -> Result<Vec<Tensor>> {
    let d = x.dims();
    if d.len() < 3 || size == 0 {
        return Err(Error::invalid("lrn", format!("input {d:?}, size {size}")));
    }
    let v = f32s(r, x)?;
    let (c, inner) = (d[1], d[2..].iter().product::<usize>());
    let (lo, hi) = ((size - 1) / 2, (size - 1).div_ceil(2));
    let mut y = vec![0f32; v.len()];
    for (i, out) in y.iter_mut().enumerate() {
        let (n, ch, s) = (i / (c * inner), (i / inner) % c, i % inner);
        let mut sq = 0f32;
        for cc in ch.saturating_sub(lo)..=(ch + hi).min(c - 1) {
            let e = v[(n * c + cc) * inner + s];
            sq += e * e;
        }
        *out = v[i] / (bias + alpha / size as f32 * sq).powf(beta);
    }
    let t = Tensor::from_f32(d, &y)?;
    Ok(vec![cast_to(r, t, x.dtype())?])
}

pub(crate) fn mvn(r: &mut HostRun, x: &Tensor, axes: &[i64]) -> Result<Vec<Tensor>> {
    let axes: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    let mean_op = Op::Reduce {
        f: cyb_ops::ReduceFn::Mean,
        axes,
        keepdims: true,
    };
    let xf = cast_to(r, x.clone(), DType::F32)?;
    let mean = r.one(&mean_op, std::slice::from_ref(&xf))?;
    let centred = r.one(
        &Op::Binary {
            f: cyb_ops::BinaryFn::Sub,
        },
        &[xf, mean],
    )?;
    let sq = r.one(
        &Op::Binary {
            f: cyb_ops::BinaryFn::Mul,
        },
        &[centred.clone(), centred.clone()],
    )?;
    let var = r.one(&mean_op, &[sq])?;
    let std: Vec<f32> = f32s(r, &var)?.iter().map(|v| v.sqrt() + 1e-9).collect();
    let std = Tensor::from_f32(var.dims(), &std)?;
    let y = r.one(
        &Op::Binary {
            f: cyb_ops::BinaryFn::Div,
        },
        &[centred, std],
    )?;
    Ok(vec![cast_to(r, y, x.dtype())?])
}

pub(crate) fn reverse_sequence(
    r: &mut HostRun,
    inputs: &[Option<Tensor>],
    batch_axis: i64,
    time_axis: i64,
) -> Result<Vec<Tensor>> {
    let x = req("reverse_sequence", inputs, 0)?;
    let lens =
        r.d.to_host(req("reverse_sequence", inputs, 1)?)?
            .to_i64_vec()?;
    let d = x.dims();
    let (ba, ta) = (
        axis("reverse_sequence", batch_axis, d.len())?,
        axis("reverse_sequence", time_axis, d.len())?,
    );
    let st: Vec<usize> = (0..d.len()).map(|i| d[i + 1..].iter().product()).collect();
    let n = x.numel();
    let mut idx = vec![0i64; n];
    for (i, v) in idx.iter_mut().enumerate() {
        let b = (i / st[ba]) % d[ba];
        let t = (i / st[ta]) % d[ta];
        let l = lens.get(b).copied().unwrap_or(0).clamp(0, d[ta] as i64) as usize;
        let src_t = if t < l { l - 1 - t } else { t };
        *v = (i - t * st[ta] + src_t * st[ta]) as i64;
    }
    let flat = r.reshape(x, &[n])?;
    let g = r.one(
        &Op::Gather { axis: 0 },
        &[flat, Tensor::from_i64(&[n], &idx)?],
    )?;
    Ok(vec![r.reshape(&g, d)?])
}

pub(crate) fn det(r: &mut HostRun, x: &Tensor) -> Result<Vec<Tensor>> {
    let d = x.dims();
    let k = d.len();
    if k < 2 || d[k - 1] != d[k - 2] {
        return Err(Error::invalid(
            "det",
            format!("input {d:?} is not [.., n, n]"),
        ));
    }
    let n = d[k - 1];
    let v = f32s(r, x)?;
    let out: Vec<f32> = v
        .chunks(n * n)
        .map(|m| {
            let mut a: Vec<f64> = m.iter().map(|&x| x as f64).collect();
            let mut det = 1f64;
            for c in 0..n {
                let p = (c..n)
                    .max_by(|&i, &j| a[i * n + c].abs().total_cmp(&a[j * n + c].abs()))
                    .unwrap_or(c);
                if a[p * n + c] == 0.0 {
                    return 0.0;
                }
                if p != c {
                    for j in 0..n {
                        a.swap(p * n + j, c * n + j);
                    }
                    det = -det;
                }
                det *= a[c * n + c];
                for i in c + 1..n {
                    let f = a[i * n + c] / a[c * n + c];
                    for j in c..n {
                        a[i * n + j] -= f * a[c * n + j];
                    }
                }
            }
            det as f32
        })
        .collect();
    let t = Tensor::from_f32(&d[..k - 2], &out)?;
    Ok(vec![cast_to(r, t, x.dtype())?])
}

pub(crate) fn non_max_suppression(
    r: &mut HostRun,
    inputs: &[Option<Tensor>],
    center_point_box: bool,
) -> Result<Vec<Tensor>> {
    let op = "non_max_suppression";
    let boxes_t = req(op, inputs, 0)?;
    let scores_t = req(op, inputs, 1)?;
    let opt = |i: usize| inputs.get(i).and_then(Option::as_ref);
    let max_out = match opt(2) {
        Some(t) => first_int(r, t, op)?.max(0) as usize,
        None => 0,
    };
    let iou_thr = match opt(3) {
        Some(t) => f32s(r, t)?.first().copied().unwrap_or(0.0),
        None => 0.0,
    };
    let score_thr = match opt(4) {
        Some(t) => Some(f32s(r, t)?.first().copied().unwrap_or(0.0)),
        None => None,
    };
    let (bd, sd) = (boxes_t.dims(), scores_t.dims());
    if bd.len() != 3 || bd[2] != 4 || sd.len() != 3 || sd[0] != bd[0] || sd[2] != bd[1] {
        return Err(Error::shape(op, bd, sd));
    }
    let (nb, nc, n) = (sd[0], sd[1], sd[2]);
    let boxes = f32s(r, boxes_t)?;
    let scores = f32s(r, scores_t)?;
    let corners = |b: usize, i: usize| -> [f32; 4] {
        let v = &boxes[(b * n + i) * 4..(b * n + i) * 4 + 4];
        if center_point_box {
            [
                v[1] - v[3] / 2.0,
                v[0] - v[2] / 2.0,
                v[1] + v[3] / 2.0,
                v[0] + v[2] / 2.0,
            ]
        } else {
            [
                v[0].min(v[2]),
                v[1].min(v[3]),
                v[0].max(v[2]),
                v[1].max(v[3]),
            ]
        }
    };
    let iou = |a: [f32; 4], b: [f32; 4]| {
        let ih = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
        let iw = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
        let inter = ih * iw;
        let area = |x: [f32; 4]| (x[2] - x[0]) * (x[3] - x[1]);
        let union = area(a) + area(b) - inter;
        if union <= 0.0 {
            0.0
        } else {
            inter / union
        }
    };
    let mut out: Vec<i64> = Vec::new();
    for b in 0..nb {
        for c in 0..nc {
            let s = &scores[(b * nc + c) * n..(b * nc + c + 1) * n];
            let mut cand: Vec<usize> = (0..n)
                .filter(|&i| score_thr.is_none_or(|t| s[i] > t))
                .collect();
            cand.sort_by(|&i, &j| s[j].total_cmp(&s[i]).then(i.cmp(&j)));
            let mut kept: Vec<usize> = Vec::new();
            for i in cand {
                if kept.len() >= max_out {
                    break;
                }
                if kept
                    .iter()
                    .all(|&k| iou(corners(b, k), corners(b, i)) <= iou_thr)
                {
                    kept.push(i);
                }
            }
            for k in kept {
                out.extend([b as i64, c as i64, k as i64]);
            }
        }
    }
    Ok(vec![Tensor::from_i64(&[out.len() / 3, 3], &out)?])
}

/// `ConvTranspose` whose pads come from `output_shape` or `auto_pad` and the input size.
pub(crate) fn conv_transpose_sized(
    r: &mut HostRun,
    inputs: &[Option<Tensor>],
    spec: &crate::host_op::ConvTransposeSpec,
) -> Result<Vec<Tensor>> {
    let op = "conv_transpose";
    let x = req(op, inputs, 0)?;
    let w = req(op, inputs, 1)?;
    let k = x.dims().len().saturating_sub(2);
    if k == 0 || w.dims().len() != k + 2 {
        return Err(Error::shape(op, x.dims(), w.dims()));
    }
    let or = |v: &[usize], d: usize| if v.is_empty() { vec![d; k] } else { v.to_vec() };
    let (strides, dilations, mut out_pad) = (
        or(&spec.strides, 1),
        or(&spec.dilations, 1),
        or(&spec.output_padding, 0),
    );
    if strides.len() != k || dilations.len() != k || out_pad.len() != k {
        return Err(Error::invalid(
            op,
            "attribute lengths do not match the spatial rank",
        ));
    }
    let mut pads = vec![0usize; 2 * k];
    for i in 0..k {
        let inp = x.dims()[i + 2] as i64;
        let target = match &spec.output_shape {
            Some(s) => *s
                .get(s.len().wrapping_sub(k) + i)
                .ok_or_else(|| Error::invalid(op, "output_shape too short"))?,
            None => inp * strides[i] as i64,
        };
        let total = strides[i] as i64 * (inp - 1)
            + out_pad[i] as i64
            + (w.dims()[i + 2] as i64 - 1) * dilations[i] as i64
            + 1
            - target;
        if total < 0 {
            // The output is larger than the transposed conv covers: extend at the end.
            out_pad[i] += (-total) as usize;
            continue;
        }
        let (small, big) = ((total / 2) as usize, (total - total / 2) as usize);
        (pads[i], pads[i + k]) = if spec.same_lower {
            (big, small)
        } else {
            (small, big)
        };
    }
    let conv = Op::ConvTranspose {
        strides,
        dilations,
        pads,
        output_padding: out_pad,
        group: spec.group,
    };
    let ins: Vec<Tensor> = inputs.iter().flatten().cloned().collect();
    Ok(vec![r.one(&conv, &ins)?])
}

/// ONNX Dropout at inference: the identity (and an all-true mask). In training mode with a
/// non-zero ratio the output would be random, which is refused rather than guessed.
pub(crate) fn dropout(
    r: &mut HostRun,
    inputs: &[Option<Tensor>],
    n_out: usize,
) -> Result<Vec<Tensor>> {
    let x = req("dropout", inputs, 0)?;
    let opt = |i: usize| inputs.get(i).and_then(Option::as_ref);
    let training = match opt(2) {
        Some(t) => {
            r.d.to_host(t)?
                .to_i64_vec()?
                .first()
                .is_some_and(|&v| v != 0)
        }
        None => false,
    };
    let ratio = match opt(1) {
        Some(t) => f32s(r, t)?.first().copied().unwrap_or(0.5),
        None => 0.5,
    };
    if training && ratio != 0.0 {
        return Err(Error::UnsupportedOp {
            op: "dropout in training mode (random masks)".into(),
            backend: "graph".into(),
            input_dtype: x.dtype(),
        });
    }
    let mut out = vec![x.clone()];
    if n_out > 1 {
        out.push(crate::host_op::filled(x.dims(), DType::Bool, 1.0)?);
    }
    Ok(out)
}

/// ONNX Unique: distinct elements (or slices along `axis`), their first indices, the inverse
/// map and the counts; sorted ascending (slices lexicographically) or in first-seen order.
pub(crate) fn unique(
    r: &mut HostRun,
    x: &Tensor,
    ax: Option<i64>,
    sorted: bool,
) -> Result<Vec<Tensor>> {
    let xh = r.d.to_host(x)?;
    let (data, a) = match ax {
        Some(a) => (xh.clone(), axis("unique", a, x.dims().len())?),
        None => (xh.reshape(&[x.numel()])?, 0),
    };
    let d = data.dims().to_vec();
    let vals: Vec<f64> = if data.dtype().is_float() {
        data.to_f32_vec()?.iter().map(|&v| v as f64).collect()
    } else {
        data.to_i64_vec()?.iter().map(|&v| v as f64).collect()
    };
    let (outer, len, inner) = (
        d[..a].iter().product::<usize>(),
        d[a],
        d[a + 1..].iter().product::<usize>(),
    );
    let key = |i: usize| -> Vec<f64> {
        (0..outer)
            .flat_map(|o| (0..inner).map(move |n| (o, n)))
            .map(|(o, n)| vals[(o * len + i) * inner + n])
            .collect()
    };
    let keys: Vec<Vec<f64>> = (0..len).map(key).collect();
    let mut firsts: Vec<usize> = Vec::new();
    for i in 0..len {
        if !firsts.iter().any(|&f| keys[f] == keys[i]) {
            firsts.push(i);
        }
    }
    if sorted {
        firsts.sort_by(|&p, &q| {
            keys[p]
                .iter()
                .zip(&keys[q])
                .map(|(a, b)| a.total_cmp(b))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        });
    }
    let inverse: Vec<i64> = (0..len)
        .map(|i| firsts.iter().position(|&f| keys[f] == keys[i]).unwrap_or(0) as i64)
        .collect();
    let counts: Vec<i64> = (0..firsts.len())
        .map(|k| inverse.iter().filter(|&&v| v == k as i64).count() as i64)
        .collect();
    let idx: Vec<i64> = firsts.iter().map(|&f| f as i64).collect();
    let k = idx.len();
    let y = r.one(
        &Op::Gather { axis: a as isize },
        &[data, Tensor::from_i64(&[k], &idx)?],
    )?;
    Ok(vec![
        y,
        Tensor::from_i64(&[k], &idx)?,
        Tensor::from_i64(&[len], &inverse)?,
        Tensor::from_i64(&[k], &counts)?,
    ])
}

/// MaxPool with its `Indices` output: the flat row-major input index of each maximum (the first
/// one on ties).
pub(crate) fn max_pool_indices(
    r: &mut HostRun,
    pool: &Op,
    column_major: bool,
    x: &Tensor,
) -> Result<Vec<Tensor>> {
    let Op::Pool {
        kernel,
        strides,
        dilations,
        pads,
        ceil_mode,
        ..
    } = pool
    else {
        return Err(Error::invalid("max_pool", "not a pool op"));
    };
    let values = r.one(pool, std::slice::from_ref(x))?;
    let xd = x.dims();
    let g = cyb_ops::window_geometry(
        "max_pool",
        &xd[2..],
        kernel,
        strides,
        dilations,
        pads,
        *ceil_mode,
    )?;
    let v = f32s(r, x)?;
    let sp = &xd[2..];
    let in_n: usize = sp.iter().product();
    let out_n: usize = g.out.iter().product();
    let k_n: usize = kernel.iter().product();
    let mut idx = vec![0i64; xd[0] * xd[1] * out_n];
    let (mut op, mut kp) = (vec![0; sp.len()], vec![0; sp.len()]);
    for plane in 0..xd[0] * xd[1] {
        for o in 0..out_n {
            unravel(o, &g.out, &mut op);
            let mut best: Option<(f32, usize)> = None;
            for k in 0..k_n {
                unravel(k, kernel, &mut kp);
                let (mut off, mut col, mut col_stride) = (Some(0usize), 0usize, 1usize);
                for s in 0..sp.len() {
                    let p = (op[s] * g.strides[s] + kp[s] * g.dilations[s]) as isize
                        - g.pad_begin[s] as isize;
                    off = off
                        .filter(|_| p >= 0 && p < sp[s] as isize)
                        .map(|f| f * sp[s] + p as usize);
                    col += p.max(0) as usize * col_stride;
                    col_stride *= sp[s];
                }
                if let Some(f) = off {
                    let val = v[plane * in_n + f];
                    if best.is_none_or(|(b, _)| val > b) {
                        best = Some((val, plane * in_n + if column_major { col } else { f }));
                    }
                }
            }
            idx[plane * out_n + o] = best.map_or(0, |(_, i)| i as i64);
        }
    }
    Ok(vec![
        values,
        Tensor::from_i64(
            &xd.iter()
                .take(2)
                .copied()
                .chain(g.out.iter().copied())
                .collect::<Vec<_>>(),
            &idx,
        )?,
    ])
}

/// MaxUnpool: zeros of the unpooled shape (or `output_shape`), with `y.flat[i[k]] = x[k]`.
pub(crate) fn max_unpool(
    r: &mut HostRun,
    inputs: &[Option<Tensor>],
    kernel: &[usize],
    strides: &[usize],
    pads: &[usize],
) -> Result<Vec<Tensor>> {
    let op = "max_unpool";
    let (x, i) = (req(op, inputs, 0)?, req(op, inputs, 1)?);
    let xd = x.dims();
    let k = xd.len().saturating_sub(2);
    let or = |v: &[usize], n: usize, d: usize| if v.is_empty() { vec![d; n] } else { v.to_vec() };
    let (strides, pads) = (or(strides, k, 1), or(pads, 2 * k, 0));
    if kernel.len() != k || strides.len() != k || pads.len() != 2 * k {
        return Err(Error::invalid(
            op,
            "kernel, strides and pads must match the spatial rank",
        ));
    }
    // Indices address the unpooled shape the window arithmetic gives; a larger output_shape
    // pads it with zeros at the end of each dim (as ONNX's reference does).
    let mut dims = xd[..2].to_vec();
    for s in 0..k {
        let v = (xd[s + 2] as i64 - 1) * strides[s] as i64 + kernel[s] as i64
            - pads[s] as i64
            - pads[s + k] as i64;
        dims.push(usize::try_from(v).map_err(|_| Error::invalid(op, format!("output dim {v}")))?);
    }
    let mut y = filled_vec(op, &dims, 0f32)?;
    let (vals, ids) = (f32s(r, x)?, r.d.to_host(i)?.to_i64_vec()?);
    for (v, &t) in vals.iter().zip(&ids) {
        let t = usize::try_from(t)
            .ok()
            .filter(|&t| t < y.len())
            .ok_or_else(|| Error::invalid(op, format!("index {t} outside {}", y.len())))?;
        y[t] = *v;
    }
    if let Some(t) = inputs.get(2).and_then(Option::as_ref) {
        let want = crate::host_op::to_usize(op, &r.ints(t)?)?;
        if want.len() != dims.len() || want.iter().zip(&dims).any(|(w, d)| w < d) {
            return Err(Error::shape(op, &dims, &want));
        }
        let pads: Vec<isize> = (0..dims.len())
            .map(|_| 0)
            .chain(want.iter().zip(&dims).map(|(w, d)| (w - d) as isize))
            .collect();
        let t = Tensor::from_f32(&dims, &y)?;
        let padded = r.one(
            &Op::Pad {
                pads,
                mode: cyb_ops::PadMode::Constant { value: 0.0 },
            },
            &[t],
        )?;
        return Ok(vec![cast_to(r, padded, x.dtype())?]);
    }
    let t = Tensor::from_f32(&dims, &y)?;
    Ok(vec![cast_to(r, t, x.dtype())?])
}

fn unravel(mut flat: usize, dims: &[usize], idx: &mut [usize]) {
    for (i, &d) in dims.iter().enumerate().rev() {
        idx[i] = flat % d.max(1);
        flat /= d.max(1);
    }
}

pub(crate) fn batch_norm_training(
    r: &mut HostRun,
    inputs: &[Option<Tensor>],
    eps: f32,
    momentum: f32,
) -> Result<Vec<Tensor>> {
    let op = "batch_norm_training";
    let x = req(op, inputs, 0)?;
    let p: Vec<Vec<f32>> = (1..5)
        .map(|i| f32s(r, req(op, inputs, i)?))
        .collect::<Result<_>>()?;
    let d = x.dims();
    let c = *d
        .get(1)
        .ok_or_else(|| Error::invalid(op, "input rank < 2"))?;
    if p.iter().any(|v| v.len() != c) {
        return Err(Error::invalid(
            op,
            "scale, bias, mean and var must have one value per channel",
        ));
    }
    let v = f32s(r, x)?;
    let inner: usize = d[2..].iter().product();
    let count = (d[0] * inner).max(1) as f64;
    let (mut mean, mut var) = (vec![0f64; c], vec![0f64; c]);
    for (i, &e) in v.iter().enumerate() {
        mean[(i / inner.max(1)) % c] += e as f64;
    }
    mean.iter_mut().for_each(|m| *m /= count);
    for (i, &e) in v.iter().enumerate() {
        let ch = (i / inner.max(1)) % c;
        var[ch] += (e as f64 - mean[ch]).powi(2);
    }
    var.iter_mut().for_each(|s| *s /= count);
    let y: Vec<f32> = v
        .iter()
        .enumerate()
        .map(|(i, &e)| {
            let ch = (i / inner.max(1)) % c;
            ((e as f64 - mean[ch]) / (var[ch] + eps as f64).sqrt()) as f32 * p[0][ch] + p[1][ch]
        })
        .collect();
    let m = momentum as f64;
    let run_mean: Vec<f32> = (0..c)
        .map(|k| (p[2][k] as f64 * m + mean[k] * (1.0 - m)) as f32)
        .collect();
    let run_var: Vec<f32> = (0..c)
        .map(|k| (p[3][k] as f64 * m + var[k] * (1.0 - m)) as f32)
        .collect();
    Ok(vec![
        cast_to(r, Tensor::from_f32(d, &y)?, x.dtype())?,
        Tensor::from_f32(&[c], &run_mean)?,
        Tensor::from_f32(&[c], &run_var)?,
    ])
}

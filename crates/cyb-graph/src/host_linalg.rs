//! Host nodes that expand into several ops: ONNX MatMul/Gemm semantics, the softmax family
//! with opset < 13 flattening, depth/space rearrangement, one-hot.

use crate::host_op::{axis, cast_to, req, HostRun, SoftmaxKind};
use cyb_ops::{BinaryFn, Op};
use cyb_tensor::memory::filled_vec;
use cyb_tensor::{DType, Error, Result, Tensor};

/// The dtype of `a` when both operands of a matmul are floats.
fn float_operands(a: &Tensor, b: &Tensor) -> Result<DType> {
    let dtype = a.dtype();
    if !dtype.is_float() || !b.dtype().is_float() {
        return Err(Error::UnsupportedOp {
            op: "matmul".into(),
            backend: "graph".into(),
            input_dtype: dtype,
        });
    }
    Ok(dtype)
}

/// numpy `matmul`: 1-D operands get a dim added (and removed from the result).
pub(crate) fn matmul(r: &mut HostRun, a: &Tensor, b: &Tensor) -> Result<Vec<Tensor>> {
    let dtype = float_operands(a, b)?;
    let (ar, br) = (a.dims().len(), b.dims().len());
    if ar == 0 || br == 0 {
        return Err(Error::invalid("matmul", "scalar operand"));
    }
    let a2 = if ar == 1 {
        r.reshape(a, &[1, a.dims()[0]])?
    } else {
        a.clone()
    };
    let b2 = if br == 1 {
        r.reshape(b, &[b.dims()[0], 1])?
    } else {
        b.clone()
    };
    let mut y = r.one(
        &Op::MatMul {
            rhs_transposed: false,
        },
        &[a2, b2],
    )?;
    if ar == 1 || br == 1 {
        let mut d = y.dims().to_vec();
        if br == 1 {
            d.pop();
        }
        if ar == 1 {
            let n = d.len();
            d.remove(n - 1 - usize::from(br != 1));
        }
        y = r.reshape(&y, &d)?;
    }
    Ok(vec![cast_to(r, y, dtype)?])
}

/// [`matmul`] by `b` stored transposed (`[n, k]`): a 1-D `a` is one row and the result loses
/// that dim.
pub(crate) fn matmul_transposed(r: &mut HostRun, a: &Tensor, b: &Tensor) -> Result<Vec<Tensor>> {
    let dtype = float_operands(a, b)?;
    let (ar, bd) = (a.dims().len(), b.dims());
    if ar == 0 || bd.len() != 2 {
        return Err(Error::invalid(
            "matmul",
            format!(
                "operands of rank {ar} and {} (the second transposed)",
                bd.len()
            ),
        ));
    }
    let op = Op::MatMul {
        rhs_transposed: true,
    };
    let y = if ar == 1 {
        let row = r.reshape(a, &[1, a.dims()[0]])?;
        let y = r.one(&op, &[row, b.clone()])?;
        r.reshape(&y, &[bd[0]])?
    } else {
        r.one(&op, &[a.clone(), b.clone()])?
    };
    Ok(vec![cast_to(r, y, dtype)?])
}

pub(crate) fn gemm(
    r: &mut HostRun,
    inputs: &[Option<Tensor>],
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
) -> Result<Vec<Tensor>> {
    let a = req("gemm", inputs, 0)?;
    let b = req("gemm", inputs, 1)?;
    let dtype = a.dtype();
    let a = if trans_a {
        r.one(&Op::Transpose { a: 0, b: 1 }, std::slice::from_ref(a))?
    } else {
        a.clone()
    };
    let mut y = r.one(
        &Op::MatMul {
            rhs_transposed: trans_b,
        },
        &[a, b.clone()],
    )?;
    if alpha != 1.0 {
        y = r.one(&Op::Scale { factor: alpha }, &[y])?;
    }
    if let Some(c) = inputs.get(2).and_then(Option::as_ref) {
        if beta != 0.0 {
            let mut c = cast_to(r, c.clone(), DType::F32)?;
            if beta != 1.0 {
                c = r.one(&Op::Scale { factor: beta }, &[c])?;
            }
            y = r.one(&Op::Binary { f: BinaryFn::Add }, &[y, c])?;
        }
    }
    Ok(vec![cast_to(r, y, dtype)?])
}

pub(crate) fn softmax(
    r: &mut HostRun,
    x: &Tensor,
    a: i64,
    coerce_2d: bool,
    kind: SoftmaxKind,
) -> Result<Vec<Tensor>> {
    let dims = x.dims().to_vec();
    let (input, ax) = if coerce_2d {
        let n = dims.len() as i64;
        let a = if a < 0 { a + n } else { a };
        if !(0..=n).contains(&a) {
            return Err(Error::invalid("softmax", format!("axis {a} for rank {n}")));
        }
        let (l, rr) = dims.split_at(a as usize);
        (r.reshape(x, &[l.iter().product(), rr.iter().product()])?, 1)
    } else {
        (x.clone(), axis("softmax", a, dims.len())? as isize)
    };
    let y = match kind {
        SoftmaxKind::Softmax => r.one(&Op::Softmax { axis: ax }, &[input])?,
        SoftmaxKind::LogSoftmax => r.one(&Op::LogSoftmax { axis: ax }, &[input])?,
        SoftmaxKind::Hardmax => {
            let idx = r.one(
                &Op::ArgReduce {
                    axis: ax,
                    keepdims: true,
                    max: true,
                    select_last: false,
                },
                std::slice::from_ref(&input),
            )?;
            let idx = r.d.to_host(&idx)?.to_i64_vec()?;
            let d = input.dims().to_vec();
            let a = ax as usize;
            let inner: usize = d[a + 1..].iter().product();
            let len = d[a];
            let mut v = vec![0f32; input.numel()];
            for (lane, &k) in idx.iter().enumerate() {
                let (o, n) = (lane / inner.max(1), lane % inner.max(1));
                v[(o * len + k as usize) * inner + n] = 1.0;
            }
            Tensor::from_f32(&d, &v)?
        }
    };
    let y = r.reshape(&y, &dims)?;
    Ok(vec![cast_to(r, y, x.dtype())?])
}

fn permuted(
    r: &mut HostRun,
    x: &Tensor,
    split: &[usize],
    perm: Vec<usize>,
    out: &[usize],
) -> Result<Vec<Tensor>> {
    let v = r.reshape(x, split)?;
    let p = r.one(&Op::Permute { perm }, &[v])?;
    Ok(vec![r.reshape(&p, out)?])
}

fn nchw(op: &str, x: &Tensor) -> Result<[usize; 4]> {
    x.dims()
        .try_into()
        .map_err(|_| Error::invalid(op, format!("input {:?} is not [n, c, h, w]", x.dims())))
}

pub(crate) fn depth_to_space(
    r: &mut HostRun,
    x: &Tensor,
    b: usize,
    crd: bool,
) -> Result<Vec<Tensor>> {
    let [n, c, h, w] = nchw("depth_to_space", x)?;
    if b == 0 || c % (b * b) != 0 {
        return Err(Error::invalid(
            "depth_to_space",
            format!("{c} channels, block {b}"),
        ));
    }
    let c2 = c / (b * b);
    let out = [n, c2, h * b, w * b];
    if crd {
        permuted(r, x, &[n, c2, b, b, h, w], vec![0, 1, 4, 2, 5, 3], &out)
    } else {
        permuted(r, x, &[n, b, b, c2, h, w], vec![0, 3, 4, 1, 5, 2], &out)
    }
}

pub(crate) fn space_to_depth(r: &mut HostRun, x: &Tensor, b: usize) -> Result<Vec<Tensor>> {
    let [n, c, h, w] = nchw("space_to_depth", x)?;
    if b == 0 || h % b != 0 || w % b != 0 {
        return Err(Error::invalid(
            "space_to_depth",
            format!("{h}x{w}, block {b}"),
        ));
    }
    let out = [n, c * b * b, h / b, w / b];
    permuted(
        r,
        x,
        &[n, c, h / b, b, w / b, b],
        vec![0, 3, 5, 1, 2, 4],
        &out,
    )
}

pub(crate) fn one_hot(r: &mut HostRun, inputs: &[Option<Tensor>], a: i64) -> Result<Vec<Tensor>> {
    let name = "one_hot";
    let idx = r.d.to_host(req(name, inputs, 0)?)?;
    let depth = r.d.to_host(req(name, inputs, 1)?)?.to_f32_vec()?;
    let depth = *depth
        .first()
        .ok_or_else(|| Error::invalid(name, "depth is empty"))? as i64;
    if depth <= 0 {
        return Err(Error::invalid(name, format!("depth {depth}")));
    }
    let values = req(name, inputs, 2)?;
    if values.numel() != 2 {
        return Err(Error::invalid(name, "values must hold [off, on]"));
    }
    let ids: Vec<i64> = idx.to_f32_vec()?.iter().map(|&v| v as i64).collect();
    let d = idx.dims();
    let rank = d.len() + 1;
    let ax = axis(name, a, rank)?;
    let mut od = d.to_vec();
    od.insert(ax, depth as usize);
    let inner: usize = d[ax..].iter().product();
    let mut pick = filled_vec(name, &[ids.len(), depth as usize], 0i64)?;
    for (flat, &id) in ids.iter().enumerate() {
        let id = if id < 0 { id + depth } else { id };
        if (0..depth).contains(&id) {
            let (o, n) = (flat / inner.max(1), flat % inner.max(1));
            pick[(o * depth as usize + id as usize) * inner + n] = 1;
        }
    }
    let pick = Tensor::from_i64(&od, &pick)?;
    let flat_values = r.reshape(values, &[2])?;
    Ok(vec![r.one(&Op::Gather { axis: 0 }, &[flat_values, pick])?])
}

//! Layout ops. Reshape shares the buffer; permute, transpose, slice, concat and split are one
//! strided copy kernel (`shaders/copy.wgsl`) over 4-byte elements.

use crate::backend::{device_view, gpu_buf, State, WgpuBackend};
use crate::kernels::{Family, KernelKey};
use crate::memory::{DeviceView, GpuBuf, LazySlice};
use cyb_ops::Op;
use cyb_tensor::{Result, Tensor, TensorInfo};
use std::sync::{Arc, Weak};

/// Row-major strides of `dims`.
fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// Left-pads (dims, strides) to rank 4 with size-1 dimensions.
fn pad4(dims: &[usize], st: &[usize]) -> ([u32; 4], [u32; 4]) {
    let (mut d, mut s) = ([1u32; 4], [0u32; 4]);
    let skip = 4 - dims.len().min(4);
    for i in 0..dims.len().min(4) {
        d[skip + i] = dims[i] as u32;
        s[skip + i] = st[i] as u32;
    }
    (d, s)
}

#[allow(clippy::too_many_arguments)]
fn copy(
    gpu: &WgpuBackend,
    st: &mut State,
    src: &GpuBuf,
    dst: &GpuBuf,
    dims: &[usize],
    src_strides: &[usize],
    dst_strides: &[usize],
    src_base: usize,
    dst_base: usize,
) -> Result<()> {
    let n: usize = dims.iter().product();
    let (d, ss) = pad4(dims, src_strides);
    let (_, ds) = pad4(dims, dst_strides);
    let mut p = vec![n as u32];
    p.extend(d);
    p.extend(ss);
    p.extend(ds);
    p.push(src_base as u32);
    p.push(dst_base as u32);
    let key = KernelKey::plain(Family::Copy, "copy");
    gpu.dispatch(st, &key, &p, &[src, dst], n.div_ceil(64) as u32)
}

/// True for a permute or transpose that only moves axes of size 1: the elements keep their
/// order, so the result shares the input's buffer (no copy, no launch; attention's
/// `[1, heads, d]` ↔ `[heads, 1, d]` in decode).
fn keeps_order(op: &Op, dims: &[usize]) -> Result<bool> {
    let perm: Vec<usize> = match op {
        Op::Permute { perm } => perm.clone(),
        Op::Transpose { a, b } => {
            let a = cyb_ops::resolve_axis("transpose", dims.len(), *a)?;
            let b = cyb_ops::resolve_axis("transpose", dims.len(), *b)?;
            let mut p: Vec<usize> = (0..dims.len()).collect();
            p.swap(a, b);
            p
        }
        _ => return Ok(false),
    };
    let moved: Vec<usize> = perm.into_iter().filter(|&p| dims[p] != 1).collect();
    Ok(moved.windows(2).all(|w| w[0] < w[1]))
}

/// Reshape and order-keeping permutes (free), other permutes, transposes and slices of one
/// input.
pub(crate) fn single(
    gpu: &WgpuBackend,
    st: &mut State,
    op: &Op,
    x: &Tensor,
    out: &TensorInfo,
) -> Result<Tensor> {
    if matches!(op, Op::Reshape { .. }) || keeps_order(op, x.dims())? {
        let v = device_view(x)?;
        let view = DeviceView {
            buf: v.buffer()?,
            len: v.len,
            host: v.host.clone(),
            lazy: None,
        };
        return view.into_tensor(out.shape.clone(), x.dtype());
    }
    let in_dims = x.dims();
    let in_st = strides(in_dims);
    let rank = in_dims.len();
    let out_dims = out.shape.dims();
    let dst = strides(out_dims);
    let xbuf = gpu_buf(x)?;
    let (src, base) = match op {
        Op::Permute { perm } => (perm.iter().map(|&p| in_st[p]).collect(), 0),
        Op::Transpose { a, b } => {
            let a = cyb_ops::resolve_axis("transpose", rank, *a)?;
            let b = cyb_ops::resolve_axis("transpose", rank, *b)?;
            let mut s = in_st.clone();
            s.swap(a, b);
            (s, 0)
        }
        Op::Slice {
            axis,
            start,
            end,
            step,
        } => {
            let ax = cyb_ops::resolve_axis("slice", rank, *axis)?;
            let (s0, _) = cyb_ops::slice_range(in_dims[ax], *start, *end, *step);
            let mut s = in_st.clone();
            s[ax] *= (*step).max(1);
            (s, s0 * in_st[ax])
        }
        other => {
            return Err(cyb_tensor::Error::invalid(
                other.name(),
                "not a layout op of the wgpu backend",
            ))
        }
    };
    if let Op::Slice { step: 1, .. } = op {
        let keeps = |i: usize| in_dims[i] == out_dims[i];
        if base == 0 && rank >= 3 && (0..rank - 2).all(keeps) && keeps(rank - 1) {
            return lazy_slice(st, x, xbuf, out, src, dst);
        }
    }
    let (y, ybuf) = gpu.output(st, out_dims, x.dtype())?;
    copy(gpu, st, &xbuf, &ybuf, out_dims, &src, &dst, base, 0)?;
    Ok(y)
}

/// A slice from row 0 along the second-to-last axis (a KV cache's prefix), its buffer and copy
/// deferred (see [`LazySlice`]).
fn lazy_slice(
    st: &mut State,
    x: &Tensor,
    src: Arc<GpuBuf>,
    out: &TensorInfo,
    src_strides: Vec<usize>,
    dst_strides: Vec<usize>,
) -> Result<Tensor> {
    let dims = out.shape.dims();
    let bytes = x
        .dtype()
        .bytes_for(out.shape.numel())
        .ok_or_else(|| cyb_tensor::Error::invalid("slice", format!("{}", x.dtype())))?;
    let lazy = Arc::new(LazySlice {
        src: src.clone(),
        src_rows: x.dims()[dims.len() - 2],
        dims: dims.to_vec(),
        src_strides,
        dst_strides,
        bytes,
        dst: std::sync::OnceLock::new(),
    });
    prune(st);
    st.lazy.push(Arc::downgrade(&lazy));
    let view = DeviceView {
        buf: src,
        len: bytes,
        host: None,
        lazy: Some(lazy),
    };
    view.into_tensor(out.shape.clone(), x.dtype())
}

/// Forgets lazy slices that are gone or copied.
fn prune(st: &mut State) {
    st.lazy
        .retain(|w| w.upgrade().is_some_and(|l| l.dst.get().is_none()));
}

/// Makes the buffer of a lazy slice and records its copy, once.
fn materialize(gpu: &WgpuBackend, st: &mut State, l: &LazySlice) -> Result<()> {
    if l.dst.get().is_some() {
        return Ok(());
    }
    let dst = gpu.frame_out(st, l.bytes)?;
    let (d, s, t) = (&l.dims, &l.src_strides, &l.dst_strides);
    copy(gpu, st, &l.src, &dst, d, s, t, 0, 0)?;
    // Only this step's lock holder gets here, so the cell is still empty.
    let _ = l.dst.set(dst);
    Ok(())
}

/// Makes `t`'s buffer hold its values (a lazy slice's copy is recorded now).
pub(crate) fn materialize_input(gpu: &WgpuBackend, st: &mut State, t: &Tensor) -> Result<()> {
    match device_view(t).ok().and_then(|v| v.lazy.as_ref()) {
        Some(l) => materialize(gpu, st, l),
        None => Ok(()),
    }
}

/// Records the copies of the lazy slices of `buf` before it is written.
fn materialize_slices_of(gpu: &WgpuBackend, st: &mut State, buf: &GpuBuf) -> Result<()> {
    let of_buf: Vec<Arc<LazySlice>> = st
        .lazy
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|l| l.src.id == buf.id)
        .collect();
    for l in of_buf {
        materialize(gpu, st, &l)?;
    }
    prune(st);
    Ok(())
}

pub(crate) fn concat(
    gpu: &WgpuBackend,
    st: &mut State,
    axis: isize,
    inputs: &[Tensor],
    out: &TensorInfo,
) -> Result<Tensor> {
    let out_dims = out.shape.dims();
    let ax = cyb_ops::resolve_axis("concat", out_dims.len(), axis)?;
    let dst = strides(out_dims);
    let (y, ybuf) = gpu.output(st, out_dims, inputs[0].dtype())?;
    let mut offset = 0;
    for t in inputs {
        let src = strides(t.dims());
        let buf = gpu_buf(t)?;
        copy(
            gpu,
            st,
            &buf,
            &ybuf,
            t.dims(),
            &src,
            &dst,
            0,
            offset * dst[ax],
        )?;
        offset += t.dims()[ax];
    }
    Ok(y)
}

pub(crate) fn split(
    gpu: &WgpuBackend,
    st: &mut State,
    axis: isize,
    x: &Tensor,
    outs: &[TensorInfo],
) -> Result<Vec<Tensor>> {
    let in_dims = x.dims();
    let ax = cyb_ops::resolve_axis("split", in_dims.len(), axis)?;
    let src = strides(in_dims);
    let xbuf = gpu_buf(x)?;
    let mut offset = 0;
    let mut result = Vec::with_capacity(outs.len());
    for o in outs {
        let dims = o.shape.dims();
        let (y, ybuf) = gpu.output(st, dims, x.dtype())?;
        copy(
            gpu,
            st,
            &xbuf,
            &ybuf,
            dims,
            &src,
            &strides(dims),
            offset * src[ax],
            0,
        )?;
        offset += dims[ax];
        result.push(y);
    }
    Ok(result)
}

/// KV append: the new rows `[n, heads, d]` are copied into the cache `[heads, capacity, d]`
/// in place, and the result is a tensor over the cache's own buffer (the cache stays on the
/// device for the whole session; nothing is read back).
pub(crate) fn kv_append(
    gpu: &WgpuBackend,
    st: &mut State,
    start: usize,
    cache: &Tensor,
    new: &Tensor,
) -> Result<Tensor> {
    let view = device_view(cache)?;
    let cache_buf = view.buffer()?;
    materialize_slices_of(gpu, st, &cache_buf)?;
    let (c, n) = (cache.dims(), new.dims());
    let (cap, d) = (c[1], c[2]);
    let src = strides(n);
    // Element (t, h, j) of the new rows lands at (h, start + t, j) of the cache.
    let dst = [d, cap * d, 1];
    copy(
        gpu,
        st,
        &*gpu_buf(new)?,
        &cache_buf,
        n,
        &src,
        &dst,
        0,
        start * d,
    )?;
    // A new view without a host shadow: an uploaded cache's shadow no longer matches its bytes.
    let out = DeviceView {
        buf: cache_buf,
        len: view.len,
        host: None,
        lazy: None,
    };
    out.into_tensor(cache.shape().clone(), cache.dtype())
}

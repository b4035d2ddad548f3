//! Fused scaled dot-product attention over the KV cache: scores, softcap, causal and
//! sliding-window masking, softmax and the weighted sum of values in one pass per query row,
//! with query rows (heads × positions) split across the pool. Grouped-query heads read their
//! shared KV head in place. Additive masks and ALiBi fall back to the reference.

use crate::pool::{split, DisjointOut, ThreadPool};
use cyb_ops::Op;
use cyb_tensor::{AlignedBuf, DType, Error, Result, Shape, Storage, Tensor, TensorInfo};
use std::cell::RefCell;
use std::sync::Arc;

pub(crate) fn supports(op: &Op, inputs: &[TensorInfo]) -> bool {
    let Op::Sdpa { alibi_max_bias, .. } = op else {
        return false;
    };
    alibi_max_bias.is_none() && inputs.len() == 3 && inputs.iter().all(|i| i.dtype == DType::F32)
}

thread_local! {
    /// Per-thread score buffer, reused across calls so decode does not allocate it.
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Eight independent partial sums, which the compiler turns into one SIMD accumulator.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut s = acc.iter().sum::<f32>();
    for (x, y) in ar.iter().zip(br) {
        s += x * y;
    }
    s
}

pub(crate) fn sdpa(op: &Op, pool: &ThreadPool, inputs: &[Tensor]) -> Result<Tensor> {
    let Op::Sdpa {
        scale,
        causal,
        sliding_window,
        softcap,
        ..
    } = *op
    else {
        return Err(Error::invalid("sdpa", "not an sdpa op"));
    };
    let (q, k, v) = (
        inputs[0].as_f32()?,
        inputs[1].as_f32()?,
        inputs[2].as_f32()?,
    );
    let (qd, kd, vd) = (inputs[0].dims(), inputs[1].dims(), inputs[2].dims());
    let r = qd.len();
    let (hq, lq, d) = (qd[r - 3], qd[r - 2], qd[r - 1]);
    let (hkv, lk, dv) = (kd[r - 3], kd[r - 2], vd[r - 1]);
    let group = (hq / hkv.max(1)).max(1);
    let rows = q.len().checked_div(d).unwrap_or(0);
    let mut dims = qd.to_vec();
    dims[r - 1] = dv;
    let mut buf = AlignedBuf::zeroed(rows * dv * 4);
    if rows > 0 && dv > 0 {
        let y: &mut [f32] = bytemuck::cast_slice_mut(buf.as_bytes_mut());
        let out = DisjointOut::new(y);
        let threads = pool.threads();
        let (q, k, v) = (&*q, &*k, &*v);
        pool.run(&|t| {
            SCORES.with_borrow_mut(|scores| {
                scores.resize(lk, 0.0);
                for row in split(rows, threads, t) {
                    // SAFETY: output row `row` belongs to this thread's range only.
                    let y_row = unsafe { out.slice(row * dv..(row + 1) * dv) };
                    let i = row % lq;
                    let h = (row / lq) % hq;
                    let batch = row / (lq * hq);
                    let kv = batch * hkv + h / group;
                    let q_row = &q[row * d..(row + 1) * d];
                    let pos = lk as i64 - lq as i64 + i as i64;
                    // Visible keys form one contiguous range [lo, hi).
                    let hi = if causal {
                        (pos + 1).clamp(0, lk as i64) as usize
                    } else {
                        lk
                    };
                    let lo = match sliding_window {
                        Some(w) => (pos - w as i64 + 1).clamp(0, lk as i64) as usize,
                        None => 0,
                    };
                    if lo >= hi {
                        continue; // every key excluded: the row stays zero
                    }
                    let mut max = f32::NEG_INFINITY;
                    for j in lo..hi {
                        let mut s = dot(q_row, &k[(kv * lk + j) * d..][..d]) * scale;
                        if let Some(c) = softcap {
                            s = c * (s / c).tanh();
                        }
                        scores[j] = s;
                        max = max.max(s);
                    }
                    let mut sum = 0f32;
                    for s in &mut scores[lo..hi] {
                        *s = (*s - max).exp();
                        sum += *s;
                    }
                    for (j, &e) in scores.iter().enumerate().take(hi).skip(lo) {
                        let p = e / sum;
                        let v_row = &v[(kv * lk + j) * dv..][..dv];
                        for (o, vv) in y_row.iter_mut().zip(v_row) {
                            *o += p * vv;
                        }
                    }
                }
            })
        });
    }
    Tensor::new(Shape::new(dims)?, DType::F32, Storage::Host(Arc::new(buf)))
}

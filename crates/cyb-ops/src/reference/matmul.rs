//! Matrix product `a · b` / `a · bᵀ`, batched with broadcast leading dimensions.
//!
//! With `rhs_transposed`, `b` holds one row per output feature (Linear and GGUF layout) and
//! may be a block format: each row is decoded on its own, so a quantized weight matrix is never
//! expanded whole.

use super::{broadcast_offset, broadcast_strides, decode_row, f32_out, floats, host};
use cyb_tensor::{Error, Result, Tensor, TensorInfo};
use rayon::prelude::*;

pub(super) fn matmul(rhs_transposed: bool, inputs: &[Tensor], out: &TensorInfo) -> Result<Tensor> {
    let (a_t, b_t) = (&inputs[0], &inputs[1]);
    let a = floats(a_t)?;
    let (ad, bd, od) = (a_t.dims(), b_t.dims(), out.shape.dims());
    let (m, k) = (ad[ad.len() - 2], ad[ad.len() - 1]);
    let n = od[od.len() - 1];
    let lead = &od[..od.len() - 2];
    let batches: usize = lead.iter().product();
    let a_lead = broadcast_strides(&ad[..ad.len() - 2], lead);
    let b_lead = broadcast_strides(&bd[..bd.len() - 2], lead);
    let mut y = vec![0f32; out.shape.numel()];
    if m * n == 0 {
        return f32_out(out, &y);
    }
    let b_plain = if rhs_transposed {
        None
    } else {
        Some(floats(b_t)?)
    };
    for (batch, y_mat) in y.chunks_mut(m * n).enumerate().take(batches) {
        let a_mat = &a[broadcast_offset(batch, lead, &a_lead) * m * k..][..m * k];
        let b_index = broadcast_offset(batch, lead, &b_lead);
        match &b_plain {
            Some(b) => a_times_b(a_mat, &b[b_index * k * n..][..k * n], k, n, y_mat),
            None => a_times_bt(a_mat, b_t, b_index * n, k, n, y_mat)?,
        }
    }
    f32_out(out, &y)
}

/// `y[i, j] = Σ_p a[i, p] · b[p, j]` for a plain `[k, n]` matrix `b`; one output row per task.
fn a_times_b(a: &[f32], b: &[f32], k: usize, n: usize, y: &mut [f32]) {
    y.par_chunks_mut(n).enumerate().for_each(|(i, y_row)| {
        // Accumulating whole rows of b keeps every y[i, j] summed in order of p.
        for p in 0..k {
            let a_ip = a[i * k + p];
            for (acc, b_pj) in y_row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                *acc += a_ip * b_pj;
            }
        }
    });
}

/// `y[i, j] = Σ_p a[i, p] · b[first_row + j, p]`, decoding each row of `b` once.
fn a_times_bt(
    a: &[f32],
    b: &Tensor,
    first_row: usize,
    k: usize,
    n: usize,
    y: &mut [f32],
) -> Result<()> {
    let dtype = b.dtype();
    let row_bytes = dtype
        .bytes_for(k)
        .ok_or_else(|| Error::invalid("matmul", format!("{k} is not whole {dtype} blocks")))?;
    let bytes = host("matmul", b)?;
    let block = dtype.block_elems();
    let m = a.len() / k.max(1);
    // One task per row of b (a column of y); columns are scattered into y afterwards.
    let columns: Vec<Vec<f32>> = (0..n)
        .into_par_iter()
        .map(|j| {
            let start = (first_row + j) * row_bytes;
            let mut w = vec![0f32; k];
            decode_row(dtype, &bytes[start..start + row_bytes], &mut w)?;
            Ok((0..m)
                .map(|i| blocked_dot(&a[i * k..(i + 1) * k], &w, block))
                .collect())
        })
        .collect::<Result<_>>()?;
    for (j, col) in columns.iter().enumerate() {
        for (i, v) in col.iter().enumerate() {
            y[i * n + j] = *v;
        }
    }
    Ok(())
}

/// Dot product summed per block of `block` values, block sums added in order (for scalar
/// dtypes `block` is 1, which is a plain sum in order of p).
fn blocked_dot(a: &[f32], w: &[f32], block: usize) -> f32 {
    let mut acc = 0f32;
    for (ac, wc) in a.chunks(block).zip(w.chunks(block)) {
        let mut part = 0f32;
        for (x, y) in ac.iter().zip(wc) {
            part += x * y;
        }
        acc += part;
    }
    acc
}

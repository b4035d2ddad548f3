//! `y = a · wᵀ` on repacked weights (`repack.rs`) with activations quantized once
//! (`act_quads.rs`): the quantized matmul of the AVX-512 VNNI kernel set, for decode and
//! prefill alike.
//!
//! Weight groups (16 rows) are split into fixed contiguous ranges, one per pool thread
//! (outputs, never reductions, are split, so the thread count does not change results). A
//! thread takes its groups in chunks that stay in its L2 cache while every tile of activation
//! rows passes over them, so during prefill each weight byte comes from memory once; inside a
//! tile each loaded weight vector serves all of the tile's rows.

use crate::act_quads::ActQuads;
use crate::pool::{split, DisjointOut, ThreadPool};
use crate::repack::{Repacked, GROUP};
use crate::KernelSet;
use cyb_tensor::DType;

/// Bytes of weight groups a thread keeps hot while all activation rows pass over them.
const CHUNK_BYTES: usize = 256 * 1024;

/// The group kernel for `dtype` in `set`, if the repacked GEMM covers it.
#[cfg(target_arch = "x86_64")]
pub(crate) fn kernel(dtype: DType, set: KernelSet) -> Option<crate::gemm_x86::GroupKernel> {
    use crate::gemm_x86 as x;
    if set != KernelSet::Avx512 {
        return None;
    }
    match dtype {
        DType::Q4_0 => Some(x::q4_0_group),
        DType::Q8_0 => Some(x::q8_0_group),
        DType::Q4_K => Some(x::q4_k_group),
        DType::Q6_K => Some(x::q6_k_group),
        _ => None,
    }
}

/// Computes `m` rows of `y` (`m × w.n`) from the quantized activations `a`.
///
/// # Safety
/// `kern` must come from [`kernel`] for `w.dtype`, and the CPU must have its kernel set.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn gemm(
    pool: &ThreadPool,
    kern: crate::gemm_x86::GroupKernel,
    w: &Repacked,
    a: &ActQuads,
    m: usize,
    y: &mut [f32],
) {
    use crate::gemm_x86::{Out, ROWS};
    let n = w.n;
    assert!(y.len() >= m * n && a.k == w.k);
    let groups = w.groups();
    let chunk = (CHUNK_BYTES / w.group_bytes.max(1)).max(1);
    let threads = pool.threads();
    let out = DisjointOut::new(y);
    pool.run(&|t| {
        let mine = split(groups, threads, t);
        let mut res: Out = [[0.0; 16]; ROWS];
        let mut g0 = mine.start;
        while g0 < mine.end {
            let g1 = (g0 + chunk).min(mine.end);
            for r0 in (0..m).step_by(ROWS) {
                let nr = (m - r0).min(ROWS);
                for g in g0..g1 {
                    // SAFETY: per this fn's contract.
                    unsafe { kern(w.group(g), a, r0, nr, &mut res) };
                    let (c0, c1) = (g * GROUP, (g * GROUP + GROUP).min(n));
                    for (r, row) in res.iter().enumerate().take(nr) {
                        let at = (r0 + r) * n;
                        // SAFETY: columns c0..c1 belong to this thread's groups only.
                        let dst = unsafe { out.slice(at + c0..at + c1) };
                        dst.copy_from_slice(&row[..c1 - c0]);
                    }
                }
            }
            g0 = g1;
        }
    });
}

//! `y = a · wᵀ` on repacked weights (`repack.rs`) with activations quantized once
//! (`act_quads.rs`): the quantized matmul of the AVX-512 VNNI kernel set (`avx512.rs`,
//! `avx512_kq.rs`; `amx.rs` for prefill) and, for the formats `avx2.rs` covers, of the AVX2
//! set, for decode and prefill alike.
//!
//! Weight groups (16 rows) are split into contiguous ranges (outputs, never reductions, are
//! split, so the thread count does not change results): for prefill one per pool thread, for
//! decode `pool::guided_range`'s long leading parts and small trailing ones. A thread takes
//! its groups in chunks that stay in its L2 cache while every tile of activation
//! rows passes over them, so during prefill each weight byte comes from memory once; inside a
//! tile each loaded weight vector serves all of the tile's rows. With one tile of rows
//! (decode) a thread instead streams its groups span by span (`repack.rs` stores each span of
//! `k` of all groups together), so a span's activations stay in L1 between groups; the kernels
//! carry each group's sums from span to span, in the same order either way.

pub(super) mod act_quads;
#[cfg(target_arch = "x86_64")]
pub(crate) mod amx;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_base;
#[cfg(target_arch = "x86_64")]
mod avx512_kq;
pub(super) mod repack;

use crate::features::KernelSet;
use crate::par::pool::{
    balanced_parts, guided_parts, guided_range, split, DisjointOut, ThreadPool,
};
use act_quads::ActQuads;
use cyb_tensor::DType;
use repack::{Repacked, GROUP};

/// Bytes of weight groups a thread keeps hot while all activation rows pass over them.
const CHUNK_BYTES: usize = 256 * 1024;

/// The group kernel for `dtype` in `set`, if the repacked GEMM covers it.
#[cfg(target_arch = "x86_64")]
pub(crate) fn kernel(dtype: DType, set: KernelSet) -> Option<avx512_base::GroupKernel> {
    use avx512 as x;
    if set == KernelSet::Avx2 {
        return avx2::kernel(dtype);
    }
    if set != KernelSet::Avx512 {
        return None;
    }
    match dtype {
        DType::Q4_0 => Some(x::q4_0_group),
        DType::Q8_0 => Some(x::q8_0_group),
        DType::Q4_1 => Some(x::q4_1_group),
        DType::Q5_0 => Some(x::q5_0_group),
        DType::Q5_1 => Some(x::q5_1_group),
        DType::Q4_K => Some(x::q4_k_group),
        DType::Q5_K => Some(x::q5_k_group),
        DType::Q6_K => Some(x::q6_k_group),
        DType::Q2_K => Some(x::q2_k_group),
        DType::Q3_K => Some(x::q3_k_group),
        DType::TQ1_0 | DType::TQ2_0 => Some(x::ternary_group),
        _ => None,
    }
}

/// The group kernel for a matmul of `m` activation rows at precision `act`: [`kernel`]'s,
/// unless the per-row kernels do better there (`avx2::rows_first`).
#[cfg(target_arch = "x86_64")]
pub(crate) fn kernel_for(
    dtype: DType,
    set: KernelSet,
    act: crate::matmul::quant_act::ActPrecision,
    m: usize,
) -> Option<avx512_base::GroupKernel> {
    if set == KernelSet::Avx2 && avx2::rows_first(dtype, act, m) {
        return None;
    }
    kernel(dtype, set)
}

/// The AMX group kernel for `dtype`, if AMX-INT8 runs here and covers it (16 activation rows a
/// call; bit-identical to [`kernel`]'s).
#[cfg(target_arch = "x86_64")]
pub(crate) fn amx_kernel(dtype: DType, set: KernelSet) -> Option<avx512_base::GroupKernel> {
    use amx as x;
    if set != KernelSet::Avx512 || !x::available() {
        return None;
    }
    match dtype {
        DType::Q4_0 => Some(x::q4_0_group),
        DType::Q8_0 => Some(x::q8_0_group),
        DType::Q4_1 => Some(x::q4_1_group),
        DType::Q5_0 => Some(x::q5_0_group),
        DType::Q5_1 => Some(x::q5_1_group),
        DType::Q4_K => Some(x::q4_k_group),
        DType::Q5_K => Some(x::q5_k_group),
        DType::Q6_K => Some(x::q6_k_group),
        _ => None,
    }
}

/// Computes `m` rows of `y` (`m × w.n`) from the quantized activations `a`; with `amx`, 16 rows
/// at a time on AMX tiles (`a` padded to whole tiles).
///
/// # Safety
/// `kern` must come from [`kernel`] for `w.dtype` and `set` (from [`amx_kernel`] when `amx`),
/// and the CPU must have that kernel set.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm(
    set: KernelSet,
    pool: &ThreadPool,
    kern: avx512_base::GroupKernel,
    w: &Repacked,
    a: &ActQuads,
    m: usize,
    y: &mut [f32],
    amx: bool,
) {
    use avx512_base::{tile_rows, Out, ROWS};
    let rows = if amx {
        self::amx::TILE_ROWS
    } else if set == KernelSet::Avx2 {
        avx2::ROWS
    } else {
        tile_rows(a.split)
    };
    let n = w.n;
    assert!(y.len() >= m * n && a.k == w.k);
    let groups = w.groups();
    let threads = pool.threads();
    let out = DisjointOut::new(y);
    let store = |res: &Out, r0: usize, nr: usize, g: usize| {
        let (c0, c1) = (g * GROUP, (g * GROUP + GROUP).min(n));
        for (r, row) in res.iter().enumerate().take(nr) {
            let at = (r0 + r) * n;
            // SAFETY: columns c0..c1 belong to this thread's groups only.
            let dst = unsafe { out.slice(at + c0..at + c1) };
            dst.copy_from_slice(&row[..c1 - c0]);
        }
    };
    if m <= rows && !amx {
        // One tile of rows (decode): each thread streams its groups span by span, in the
        // order they are stored, so that a span's activations stay in L1 while it meets every
        // group; each group's sums wait in `y` between spans.
        let parts = guided_parts(groups, threads, w.group_bytes);
        pool.run_parts(parts, &|t| {
            let mine = guided_range(groups, threads, parts, t);
            let mut res: Out = [[0.0; 16]; ROWS];
            for c in 0..w.spans() {
                for g in mine.clone() {
                    if c > 0 {
                        let (c0, c1) = (g * GROUP, (g * GROUP + GROUP).min(n));
                        for (r, row) in res.iter_mut().enumerate().take(m) {
                            // SAFETY: columns c0..c1 belong to this thread's groups only.
                            let src = unsafe { out.slice(r * n + c0..r * n + c1) };
                            // SAFETY: `set` runs here (this fn's contract).
                            unsafe { avx512_base::reload(set, row, src) };
                        }
                    }
                    // SAFETY: per this fn's contract.
                    unsafe { kern(w.piece(g, c), a, 0, m, w.span_units(c), &mut res) };
                    store(&res, 0, m, g);
                }
            }
        });
        return;
    }
    let chunk = (CHUNK_BYTES / w.group_bytes.max(1)).max(1);
    pool.run(&|t| {
        // SAFETY: `amx` only with an AMX kernel, which exists only where `available()`.
        let _tiles = amx.then(|| unsafe { self::amx::Tiles::load() });
        let mine = split(groups, threads, t);
        let mut res: Out = [[0.0; 16]; ROWS];
        let mut g0 = mine.start;
        while g0 < mine.end {
            let g1 = (g0 + chunk).min(mine.end);
            for r0 in (0..m).step_by(rows) {
                let nr = (m - r0).min(rows);
                for g in g0..g1 {
                    for c in 0..w.spans() {
                        // SAFETY: per this fn's contract.
                        unsafe { kern(w.piece(g, c), a, r0, nr, w.span_units(c), &mut res) };
                    }
                    store(&res, r0, nr, g);
                }
            }
            g0 = g1;
        }
    });
}

/// The AVX-512 float tile for weights of `dtype` in `set`.
#[cfg(target_arch = "x86_64")]
pub(crate) fn float_kernel(
    dtype: DType,
    set: KernelSet,
) -> Option<crate::matmul::rows::float_x86::FTile> {
    use crate::matmul::rows::float_x86 as x;
    if set != KernelSet::Avx512 {
        return None;
    }
    match dtype {
        DType::F32 => Some(x::f32_avx512),
        DType::F16 => Some(x::f16_avx512),
        DType::BF16 => Some(x::bf16_avx512),
        _ => None,
    }
}

/// Weight rows the float decode kernel streams side by side: four on Intel (their activation
/// loads shared; an F16 `[1,2048]·[8192,2048]ᵀ` read its weights at the machine's full 30 GB/s
/// there), one on AMD, whose prefetchers follow one row at a time far better: on a Zen 4 VM
/// (`CYB_BENCH_WEIGHTS=4 gemm_bench 1 49152 576 2 f16`) 13–17 GB/s with four, 31–39 with one,
/// and `[1,576]·[3072,576]ᵀ` 18 → 33 GB/s.
#[cfg(target_arch = "x86_64")]
pub(crate) fn float_decode_rows() -> usize {
    static ROWS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *ROWS.get_or_init(|| {
        if cpu_vendor_is_amd() {
            1
        } else {
            crate::matmul::rows::float_x86::TILE_C
        }
    })
}

/// Whether CPUID's vendor string is "AuthenticAMD".
#[cfg(target_arch = "x86_64")]
fn cpu_vendor_is_amd() -> bool {
    // SAFETY: CPUID leaf 0 exists on every x86-64 CPU.
    #[allow(unused_unsafe)]
    let r = unsafe { std::arch::x86_64::__cpuid(0) };
    let mut v = [0u8; 12];
    v[..4].copy_from_slice(&r.ebx.to_le_bytes());
    v[4..8].copy_from_slice(&r.edx.to_le_bytes());
    v[8..].copy_from_slice(&r.ecx.to_le_bytes());
    &v == b"AuthenticAMD"
}

/// `y = a · wᵀ` for float weights (`n` rows of `row_bytes`), `a` being `m` rows of `k` (decode:
/// more rows go to the packed GEMM, `sgemm/mod.rs`): the rows are cut into contiguous parts
/// (`balanced_parts`), each taken by whichever thread is free, which streams every row once,
/// `cols` at a time (1 or `TILE_C`, the same results; `float_decode_rows` picks it), over all
/// of `k` (blocking `k` split each row into separate passes, which cost the hardware
/// prefetcher a fifth of F16's bandwidth).
///
/// # Safety
/// `tile` must come from [`float_kernel`] for the weight's dtype, and the CPU must have its
/// kernel set.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_float(
    pool: &ThreadPool,
    tile: crate::matmul::rows::float_x86::FTile,
    w: &[u8],
    row_bytes: usize,
    n: usize,
    a: &[f32],
    k: usize,
    y: &mut [f32],
    cols: usize,
) {
    use crate::matmul::rows::float_x86::{TileOut, TILE_C, TILE_R};
    let m = a.len().checked_div(k).unwrap_or(0);
    assert!(y.len() >= m * n && w.len() >= n * row_bytes && k > 0);
    let threads = pool.threads();
    let cols = cols.clamp(1, TILE_C);
    let out = DisjointOut::new(y);
    // Parts claimed by whichever thread is free (the rows' results do not depend on the cut:
    // each row is its own sum).
    let parts = balanced_parts(n, threads, row_bytes);
    pool.run_parts(parts, &|t| {
        let mine = split(n, parts, t);
        let mut res: TileOut = [[0.0; TILE_R]; TILE_C];
        for r0 in (0..m).step_by(TILE_R) {
            for j in mine.clone().step_by(cols) {
                let nc = (mine.end - j).min(cols);
                // SAFETY: per this fn's contract; the tile checks its bounds.
                unsafe { tile(&w[j * row_bytes..], row_bytes, nc, a, k, k, r0, &mut res) };
                for (c, col) in res.iter().enumerate().take(nc) {
                    for (r, &v) in col.iter().enumerate() {
                        // SAFETY: column j + c belongs to this part's range only.
                        unsafe { out.set((r0 + r) * n + j + c, v) };
                    }
                }
            }
        }
    });
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// One weight row at a time (AMD) and four side by side (elsewhere) give the same bits,
    /// with 1 and 3 threads, for every float dtype; rows that leave a partial tile of four; a
    /// weight large enough to be cut into many parts (`balanced_parts`).
    #[test]
    fn float_decode_rows_do_not_change_results() {
        if !KernelSet::Avx512.is_available() {
            return;
        }
        for n in [37, 1501] {
            float_decode_rows_case(n, 531);
        }
    }

    fn float_decode_rows_case(n: usize, k: usize) {
        let vals: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919 % 1013) as f32 - 506.0) / 97.0)
            .collect();
        let a: Vec<f32> = (0..k)
            .map(|i| ((i * 31 % 101) as f32 - 50.0) / 13.0)
            .collect();
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let t = cyb_tensor::Tensor::from_f32_as(&[n, k], &vals, dtype).unwrap();
            let w = t.host_bytes().unwrap();
            let row_bytes = dtype.bytes_for(k).unwrap();
            let tile = float_kernel(dtype, KernelSet::Avx512).unwrap();
            let mut first: Option<Vec<f32>> = None;
            for threads in [1, 3] {
                let pool = ThreadPool::new(threads);
                for cols in [1, crate::matmul::rows::float_x86::TILE_C] {
                    let mut y = vec![0f32; n];
                    // SAFETY: the tile is AVX-512's, which this CPU has (checked above).
                    unsafe { gemm_float(&pool, tile, w, row_bytes, n, &a, k, &mut y, cols) };
                    let want: Vec<f32> = (0..n)
                        .map(|j| {
                            (0..k)
                                .map(|i| {
                                    a[i] as f64
                                        * crate::matmul::blocks::value(
                                            dtype,
                                            &w[j * row_bytes..],
                                            i,
                                        ) as f64
                                })
                                .sum::<f64>() as f32
                        })
                        .collect();
                    for (g, e) in y.iter().zip(&want) {
                        assert!(
                            (g - e).abs() <= 1e-4 * e.abs().max(1.0),
                            "{dtype} {cols}: {g} vs {e}"
                        );
                    }
                    match &first {
                        None => first = Some(y),
                        Some(f) => assert_eq!(
                            f.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                            y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                            "{dtype}: {cols} rows side by side, {threads} threads"
                        ),
                    }
                }
            }
        }
    }
}

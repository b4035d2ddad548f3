//! `y = a · wᵀ` for float weights (F32, F16, BF16) and several activation rows: a register-tiled
//! GEMM on weights packed once into column panels.
//!
//! A weight of `n` rows (`n` outputs) of `k` values becomes `ceil(n / NR)` panels; panel `p`
//! holds outputs `p·NR..p·NR + NR` as `k` runs of `NR` values in the weight's own dtype
//! (`[k][NR]`, the last panel padded with zero outputs), so one step of the micro-kernel loads
//! the `NR` weights of one `k` contiguously and multiplies them with `MR` broadcast activations
//! into `MR × NR` accumulators held in registers for the whole of `k`. The activations are read
//! in place, `MR` rows at a time (packing them too measured no faster).
//!
//! Every output is one running sum over `k` in order, whatever the tiling and the thread
//! count; the pool splits panels (outputs), never `k`. Rows are taken in blocks that stay in
//! L2 while a thread's panels pass over them.

pub(crate) mod tile;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

use crate::par::pool::{balanced_parts, split, DisjointOut, ThreadPool};
use cyb_tensor::{AlignedBuf, DType};
use std::sync::{Mutex, PoisonError, Weak};
use tile::{RowTile, Tile, MR, NR};

/// Bytes of packed activation rows a thread keeps in L2 while its panels pass over them.
const ROW_BLOCK_BYTES: usize = 1024 * 1024;

/// A float weight packed into panels.
pub struct Panels {
    pub n: usize,
    pub k: usize,
    /// Bytes per value (4 for F32, 2 for F16 and BF16).
    pub elem: usize,
    pub data: AlignedBuf,
    /// The weight multiplied right after this one last time (a model's pass repeats its
    /// order): each thread fetches its first panel of it into L2 when done with this one.
    pub successor: Mutex<Weak<Panels>>,
}

impl Panels {
    pub fn panels(&self) -> usize {
        self.n.div_ceil(NR)
    }

    /// The bytes of panel `p`.
    pub fn panel(&self, p: usize) -> &[u8] {
        let len = self.k * NR * self.elem;
        &self.data.as_bytes()[p * len..(p + 1) * len]
    }
}

/// Bytes per value of the float dtypes this GEMM packs.
pub fn elem_bytes(dtype: DType) -> Option<usize> {
    match dtype {
        DType::F32 => Some(4),
        DType::F16 | DType::BF16 => Some(2),
        _ => None,
    }
}

/// Packs `w` (`n` rows of `k` values of `dtype`), panels split over the pool. `None` for other
/// dtypes or when `w` is too short.
pub fn pack(pool: &ThreadPool, dtype: DType, w: &[u8], n: usize, k: usize) -> Option<Panels> {
    let elem = elem_bytes(dtype)?;
    let row_bytes = k.checked_mul(elem)?;
    if k == 0 || w.len() < n.checked_mul(row_bytes)? {
        return None;
    }
    let panels = n.div_ceil(NR);
    let panel_bytes = row_bytes.checked_mul(NR)?;
    let mut data = AlignedBuf::zeroed(panels.checked_mul(panel_bytes)?);
    match elem {
        4 => pack_panels::<[u8; 4]>(pool, w, n, k, data.as_bytes_mut()),
        _ => pack_panels::<[u8; 2]>(pool, w, n, k, data.as_bytes_mut()),
    }
    Some(Panels {
        n,
        k,
        elem,
        data,
        successor: Mutex::new(Weak::new()),
    })
}

/// The panels of `w` (`n` rows of `k` values, each a `V` of bytes) into `out`, panels split over
/// the pool.
fn pack_panels<V: bytemuck::Pod + Send + Sync>(
    pool: &ThreadPool,
    w: &[u8],
    n: usize,
    k: usize,
    out: &mut [u8],
) {
    let w: &[V] = bytemuck::cast_slice(&w[..n * k * std::mem::size_of::<V>()]);
    let out: &mut [V] = bytemuck::cast_slice_mut(out);
    let out = DisjointOut::new(out);
    let threads = pool.threads();
    pool.run(&|t| {
        for p in split(n.div_ceil(NR), threads, t) {
            // SAFETY: panel p belongs to this thread only.
            let dst = unsafe { out.slice(p * k * NR..(p + 1) * k * NR) };
            for c in 0..NR.min(n - p * NR) {
                let row = &w[(p * NR + c) * k..][..k];
                for (i, &v) in row.iter().enumerate() {
                    dst[i * NR + c] = v;
                }
            }
        }
    });
}

/// The tile for weights of `dtype` in `set`, if this GEMM covers it.
#[cfg(target_arch = "x86_64")]
pub fn tile(dtype: DType, set: crate::features::KernelSet) -> Option<Tile> {
    use crate::features::KernelSet::{Avx2, Avx512};
    use x86 as x;
    match (dtype, set) {
        (DType::F32, Avx512) => Some(x::f32_tile),
        (DType::F16, Avx512) => Some(x::f16_tile),
        (DType::BF16, Avx512) => Some(x::bf16_tile),
        (DType::F32, Avx2) => Some(x::f32_tile_avx2),
        (DType::F16, Avx2) => Some(x::f16_tile_avx2),
        (DType::BF16, Avx2) => Some(x::bf16_tile_avx2),
        _ => None,
    }
}

/// The one-row kernel for weights of `dtype` in `set`, if there is one ([`gemv`]).
#[cfg(target_arch = "x86_64")]
pub fn row_tile(dtype: DType, set: crate::features::KernelSet) -> Option<RowTile> {
    use x86 as x;
    match (dtype, set) {
        (DType::F32, crate::features::KernelSet::Avx512) => Some(x::f32_row),
        (DType::F16, crate::features::KernelSet::Avx512) => Some(x::f16_row),
        (DType::BF16, crate::features::KernelSet::Avx512) => Some(x::bf16_row),
        _ => None,
    }
}

/// No packed GEMM off x86-64.
#[cfg(not(target_arch = "x86_64"))]
pub fn row_tile(_dtype: DType, _set: crate::features::KernelSet) -> Option<RowTile> {
    None
}

/// No packed GEMM off x86-64.
#[cfg(not(target_arch = "x86_64"))]
pub fn tile(_dtype: DType, _set: crate::features::KernelSet) -> Option<Tile> {
    None
}

/// Asks for the first `len` bytes of `data` (at most) to be brought into L2.
#[inline]
pub(crate) fn prefetch_l2(data: &[u8], len: usize) {
    #[cfg(target_arch = "x86_64")]
    for i in (0..len.min(data.len())).step_by(64) {
        // SAFETY: a prefetch of an in-bounds address; it cannot fault or change memory.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
            _mm_prefetch::<_MM_HINT_T1>(data.as_ptr().add(i) as *const i8);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, len);
}

/// What the GEMM applies to each finished tile's row segments while they are in L1 (an
/// element-wise activation: the biases are added in registers).
pub type Epilogue<'a> = &'a (dyn Fn(&mut [&mut [f32]]) + Sync);

/// The weight multiplied after `w` last time, if it is still alive.
fn successor(w: &Panels) -> Option<std::sync::Arc<Panels>> {
    w.successor
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .upgrade()
}

/// Parts of a [`gemm`] on `w`: claimed by whichever thread is free.
fn gemm_parts(w: &Panels, threads: usize) -> usize {
    balanced_parts(w.panels(), threads, w.k * NR * w.elem)
}

/// Parts of a [`gemm_blocked`] on `w`: a few per thread (each part copies the rows again, so
/// not the many of [`gemm_parts`]).
fn blocked_parts(w: &Panels, threads: usize) -> usize {
    (threads * BLOCKED_PARTS_PER_THREAD).min(w.panels().max(1))
}

/// Asks for up to `bytes` of the first panel of part `t` of `next` to be brought into L2, its
/// panels cut into `parts(next, threads)` parts. Called by the parts claimed first (one per
/// thread, most likely: `t < threads`).
fn prefetch_first(
    next: Option<&Panels>,
    parts: fn(&Panels, usize) -> usize,
    threads: usize,
    t: usize,
    bytes: usize,
) {
    if let (Some(next), true) = (next, t < threads) {
        let first = split(next.panels(), parts(next, threads), t).start;
        if first < next.panels() {
            prefetch_l2(next.panel(first), bytes);
        }
    }
}

/// One tile of a GEMM: `nr` rows from `r0` (`a`, `lda` apart) against panel columns
/// `c0..c0 + nc` of `slice` over `kl` values; a partial panel (`nc < NR`) keeps its sums in
/// `part` (`MR × NR`) and goes to `y` at the `last` block; the epilogue runs at the `last`
/// block too, on rows still in L1.
///
/// # Safety
/// `tile` must be runnable on this CPU; columns `c0..c0 + nc` of rows `r0..r0 + nr` of `out`
/// (`n` wide) belong to the calling thread only.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile_into(
    tile: Tile,
    slice: &[u8],
    a: &[f32],
    lda: usize,
    kl: usize,
    (r0, nr): (usize, usize),
    (c0, nc, n): (usize, usize, usize),
    out: &DisjointOut<'_>,
    part: &mut [f32],
    (first, last): (bool, bool),
    bias: Option<&[f32; NR]>,
    epi: Option<Epilogue<'_>>,
) {
    let at = r0 * n + c0;
    if nc == NR {
        // SAFETY: the caller's contract; the tile checks its input bounds.
        unsafe {
            let dst = out.strided(at, at + (nr - 1) * n + NR);
            tile(slice, a, lda, kl, nr, dst, n, first, bias);
        }
    } else {
        assert!(part.len() >= MR * NR);
        // SAFETY: `part` holds MR rows of NR values; the tile checks its inputs.
        unsafe { tile(slice, a, lda, kl, nr, part.as_mut_ptr(), NR, first, bias) };
        if last {
            for r in 0..nr {
                // SAFETY: the caller's contract.
                let dst = unsafe { out.slice(at + r * n..at + r * n + nc) };
                dst.copy_from_slice(&part[r * NR..r * NR + nc]);
            }
        }
    }
    if let (true, Some(f)) = (last, epi) {
        let mut segs: [&mut [f32]; MR] = Default::default();
        for (r, seg) in segs.iter_mut().enumerate().take(nr) {
            // SAFETY: as above; the rows were just written (still in L1).
            *seg = unsafe { out.slice(at + r * n..at + r * n + nc) };
        }
        f(&mut segs[..nr]);
    }
}

/// Computes `m` rows of `y` (`m × w.n`) from the activation rows `rows` (`m × k`), plus `bias`
/// (`[n]`, added in registers) when given, then `epi` on each stored tile.
///
/// # Safety
/// `tile` must come from [`tile()`] for the packed weight's dtype, and the CPU must have its
/// kernel set.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm(
    pool: &ThreadPool,
    tile: Tile,
    w: &Panels,
    rows: &[f32],
    m: usize,
    y: &mut [f32],
    bias: Option<&[f32]>,
    epi: Option<Epilogue<'_>>,
) {
    let (n, k) = (w.n, w.k);
    assert!(y.len() >= m * n && rows.len() >= m * k && bias.is_none_or(|b| b.len() == n));
    let block = (ROW_BLOCK_BYTES / (k * 4 * MR)).max(1) * MR;
    let panels = w.panels();
    let threads = pool.threads();
    let out = DisjointOut::new(y);
    let next = successor(w);
    let parts = gemm_parts(w, threads);
    pool.run_parts(parts, &|t| {
        let mut res = [0f32; MR * NR];
        let mine = split(panels, parts, t);
        for m0 in (0..m).step_by(block) {
            let m1 = (m0 + block).min(m);
            let tiles = (m1 - m0).div_ceil(MR);
            for p in mine.clone() {
                let (c0, nc) = (p * NR, NR.min(n - p * NR));
                let panel = w.panel(p);
                // The panel's biases, zero-padded past `n`.
                let mut pb = [0f32; NR];
                let pbias = bias.map(|b| {
                    pb[..nc].copy_from_slice(&b[c0..c0 + nc]);
                    &pb
                });
                // The next panel comes from memory in the first row block (a model reads each
                // weight once per pass): each tile fetches its share of it into L2 meanwhile.
                let ahead = if p + 1 < mine.end && m0 == 0 {
                    w.panel(p + 1)
                } else {
                    &[]
                };
                let share = ahead.len().div_ceil(tiles);
                for (ti, r0) in (m0..m1).step_by(MR).enumerate() {
                    prefetch_l2(ahead.get(ti * share..).unwrap_or(&[]), share);
                    let nr = (m1 - r0).min(MR);
                    let a = &rows[r0 * k..(r0 + nr) * k];
                    // SAFETY: rows r0..r0 + nr of columns c0..c0 + nc belong to this thread's
                    // panels only; `tile` per this fn's contract.
                    unsafe {
                        let (cols, flags) = ((c0, nc, n), (true, true));
                        tile_into(
                            tile,
                            panel,
                            a,
                            k,
                            k,
                            (r0, nr),
                            cols,
                            &out,
                            &mut res,
                            flags,
                            pbias,
                            epi,
                        )
                    };
                }
            }
        }
        prefetch_first(next.as_deref(), gemm_parts, threads, t, usize::MAX);
    });
}

/// Bytes of the next weight's first panel that each thread prefetches as a [`gemv`] ends.
const GEMV_NEXT_BYTES: usize = 4096;

/// [`gemm`] for one activation row (decode): each panel once through `row`, the panels split
/// into parts taken by whichever thread is free; `bias` added in registers, then `epi` on each
/// panel's outputs.
///
/// # Safety
/// `row` must come from [`row_tile`] for the packed weight's dtype, and the CPU must have its
/// kernel set.
pub unsafe fn gemv(
    pool: &ThreadPool,
    row: RowTile,
    w: &Panels,
    a: &[f32],
    y: &mut [f32],
    bias: Option<&[f32]>,
    epi: Option<Epilogue<'_>>,
) {
    let (n, k) = (w.n, w.k);
    assert!(y.len() >= n && a.len() >= k && bias.is_none_or(|b| b.len() == n));
    let panels = w.panels();
    let threads = pool.threads();
    let out = DisjointOut::new(y);
    let next = successor(w);
    let parts = gemm_parts(w, threads);
    pool.run_parts(parts, &|t| {
        for p in split(panels, parts, t) {
            let (c0, nc) = (p * NR, NR.min(n - p * NR));
            let mut pb = [0f32; NR];
            let pbias = bias.map(|b| {
                pb[..nc].copy_from_slice(&b[c0..c0 + nc]);
                &pb
            });
            let mut res = [0f32; NR];
            // SAFETY: `row` per this fn's contract; it checks its input bounds.
            unsafe { row(w.panel(p), &a[..k], k, &mut res, pbias) };
            // SAFETY: outputs c0..c0 + nc belong to this part's panels only.
            let dst = unsafe { out.slice(c0..c0 + nc) };
            dst.copy_from_slice(&res[..nc]);
            if let Some(f) = epi {
                f(&mut [dst]);
            }
        }
        prefetch_first(next.as_deref(), gemm_parts, threads, t, GEMV_NEXT_BYTES);
    });
}

/// Bytes of one panel's slice of `k` in `gemm_blocked`: it stays in L1 while every row tile
/// passes over it.
const SLICE_BYTES: usize = 16 * 1024;

/// Row length from which prefill-sized matmuls take `gemm_blocked`. On a Zen 4 VM, 2 threads,
/// `gemm_bench M N K 2` (GMAC/s, [`gemm`] → `gemm_blocked`): Llama-3.2-1B's F16 shapes at
/// m = 128 and 4096, k = 2048 and 8192, 63–86 → 77–94; MiniLM's F32 shapes (k = 384 and 1536)
/// 92–109 → 55–99, where a block of rows as long as [`gemm`]'s already stays in L2.
pub const BLOCKED_MIN_K: usize = 2048;

/// Bytes of activations (one block of rows, one block of `k`) that `gemm_blocked` keeps in L2
/// while the panels' slices pass over them.
const ROWS_BLOCK_BYTES: usize = 256 * 1024;

/// Parts per thread of `gemm_blocked` (1B F16 `bench -p 128 -n 1 -r 3`, alternated: pp128
/// 84.8–86.7 t/s with 4, 61.9–85.0 with 1, 79.2–84.7 with 8).
const BLOCKED_PARTS_PER_THREAD: usize = 4;

/// Values of `k` per block of `gemm_blocked` for weights of `elem` bytes per value.
fn block_k(elem: usize) -> usize {
    (SLICE_BYTES / (NR * elem)).max(16)
}

/// The panel slice of `p` over `kl` values of `k` from `k0`.
fn slice_of(w: &Panels, p: usize, k0: usize, kl: usize) -> &[u8] {
    let at = k0 * NR * w.elem;
    &w.panel(p)[at..at + kl * NR * w.elem]
}

/// [`gemm`] blocked along `k` as well (as BLIS blocks): the panels are cut into a few parts per
/// thread, each taken by whichever thread is free; for each block of rows and each block of `k`
/// in turn, a part copies the block's activations into its own piece of `blocks`
/// (`ROWS_BLOCK_BYTES`, in L2), then every one of its panels' slices (`SLICE_BYTES`, in L1)
/// meets every row tile of the block, the sums carried in `y` between blocks of `k`. Each
/// weight byte is read once per block of rows, and the activations come from L2 however long
/// `k` is; the sums run over `k` in order, so results equal [`gemm`]'s bit for bit.
///
/// # Safety
/// `tile` must come from [`tile()`] for the packed weight's dtype, and the CPU must have its
/// kernel set.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_blocked(
    pool: &ThreadPool,
    tile: Tile,
    w: &Panels,
    rows: &[f32],
    m: usize,
    y: &mut [f32],
    bias: Option<&[f32]>,
    epi: Option<Epilogue<'_>>,
    blocks: &mut Vec<f32>,
) {
    let (n, k) = (w.n, w.k);
    assert!(y.len() >= m * n && rows.len() >= m * k && bias.is_none_or(|b| b.len() == n));
    let tiles = m.div_ceil(MR);
    let threads = pool.threads();
    let kc = block_k(w.elem);
    let block_tiles = (ROWS_BLOCK_BYTES / (kc * MR * 4)).clamp(1, tiles.max(1));
    let per_part = block_tiles * MR * kc;
    let panels = w.panels();
    let parts = blocked_parts(w, threads);
    if blocks.len() < parts * per_part {
        blocks.resize(parts * per_part, 0.0);
    }
    let bufs = DisjointOut::new(&mut blocks[..parts * per_part]);
    let out = DisjointOut::new(y);
    let next = successor(w);
    pool.run_parts(parts, &|t| {
        let mine = split(panels, parts, t);
        if mine.is_empty() {
            return;
        }
        // SAFETY: part t of the buffers belongs to part t only.
        let buf = unsafe { bufs.slice(t * per_part..(t + 1) * per_part) };
        // A partial last panel's sums (fewer than NR outputs) wait here between blocks.
        let mut part: Vec<f32> = Vec::new();
        if mine.end == panels && n % NR != 0 {
            part.resize(tiles * MR * NR, 0.0);
        }
        for tb in (0..tiles).step_by(block_tiles) {
            let tb_end = (tb + block_tiles).min(tiles);
            for k0 in (0..k).step_by(kc) {
                let kl = kc.min(k - k0);
                let (first, last) = (k0 == 0, k0 + kl == k);
                // The block's rows, `kl` values each, one after the other: its tiles then read
                // one contiguous run each, from L2 (rows strided by a long `k` come from
                // further away).
                let rows_in = (tb_end * MR).min(m) - tb * MR;
                for r in 0..rows_in {
                    let src = &rows[(tb * MR + r) * k + k0..][..kl];
                    buf[r * kl..(r + 1) * kl].copy_from_slice(src);
                }
                let buf = &buf[..rows_in * kl];
                for p in mine.clone() {
                    let (c0, nc) = (p * NR, NR.min(n - p * NR));
                    let slice = slice_of(w, p, k0, kl);
                    // The next slice this thread takes comes from memory (a model reads each
                    // weight once per pass): the row tiles fetch it into L2 meanwhile.
                    let ahead = if p + 1 < mine.end {
                        slice_of(w, p + 1, k0, kl)
                    } else if !last {
                        slice_of(w, mine.start, k0 + kl, kc.min(k - k0 - kl))
                    } else if tb_end < tiles {
                        slice_of(w, mine.start, 0, kc.min(k))
                    } else {
                        &[]
                    };
                    let share = ahead.len().div_ceil(tb_end - tb);
                    let mut pb = [0f32; NR];
                    let pbias = bias.filter(|_| last).map(|b| {
                        pb[..nc].copy_from_slice(&b[c0..c0 + nc]);
                        &pb
                    });
                    for ti in tb..tb_end {
                        prefetch_l2(ahead.get((ti - tb) * share..).unwrap_or(&[]), share);
                        let (r0, nr) = (ti * MR, MR.min(m - ti * MR));
                        let a = &buf[(r0 - tb * MR) * kl..(r0 - tb * MR + nr) * kl];
                        let part = part.get_mut(r0 * NR..).unwrap_or(&mut []);
                        // SAFETY: rows r0..r0 + nr of columns c0..c0 + nc belong to this
                        // thread's panels only; `tile` per this fn's contract.
                        unsafe {
                            let (cols, flags) = ((c0, nc, n), (first, last));
                            tile_into(
                                tile,
                                slice,
                                a,
                                kl,
                                kl,
                                (r0, nr),
                                cols,
                                &out,
                                part,
                                flags,
                                pbias,
                                epi,
                            )
                        };
                    }
                }
            }
        }
        // The next weight's first slice of this thread.
        let first_slice = next
            .as_ref()
            .map_or(0, |nx| block_k(nx.elem).min(nx.k) * NR * nx.elem);
        prefetch_first(next.as_deref(), blocked_parts, threads, t, first_slice);
    });
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::features::KernelSet;

    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// The blocked GEMM against the unblocked one, bit for bit, on every kernel set of this CPU
    /// that has both: several blocks of `k` with a shorter last one, a partial last row tile
    /// and panel, bias and epilogue, 1–3 threads.
    #[test]
    fn blocked_equals_unblocked() {
        let sets: Vec<KernelSet> = [KernelSet::Avx2, KernelSet::Avx512]
            .into_iter()
            .filter(|s| s.is_available())
            .collect();
        if sets.is_empty() {
            eprintln!("no AVX2 on this CPU: the panel GEMM is not used here");
        }
        for set in sets {
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                for (m, n, k, threads) in [(13, 67, 1100, 3), (181, 33, 300, 2), (25, 96, 64, 1)] {
                    let pool = ThreadPool::new(threads);
                    let wf = values(n * k, 7 + k as u64);
                    let bytes: Vec<u8> = match dtype {
                        DType::F32 => bytemuck::cast_slice(&wf).to_vec(),
                        DType::F16 => wf
                            .iter()
                            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                            .collect(),
                        _ => wf
                            .iter()
                            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                            .collect(),
                    };
                    let w = pack(&pool, dtype, &bytes, n, k).unwrap();
                    let rows = values(m * k, 3 + m as u64);
                    let bias = values(n, 5);
                    let epi = |segs: &mut [&mut [f32]]| {
                        for s in segs.iter_mut() {
                            for v in s.iter_mut() {
                                *v = v.max(0.0) * 0.5;
                            }
                        }
                    };
                    let (mut y0, mut y1) = (vec![0f32; m * n], vec![0f32; m * n]);
                    // SAFETY: the tiles for this dtype and set (checked available above).
                    unsafe {
                        let t0 = tile(dtype, set).unwrap();
                        gemm(&pool, t0, &w, &rows, m, &mut y0, Some(&bias), Some(&epi));
                        let mut blocks = Vec::new();
                        gemm_blocked(
                            &pool,
                            t0,
                            &w,
                            &rows,
                            m,
                            &mut y1,
                            Some(&bias),
                            Some(&epi),
                            &mut blocks,
                        );
                    }
                    let what =
                        format!("{} {dtype} m={m} n={n} k={k} threads={threads}", set.name());
                    assert!(y0.iter().any(|&v| v != 0.0), "{what}");
                    for (i, (a, b)) in y0.iter().zip(&y1).enumerate() {
                        assert_eq!(a.to_bits(), b.to_bits(), "{what}: output {i}: {a} vs {b}");
                    }
                }
            }
        }
    }

    /// The one-row kernel against an f64 sum of the same (rounded) weights, with bias and
    /// epilogue, on `k` with and without a tail of the four-step unroll and a partial last
    /// panel; the same bits with 1 and 3 threads.
    #[test]
    fn gemv_matches_reference_and_threads() {
        if !KernelSet::Avx512.is_available() {
            eprintln!("no AVX-512 on this CPU: the one-row panel kernel is not used here");
            return;
        }
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for (n, k) in [(67, 1101), (96, 64), (33, 3), (1, 517)] {
                let wf = values(n * k, 11 + k as u64);
                let (bytes, rounded): (Vec<u8>, Vec<f32>) = match dtype {
                    DType::F32 => (bytemuck::cast_slice(&wf).to_vec(), wf.clone()),
                    DType::F16 => {
                        let h: Vec<half::f16> =
                            wf.iter().map(|&v| half::f16::from_f32(v)).collect();
                        (
                            h.iter().flat_map(|v| v.to_le_bytes()).collect(),
                            h.iter().map(|v| v.to_f32()).collect(),
                        )
                    }
                    _ => {
                        let h: Vec<half::bf16> =
                            wf.iter().map(|&v| half::bf16::from_f32(v)).collect();
                        (
                            h.iter().flat_map(|v| v.to_le_bytes()).collect(),
                            h.iter().map(|v| v.to_f32()).collect(),
                        )
                    }
                };
                let a = values(k, 13);
                let bias = values(n, 17);
                let epi = |segs: &mut [&mut [f32]]| {
                    for s in segs.iter_mut() {
                        for v in s.iter_mut() {
                            *v *= 0.5;
                        }
                    }
                };
                let mut first: Option<Vec<f32>> = None;
                for threads in [1, 3] {
                    let pool = ThreadPool::new(threads);
                    let w = pack(&pool, dtype, &bytes, n, k).unwrap();
                    let mut y = vec![f32::NAN; n];
                    let row = row_tile(dtype, KernelSet::Avx512).unwrap();
                    // SAFETY: AVX-512's kernel, which this CPU has (checked above).
                    unsafe { gemv(&pool, row, &w, &a, &mut y, Some(&bias), Some(&epi)) };
                    let what = format!("{dtype} n={n} k={k} threads={threads}");
                    for (j, &got) in y.iter().enumerate() {
                        let dot: f64 = (0..k)
                            .map(|i| a[i] as f64 * rounded[j * k + i] as f64)
                            .sum();
                        let want = (dot + bias[j] as f64) * 0.5;
                        let tol = 1e-5 * (k as f64).sqrt() + 1e-6;
                        assert!(
                            (got as f64 - want).abs() <= tol,
                            "{what}: output {j}: {got} vs {want}"
                        );
                    }
                    match &first {
                        None => first = Some(y),
                        Some(f) => assert!(
                            f.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits()),
                            "{what}: differs from 1 thread"
                        ),
                    }
                }
            }
        }
    }
}

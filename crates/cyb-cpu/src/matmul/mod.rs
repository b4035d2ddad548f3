//! `Op::MatMul { rhs_transposed: true }` with a shared rank-2 weight `[n, k]`: the Linear layer.
//!
//! Block-format weights are used in place: the activations are quantized once per call to
//! 16-bit (default) or 8-bit blocks and each output is an integer dot product per block. The `n` outputs are split
//! into fixed contiguous ranges, one per pool thread (outputs, never reductions, are split, so
//! the thread count does not change results). Within a thread, weight rows are taken in chunks
//! that stay in cache while every group of four activation rows passes over them, so during
//! prefill each weight block is read from memory once and reused for all rows.
//!
//! This file picks the path for a weight and kernel set. The kernels, by path:
//! - `rows/`: per-row kernels on the weight's own blocks (one file per format family, each
//!   beside its x86-64 kernels; `neon.rs` for aarch64);
//! - `gemm/`: the GEMM on repacked weights (`repack.rs`) and quantized activations
//!   (`act_quads.rs`), kernels `avx512.rs`, `avx512_kq.rs`, `amx.rs`, `avx2.rs`;
//! - `sgemm/`: the float GEMM on packed column panels (`x86.rs`);
//! - `blocks.rs`: the packed-block decoders (scales, nibbles, high bits) all of them share;
//!   `quant_act.rs`: activations quantized per block for the per-row kernels.

mod blocks;
pub(crate) mod gemm;
pub(crate) mod quant_act;
mod rows;
pub(crate) mod sgemm;

use crate::features::KernelSet;
use crate::par::pool::{split, DisjointOut, ThreadPool};
use cyb_tensor::{AlignedBuf, DType, Error, Result, Shape, Storage, Tensor, TensorInfo};
use gemm::act_quads::ActQuads;
use gemm::repack::RepackCache;
use quant_act::{ActPrecision, QuantizedRows};
use rows::float::{self, FDot};
use rows::kquant;
use rows::legacy::{self, QDot};
use rows::q16;

/// Shortest float rows whose one-row matmuls use the packed panels where weight rows are
/// streamed one at a time (`gemm::float_decode_rows`).
#[cfg(target_arch = "x86_64")]
const PANEL_DECODE_K: usize = 4096;
use std::sync::{Arc, Mutex, PoisonError};

/// Bytes of weight rows a thread keeps hot while all activation rows pass over them.
const WEIGHT_CHUNK_BYTES: usize = 32 * 1024;

/// One tile: weight rows (`nc` of them), `nc`, first activation row, rows, results.
type TileFn<'a> = dyn Fn(&[u8], usize, usize, usize, &mut [f32; 16]) + 'a;

enum Kernel {
    /// Activations quantized to blocks of `block` values with `act` levels.
    Quant {
        dot: QDot,
        block: usize,
        act: ActPrecision,
    },
    Float(FDot),
}

fn kernel(dtype: DType, set: KernelSet, act: ActPrecision) -> Option<Kernel> {
    if act == ActPrecision::Q16 {
        if let Some((dot, block)) = q16::kernel(dtype, set) {
            return Some(Kernel::Quant { dot, block, act });
        }
    }
    let q8 = ActPrecision::Q8;
    if let Some(dot) = legacy::kernel(dtype, set) {
        return Some(Kernel::Quant {
            dot,
            block: 32,
            act: q8,
        });
    }
    if let Some(dot) = kquant::kernel(dtype, set) {
        return Some(Kernel::Quant {
            dot,
            block: 256,
            act: q8,
        });
    }
    float::kernel(dtype, set).map(Kernel::Float)
}

pub(crate) fn supports(set: KernelSet, rhs_transposed: bool, inputs: &[TensorInfo]) -> bool {
    let [a, w] = inputs else { return false };
    let (ad, wd) = (a.shape.dims(), w.shape.dims());
    rhs_transposed
        && a.dtype == DType::F32
        && ad.len() >= 2
        && wd.len() == 2
        && ad.last() == wd.last()
        && (kernel(w.dtype, set, ActPrecision::Q8).is_some() || repacked_only(w.dtype, set))
}

/// Formats that only the repacked GEMM covers (no per-row kernel): their weights are repacked
/// on first use and the repacking is cached while their owner lives.
fn repacked_only(dtype: DType, set: KernelSet) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        gemm::kernel(dtype, set).is_some() && kernel(dtype, set, ActPrecision::Q8).is_none()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dtype, set);
        false
    }
}

/// Buffers the matmuls reuse between calls (so decode does not allocate them) and the
/// repacked weights.
pub(crate) struct Scratch {
    rows: Mutex<QuantizedRows>,
    quads: Mutex<ActQuads>,
    repacked: RepackCache,
    panels: gemm::repack::WeightCache<sgemm::Panels>,
    /// The float weight of the previous packed GEMM (to link it to its successor).
    last_panels: Mutex<std::sync::Weak<sgemm::Panels>>,
    /// Each thread's block of activation rows in the blocked float GEMM.
    row_blocks: Mutex<Vec<f32>>,
    /// Whether prefill-sized quantized matmuls may use AMX (where the CPU has it).
    pub(crate) amx: bool,
    /// Whether each row's result must not depend on the row count (`CpuOptions::batch_invariant`).
    pub(crate) invariant: bool,
}

/// Activation rows from which a quantized matmul takes the AMX kernels (16-row tiles; below
/// this the VNNI kernels waste less).
const AMX_MIN_ROWS: usize = 8;

impl Default for Scratch {
    fn default() -> Scratch {
        Scratch {
            rows: Mutex::default(),
            quads: Mutex::default(),
            repacked: RepackCache::default(),
            panels: gemm::repack::WeightCache::default(),
            last_panels: Mutex::default(),
            row_blocks: Mutex::default(),
            amx: true,
            invariant: false,
        }
    }
}

impl Scratch {
    /// Drops the repacked and panel copies of weights whose owner is gone.
    pub(crate) fn release_unowned(&self) {
        self.repacked.release_unowned();
        self.panels.release_unowned();
    }

    /// Bytes of the repacked and panel copies of weights held now.
    pub(crate) fn cached_bytes(&self) -> usize {
        self.repacked.bytes(|r| r.data.len()) + self.panels.bytes(|p| p.data.len())
    }
}

/// How [`repacked`] went.
#[derive(PartialEq)]
enum Done {
    /// No repacked kernel covers this weight: `y` is left to the other kernels.
    No,
    /// `y` holds the products.
    Products,
    /// `y` holds the products with the epilogue (biases and activation) applied.
    WithEpilogue,
}

/// The AVX-512 float GEMM or the repacked quantized GEMM, when one covers this weight (the
/// float GEMM applies `epi` as it stores).
#[allow(unused_variables)]
#[allow(clippy::too_many_arguments)]
fn repacked(
    set: KernelSet,
    act: ActPrecision,
    pool: &ThreadPool,
    scratch: &Scratch,
    a: &[f32],
    w_t: &Tensor,
    y: &mut [f32],
    bias: Option<&[f32]>,
    epi: Option<sgemm::Epilogue<'_>>,
) -> Done {
    #[cfg(target_arch = "x86_64")]
    {
        let k = w_t.dims()[1];
        let m = a.len().checked_div(k).unwrap_or(0);
        // One row goes to the panels too where they stream faster than the row-by-row kernel
        // below: with the one-row panel kernel (`sgemm::gemv`, AVX-512) on Intel at every `k`
        // (on the AMX Xeon VM, 2 threads, `CYB_BENCH_WEIGHTS=20 gemm_bench 1 N K 2 f16` for
        // Llama-3.2-1B's shapes read 32-34 GB/s through the panels and 28-30 row by row, and
        // the panels live in anonymous memory, which on that VM streamed faster than the
        // file's page cache: 1B F16 decode 10.4-10.9 -> 12.5-12.6 t/s); on AMD for long rows
        // (the activation row no longer fits L1 beside the weight row; on a Zen 4 VM,
        // `CYB_BENCH_WEIGHTS=6 gemm_bench 1 2048 8192 2 f16` read 18-21 GB/s row by row and
        // 31-32 through the panels, while k = 2048 read 29-36 row by row and 23-31 through the
        // panels before the one-row kernel existed; not measured since).
        let amd = gemm::float_decode_rows() == 1;
        let row_tile = sgemm::row_tile(w_t.dtype(), set);
        // Batch-invariant: every row count through the panels' tile (`gemm` and `gemm_blocked`
        // sum each output over `k` in order, as the one-row kernels do not).
        let row_tile = row_tile.filter(|_| !scratch.invariant);
        let panel_rows =
            if scratch.invariant || (amd && k >= PANEL_DECODE_K) || (!amd && row_tile.is_some()) {
                1
            } else {
                2
            };
        if let Some(tile) = sgemm::tile(w_t.dtype(), set).filter(|_| m >= panel_rows) {
            let dtype = w_t.dtype();
            // Weights in host memory are packed once and cached while their owner lives;
            // others (a device's) for this call only. The same packing either way, so a
            // result never depends on where its weight lives.
            let build = |d: &[u8], n, k| sgemm::pack(pool, dtype, d, n, k);
            let packed = scratch.panels.get(w_t, build).or_else(|| {
                let [n, k] = *w_t.dims() else { return None };
                build(w_t.host_bytes()?, n, k).map(Arc::new)
            });
            if let Some(w) = packed {
                let mut last = scratch
                    .last_panels
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if let Some(prev) = std::mem::replace(&mut *last, Arc::downgrade(&w)).upgrade() {
                    if !Arc::ptr_eq(&prev, &w) {
                        *prev
                            .successor
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner) = Arc::downgrade(&w);
                    }
                }
                drop(last);
                if m > sgemm::tile::MR && k >= sgemm::BLOCKED_MIN_K {
                    let mut blocks = scratch
                        .row_blocks
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    // SAFETY: `tile` is the tile for this dtype, and `set` was checked available
                    // when the backend was made.
                    unsafe { sgemm::gemm_blocked(pool, tile, &w, a, m, y, bias, epi, &mut blocks) };
                    return Done::WithEpilogue;
                }
                if let Some(row) = row_tile.filter(|_| m == 1) {
                    // SAFETY: `row` is the one-row kernel for this dtype, and `set` was
                    // checked available when the backend was made.
                    unsafe { sgemm::gemv(pool, row, &w, a, y, bias, epi) };
                    return Done::WithEpilogue;
                }
                // SAFETY: `tile` is the tile for this dtype, and `set` was checked available
                // when the backend was made.
                unsafe { sgemm::gemm(pool, tile, &w, a, m, y, bias, epi) };
                return Done::WithEpilogue;
            }
        }
        if let Some(tile) = gemm::float_kernel(w_t.dtype(), set) {
            let (Some(w), Some(row_bytes)) =
                (w_t.host_bytes(), w_t.dtype().bytes_for(w_t.dims()[1]))
            else {
                return Done::No;
            };
            let (n, k) = (w_t.dims()[0], w_t.dims()[1]);
            // SAFETY: `tile` is the kernel for this dtype, and `set` was checked available
            // when the backend was made.
            unsafe {
                gemm::gemm_float(
                    pool,
                    tile,
                    w,
                    row_bytes,
                    n,
                    a,
                    k,
                    y,
                    gemm::float_decode_rows(),
                )
            };
            return Done::Products;
        }
        let kern = match scratch.invariant {
            true => gemm::kernel(w_t.dtype(), set),
            false => gemm::kernel_for(w_t.dtype(), set, act, m),
        };
        let Some(kern) = kern else {
            return Done::No;
        };
        let Some((block, _)) = gemm::repack::unit(w_t.dtype()) else {
            return Done::No;
        };
        let dtype = w_t.dtype();
        let cached = scratch
            .repacked
            .get(w_t, |d, n, k| gemm::repack::repack(pool, dtype, d, n, k));
        let Some(w) = cached.or_else(|| {
            let [n, k] = *w_t.dims() else { return None };
            let data = w_t.host_bytes()?;
            repacked_only(dtype, set)
                .then(|| gemm::repack::repack(pool, dtype, data, n, k))
                .flatten()
                .map(Arc::new)
        }) else {
            return Done::No;
        };
        let m = a.len() / w.k;
        let amx = gemm::amx_kernel(w_t.dtype(), set).filter(|_| scratch.amx && m >= AMX_MIN_ROWS);
        let mut q = scratch.quads.lock().unwrap_or_else(PoisonError::into_inner);
        q.quantize(pool, set, a, w.k, block, act == ActPrecision::Q16);
        if amx.is_some() {
            q.tile_planes(m);
        }
        // SAFETY: `kern` is the kernel for this dtype (the AMX one only with `amx`), and `set`
        // was checked available when the backend was made.
        unsafe { gemm::gemm(set, pool, amx.unwrap_or(kern), &w, &q, m, y, amx.is_some()) };
        return Done::Products;
    }
    #[allow(unreachable_code)]
    Done::No
}

/// `Op::Linear`'s epilogue: the biases (`[n]`) and the activation.
pub(crate) type Linear<'a> = Option<(&'a [f32], cyb_ops::LinearAct)>;

/// `a · wᵀ`, then `act(y + bias)` when `linear` is given (the float GEMM applies it as it
/// stores each tile; other kernels in a pass over `y` after).
pub(crate) fn matmul(
    set: KernelSet,
    act: ActPrecision,
    pool: &ThreadPool,
    scratch: &Scratch,
    a_t: &Tensor,
    w_t: &Tensor,
    linear: Linear<'_>,
) -> Result<Tensor> {
    let unsupported = || Error::UnsupportedOp {
        op: "matmul".into(),
        backend: "cpu".into(),
        input_dtype: w_t.dtype(),
    };
    let kern = kernel(w_t.dtype(), set, act);
    if kern.is_none() && !repacked_only(w_t.dtype(), set) {
        return Err(unsupported());
    }
    let a = a_t.as_f32()?;
    let (ad, wd) = (a_t.dims(), w_t.dims());
    let (n, k) = (wd[0], wd[1]);
    let m = a.len().checked_div(k).unwrap_or(0);
    let row_bytes = w_t.dtype().bytes_for(k).ok_or_else(|| {
        Error::invalid("matmul", format!("{k} is not whole {} blocks", w_t.dtype()))
    })?;
    let w = w_t
        .host_bytes()
        .ok_or_else(|| Error::invalid("matmul", "weight is not in host memory"))?;
    if let Some((b, _)) = linear {
        if b.len() != n {
            return Err(Error::invalid(
                "linear",
                format!("{} biases for {n} outputs", b.len()),
            ));
        }
    }
    let mut dims = ad.to_vec();
    if let Some(last) = dims.last_mut() {
        *last = n;
    }
    // The float GEMM adds the biases in registers; the activation follows on each tile.
    let act_fn = linear
        .filter(|(_, la)| *la != cyb_ops::LinearAct::None)
        .map(|(_, la)| {
            move |rows: &mut [&mut [f32]]| {
                crate::elementwise::bias_act(set, rows.iter_mut().map(|r| &mut **r), None, la)
            }
        });
    let epi: Option<sgemm::Epilogue<'_>> = act_fn.as_ref().map(|f| f as _);
    let bias = linear.map(|(b, _)| b);
    let mut done = Done::No;
    // Every kernel writes each output once k > 0; with k = 0 the outputs are zero.
    let mut buf = if k > 0 {
        AlignedBuf::for_overwrite(m * n * 4)
    } else {
        AlignedBuf::zeroed(m * n * 4)
    };
    if m * n > 0 && k > 0 {
        let y: &mut [f32] = bytemuck::cast_slice_mut(buf.as_bytes_mut());
        done = repacked(set, act, pool, scratch, &a, w_t, y, bias, epi);
    }
    if m * n > 0 && k > 0 && done == Done::No {
        let y: &mut [f32] = bytemuck::cast_slice_mut(buf.as_bytes_mut());
        let out = DisjointOut::new(y);
        let chunk = (WEIGHT_CHUNK_BYTES / row_bytes.max(1)).max(4);
        let threads = pool.threads();
        // Decode streams four weight rows at once; prefill pairs two weight rows with four
        // activation rows (eight accumulators). Either way each output is computed alone.
        let cols = if m == 1 { 4 } else { 2 };
        let tiles = |t: usize, dot: &TileFn| {
            let mine = split(n, threads, t);
            let mut res = [0f32; 16];
            let mut j0 = mine.start;
            while j0 < mine.end {
                let j1 = (j0 + chunk).min(mine.end);
                for r0 in (0..m).step_by(4) {
                    let nr = (m - r0).min(4);
                    let mut j = j0;
                    while j < j1 {
                        let nc = (j1 - j).min(cols);
                        dot(
                            &w[j * row_bytes..(j + nc) * row_bytes],
                            nc,
                            r0,
                            nr,
                            &mut res,
                        );
                        for c in 0..nc {
                            for r in 0..nr {
                                // SAFETY: column j + c belongs to this thread's range only.
                                unsafe { out.set((r0 + r) * n + j + c, res[c * 4 + r]) };
                            }
                        }
                        j += nc;
                    }
                }
                j0 = j1;
            }
        };
        match kern.ok_or_else(unsupported)? {
            Kernel::Quant { dot: f, block, act } => {
                let mut q = scratch.rows.lock().unwrap_or_else(PoisonError::into_inner);
                match act {
                    ActPrecision::Q8 => q.quantize(&a, k, block),
                    ActPrecision::Q16 => q.quantize16(&a, k, block),
                }
                let q = &*q;
                pool.run(&|t| {
                    // SAFETY: `set` was checked available when the backend was made.
                    tiles(t, &|wr, nc, r0, nr, res| unsafe {
                        f(wr, row_bytes, nc, q, r0, nr, res)
                    })
                });
            }
            Kernel::Float(f) => {
                let a = &*a;
                pool.run(&|t| {
                    // SAFETY: as above.
                    tiles(t, &|wr, nc, r0, nr, res| {
                        for c in 0..nc {
                            let mut col = [0f32; 4];
                            let wc = &wr[c * row_bytes..(c + 1) * row_bytes];
                            // SAFETY: as above.
                            unsafe { f(wc, a, k, r0, nr, &mut col) };
                            res[c * 4..c * 4 + 4].copy_from_slice(&col);
                        }
                    })
                });
            }
        }
    }
    if let (Some((b, la)), false) = (linear, done == Done::WithEpilogue) {
        if m * n > 0 {
            let y: &mut [f32] = bytemuck::cast_slice_mut(buf.as_bytes_mut());
            let par = crate::par::Par { pool, set };
            par.fill(y, n, |_, part| {
                crate::elementwise::bias_act(set, part.chunks_exact_mut(n), Some(b), la)
            });
        }
    }
    Tensor::new(Shape::new(dims)?, DType::F32, Storage::Host(Arc::new(buf)))
}

//! Activations for the repacked GEMM (`mod.rs`): each row quantized once to signed bytes that
//! the kernels broadcast four at a time (`vpdpbusd`'s signed operand).
//!
//! 8-bit (`split == false`): levels `L` in `-127..=127` in `lo`. 16-bit (`split == true`, the
//! default precision): levels `L` in `-Q16_MAX..=Q16_MAX`, stored as two byte planes with
//! `L = 256·hi + lo` (`hi = (L + 128) >> 8`, both in `-128..=127`), so a 16-bit dot product is
//! two 8-bit ones, combined exactly in i32. Scales are per `block` values (32 for the legacy
//! formats, 256 for the K-quants); the integer sums of `L` per 16 and per 32 values carry the
//! weight formats' zero points and mins. Rows are independent, so the pool quantizes them in
//! parallel without changing any value, each in code built for the kernel set's vector width.

use crate::features::KernelSet;
use crate::matmul::quant_act::{nearest, Q16_MAX};
use crate::par::pool::{split, DisjointOut, ThreadPool};
use crate::par::wide;

#[derive(Default)]
pub struct ActQuads {
    pub k: usize,
    /// Bytes from one row's levels to the next's in `lo` and `hi`: `k` plus one cache line
    /// ([`plane_stride`]).
    pub stride: usize,
    /// Values per scale (32 or 256).
    pub block: usize,
    /// 16-bit levels split into `hi`/`lo` planes.
    pub split: bool,
    /// `m` rows of `k` low bytes (the whole level when not split), `stride` apart.
    pub lo: Vec<i8>,
    /// `m` rows of `k` high bytes (split only), `stride` apart.
    pub hi: Vec<i8>,
    /// `lo` and `hi` as AMX tiles (see [`ActQuads::tile_planes`]).
    pub tiles_lo: Vec<i8>,
    pub tiles_hi: Vec<i8>,
    /// `m · k / block` scales.
    pub d: Vec<f32>,
    /// `Σ L` of each run of 16 values (`m · k / 16`).
    pub sum16: Vec<i32>,
    /// `Σ L` of each run of 32 values (`m · k / 32`).
    pub sum32: Vec<i32>,
}

/// One thread's rows of every plane.
struct RowOut<'a> {
    lo: &'a mut [i8],
    hi: &'a mut [i8],
    d: &'a mut [f32],
    sum16: &'a mut [i32],
    sum32: &'a mut [i32],
}

/// Row stride of the level planes for rows of `k` values: one cache line more than `k`, so that
/// rows `k` apart for `k` a multiple of 4 KiB (the 1B shape's 2048- and 8192-value rows, two
/// planes of them) do not all fall into one set of the L1 cache while a kernel walks a tile of
/// rows side by side.
pub fn plane_stride(k: usize) -> usize {
    k + 64
}

/// The largest `|v|` (NaNs passed over, as `f32::max` does), in 16 lanes so that it
/// vectorizes: max is exact, so the lanes give the sequential fold's value.
#[inline(always)]
fn abs_max(x: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = l.max(v.abs());
        }
    }
    let tail = chunks.remainder().iter().fold(0f32, |m, v| m.max(v.abs()));
    lanes.iter().fold(tail, |m, &l| m.max(l))
}

// Inlined into `wide`'s wider-vector function, where its lane-wise loops (scaling, rounding,
// the byte split, the integer sums) vectorize to the CPU's full width.
#[inline(always)]
fn quantize_rows(x: &[f32], k: usize, stride: usize, block: usize, split: bool, o: RowOut) {
    let max = if split { Q16_MAX } else { 127.0 };
    let mut levels = [0i32; 256];
    let per_row = k / block;
    for (bi, xb) in x.chunks_exact(block).enumerate() {
        let amax = abs_max(xb);
        let lv = &mut levels[..block];
        if amax == 0.0 || !amax.is_finite() {
            lv.fill(0);
            o.d[bi] = 0.0;
        } else {
            let id = max / amax;
            let imax = max as i32;
            for (l, &v) in lv.iter_mut().zip(xb) {
                *l = nearest(v * id).clamp(-imax, imax);
            }
            o.d[bi] = amax / max;
        }
        let at = bi * block;
        let pat = (bi / per_row) * stride + (bi % per_row) * block;
        for (i, &l) in lv.iter().enumerate() {
            if split {
                let h = (l + 128) >> 8;
                o.hi[pat + i] = h as i8;
                o.lo[pat + i] = (l - 256 * h) as i8;
            } else {
                o.lo[pat + i] = l as i8;
            }
        }
        for (g, run) in lv.chunks_exact(16).enumerate() {
            o.sum16[at / 16 + g] = run.iter().sum();
        }
        for (g, run) in lv.chunks_exact(32).enumerate() {
            o.sum32[at / 32 + g] = run.iter().sum();
        }
    }
}

impl ActQuads {
    /// Quantizes `a` (`m` rows of `k`, `k` a multiple of `block` and of 32), rows split over
    /// the pool's threads.
    pub fn quantize(
        &mut self,
        pool: &ThreadPool,
        set: KernelSet,
        a: &[f32],
        k: usize,
        block: usize,
        split16: bool,
    ) {
        let m = a.len().checked_div(k).unwrap_or(0);
        let stride = plane_stride(k);
        self.k = k;
        self.stride = stride;
        self.block = block;
        self.split = split16;
        self.lo.resize(m * stride, 0);
        if split16 {
            self.hi.resize(m * stride, 0);
        }
        self.d.resize(m * k / block, 0.0);
        self.sum16.resize(m * k / 16, 0);
        self.sum32.resize(m * k / 32, 0);
        // One row (decode) is quantized on the calling thread: a pool round trip would cost
        // more than the row, and the other part would be empty anyway.
        let threads = if m < 2 { 1 } else { pool.threads() };
        let lo = DisjointOut::new(&mut self.lo[..m * stride]);
        let hi = DisjointOut::new(if split16 {
            &mut self.hi[..m * stride]
        } else {
            &mut []
        });
        let d = DisjointOut::new(&mut self.d[..m * k / block]);
        let s16 = DisjointOut::new(&mut self.sum16[..m * k / 16]);
        let s32 = DisjointOut::new(&mut self.sum32[..m * k / 32]);
        let job = |t: usize| {
            let rows = split(m, threads, t);
            if rows.is_empty() {
                return;
            }
            let (r0, r1) = (rows.start, rows.end);
            // SAFETY: each thread takes the planes' ranges of its own rows only.
            let o = unsafe {
                RowOut {
                    lo: lo.slice(r0 * stride..r1 * stride),
                    hi: if split16 {
                        hi.slice(r0 * stride..r1 * stride)
                    } else {
                        &mut []
                    },
                    d: d.slice(r0 * k / block..r1 * k / block),
                    sum16: s16.slice(r0 * k / 16..r1 * k / 16),
                    sum32: s32.slice(r0 * k / 32..r1 * k / 32),
                }
            };
            let x = &a[r0 * k..r1 * k];
            wide(
                set,
                #[inline(always)]
                || quantize_rows(x, k, stride, block, split16, o),
            );
        };
        if threads == 1 {
            job(0);
        } else {
            pool.run(&job);
        }
    }

    /// The level planes again as AMX `A` tiles (`tiles_lo`/`tiles_hi`): for each 16 rows and
    /// each 32 values, 16 × 32 contiguous bytes (rows past `m` zero), so a tile loads from
    /// 512 consecutive bytes instead of 16 rows `k` apart.
    pub fn tile_planes(&mut self, m: usize) {
        const T: usize = 16;
        let (k, nb, stride) = (self.k, self.k / 32, self.stride);
        let tiles = m.div_ceil(T);
        for (src, dst) in [
            (&self.lo, &mut self.tiles_lo),
            (&self.hi, &mut self.tiles_hi),
        ] {
            if src.len() < m * stride {
                continue; // no `hi` plane in 8-bit mode
            }
            // Every byte of rows below `m` is written below; only the padding rows of the
            // last tile are zeroed (the whole plane was, at ~2 MB a call for k = 8192).
            dst.resize(tiles * T * k, 0);
            for r in m..tiles * T {
                let (t, rr) = (r / T, r % T);
                for b in 0..nb {
                    let at = ((t * nb + b) * T + rr) * 32;
                    dst[at..at + 32].fill(0);
                }
            }
            for r in 0..m {
                let (t, rr) = (r / T, r % T);
                for (b, run) in src[r * stride..r * stride + k].chunks_exact(32).enumerate() {
                    let at = ((t * nb + b) * T + rr) * 32;
                    dst[at..at + 32].copy_from_slice(run);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel set quantizes to the same bytes, and they are the scalar formula's: for
    /// each block `d = amax / max`, levels `nearest(x / d)` (split into `256·hi + lo` at 16
    /// bits) and their sums per 16 and 32 — on rows with zero, huge and NaN-holding blocks.
    #[test]
    fn every_kernel_set_gives_the_scalar_levels() {
        let (m, k) = (3, 512);
        let mut a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7919 % 1013) as f32 - 506.0) / 37.0)
            .collect();
        a[k..k + 32].fill(0.0); // an all-zero block
        a[2 * k + 5] = 3.0e7; // one huge value
        a[2 * k + 40] = f32::NAN; // NaN is passed over by the block maximum
        let pool = ThreadPool::new(2);
        for (block, split) in [(32, false), (32, true), (256, true), (256, false)] {
            let max = if split { Q16_MAX } else { 127.0 };
            let mut first: Option<ActQuads> = None;
            for set in KernelSet::available() {
                let mut q = ActQuads::default();
                q.quantize(&pool, set, &a, k, block, split);
                for r in 0..m {
                    for (b, xb) in a[r * k..(r + 1) * k].chunks_exact(block).enumerate() {
                        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                        let bi = r * (k / block) + b;
                        let want_d = if amax > 0.0 && amax.is_finite() {
                            amax / max
                        } else {
                            0.0
                        };
                        assert_eq!(q.d[bi].to_bits(), want_d.to_bits(), "{set:?} d {r} {b}");
                        for (i, &v) in xb.iter().enumerate() {
                            let want = if want_d == 0.0 {
                                0
                            } else {
                                nearest(v * (max / amax)).clamp(-(max as i32), max as i32)
                            };
                            let at = r * q.stride + b * block + i;
                            let got = if split {
                                256 * q.hi[at] as i32 + q.lo[at] as i32
                            } else {
                                q.lo[at] as i32
                            };
                            assert_eq!(got, want, "{set:?} block {block} row {r} value {i}");
                        }
                    }
                    let levels: Vec<i32> = (0..k)
                        .map(|i| {
                            let at = r * q.stride + i;
                            if split {
                                256 * q.hi[at] as i32 + q.lo[at] as i32
                            } else {
                                q.lo[at] as i32
                            }
                        })
                        .collect();
                    for (g, run) in levels.chunks_exact(16).enumerate() {
                        assert_eq!(q.sum16[r * k / 16 + g], run.iter().sum::<i32>());
                    }
                    for (g, run) in levels.chunks_exact(32).enumerate() {
                        assert_eq!(q.sum32[r * k / 32 + g], run.iter().sum::<i32>());
                    }
                }
                match &first {
                    None => first = Some(q),
                    Some(f) => {
                        assert_eq!(f.lo, q.lo, "{set:?}");
                        assert_eq!(f.hi, q.hi, "{set:?}");
                    }
                }
            }
        }
    }
}

//! AVX-512 (and AVX2) register tiles of `mod.rs`: `R` activation rows × 32 packed outputs, two
//! accumulators per row, a block of `k` in registers (continuing the sums in `out` unless
//! `first`: a row's sum runs over `k` in order however `k` is cut into blocks).

use super::tile::{MR, NR};
use std::arch::x86_64::*;

// Loads of 16 packed weights as f32 from `p` (16 values of the weight dtype readable).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load_f32(p: *const u8) -> __m512 {
    // SAFETY: the caller guarantees 64 readable bytes.
    unsafe { _mm512_loadu_ps(p as *const f32) }
}
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load_f16(p: *const u8) -> __m512 {
    // SAFETY: the caller guarantees 32 readable bytes.
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p as *const __m256i) })
}
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load_bf16(p: *const u8) -> __m512 {
    // SAFETY: the caller guarantees 32 readable bytes.
    let h = unsafe { _mm256_loadu_si256(p as *const __m256i) };
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
}

macro_rules! sgemm_tile {
    ($entry:ident, $rows:ident, $size:expr, $load:ident) => {
        #[target_feature(enable = "avx512f")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $rows<const R: usize>(
            panel: &[u8],
            rows: &[f32],
            lda: usize,
            k: usize,
            out: *mut f32,
            ldo: usize,
            first: bool,
            bias: Option<&[f32; NR]>,
        ) {
            assert!(R <= MR && panel.len() >= k * NR * $size && rows.len() >= (R - 1) * lda + k);
            let mut lo = [_mm512_setzero_ps(); R];
            let mut hi = [_mm512_setzero_ps(); R];
            if !first {
                for r in 0..R {
                    // SAFETY: the caller's contract: NR values at each of the R rows of out.
                    unsafe {
                        lo[r] = _mm512_loadu_ps(out.add(r * ldo));
                        hi[r] = _mm512_loadu_ps(out.add(r * ldo + 16));
                    }
                }
            }
            let (bp, ap) = (panel.as_ptr(), rows.as_ptr());
            for i in 0..k {
                // SAFETY: i < k keeps every load inside the asserted lengths.
                unsafe {
                    let b0 = $load(bp.add(i * NR * $size));
                    let b1 = $load(bp.add((i * NR + 16) * $size));
                    for r in 0..R {
                        let v = _mm512_set1_ps(*ap.add(r * lda + i));
                        lo[r] = _mm512_fmadd_ps(v, b0, lo[r]);
                        hi[r] = _mm512_fmadd_ps(v, b1, hi[r]);
                    }
                }
            }
            if let Some(b) = bias {
                // SAFETY: `b` holds NR = 32 values.
                let (b0, b1) = unsafe {
                    (
                        _mm512_loadu_ps(b.as_ptr()),
                        _mm512_loadu_ps(b.as_ptr().add(16)),
                    )
                };
                for r in 0..R {
                    lo[r] = _mm512_add_ps(lo[r], b0);
                    hi[r] = _mm512_add_ps(hi[r], b1);
                }
            }
            for r in 0..R {
                // SAFETY: the caller's contract: NR = 32 writable values at each row of `out`.
                unsafe {
                    _mm512_storeu_ps(out.add(r * ldo), lo[r]);
                    _mm512_storeu_ps(out.add(r * ldo + 16), hi[r]);
                }
            }
        }

        /// # Safety
        /// The CPU must have AVX-512F; `out` must have `NR` writable (and, unless `first`,
        /// readable: the sums so far) values at each of its `nr` rows, `ldo` apart. `bias`,
        /// when given, is added to every row before the store.
        #[target_feature(enable = "avx512f")]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $entry(
            panel: &[u8],
            rows: &[f32],
            lda: usize,
            k: usize,
            nr: usize,
            out: *mut f32,
            ldo: usize,
            first: bool,
            bias: Option<&[f32; NR]>,
        ) {
            // SAFETY: same features as this fn; the tiles check their own bounds.
            unsafe {
                match nr {
                    1 => $rows::<1>(panel, rows, lda, k, out, ldo, first, bias),
                    2 => $rows::<2>(panel, rows, lda, k, out, ldo, first, bias),
                    3 => $rows::<3>(panel, rows, lda, k, out, ldo, first, bias),
                    4 => $rows::<4>(panel, rows, lda, k, out, ldo, first, bias),
                    5 => $rows::<5>(panel, rows, lda, k, out, ldo, first, bias),
                    6 => $rows::<6>(panel, rows, lda, k, out, ldo, first, bias),
                    7 => $rows::<7>(panel, rows, lda, k, out, ldo, first, bias),
                    8 => $rows::<8>(panel, rows, lda, k, out, ldo, first, bias),
                    9 => $rows::<9>(panel, rows, lda, k, out, ldo, first, bias),
                    10 => $rows::<10>(panel, rows, lda, k, out, ldo, first, bias),
                    11 => $rows::<11>(panel, rows, lda, k, out, ldo, first, bias),
                    _ => $rows::<MR>(panel, rows, lda, k, out, ldo, first, bias),
                }
            }
        }
    };
}

sgemm_tile!(f32_tile, f32_rows, 4, load_f32);
sgemm_tile!(f16_tile, f16_rows, 2, load_f16);
sgemm_tile!(bf16_tile, bf16_rows, 2, load_bf16);

/// The reach of a convolution's taps for [`f32_window_tile`]: `counts` `[c, kh, kw]` (input
/// channels, kernel rows, kernel columns, the weight's order) and the element `steps` between
/// consecutive ones in the input.
#[derive(Clone, Copy)]
pub struct Taps {
    pub counts: [usize; 3],
    pub steps: [usize; 3],
}

impl Taps {
    /// The highest element offset a tile reads past its first one, plus one.
    pub fn span(&self) -> usize {
        let [c, kh, kw] = self.counts;
        let [cs, rs, ts] = self.steps;
        (c - 1) * cs + (kh - 1) * rs + (kw - 1) * ts + NR
    }
}

#[target_feature(enable = "avx512f")]
unsafe fn window_rows<const R: usize>(
    x: &[f32],
    taps: Taps,
    rows: &[f32],
    lda: usize,
    out: *mut f32,
    ldo: usize,
) {
    let [c, kh, kw] = taps.counts;
    let [cs, rs, ts] = taps.steps;
    let k = c * kh * kw;
    assert!(R <= MR && k > 0 && x.len() >= taps.span() && rows.len() >= (R - 1) * lda + k);
    let mut lo = [_mm512_setzero_ps(); R];
    let mut hi = [_mm512_setzero_ps(); R];
    let (xp, ap) = (x.as_ptr(), rows.as_ptr());
    let mut i = 0;
    for ci in 0..c {
        for ky in 0..kh {
            for kx in 0..kw {
                // SAFETY: every tap's NR values lie within `span()`, asserted above, and
                // i < k keeps the weight reads inside the asserted rows.
                unsafe {
                    let b = xp.add(ci * cs + ky * rs + kx * ts);
                    let (b0, b1) = (_mm512_loadu_ps(b), _mm512_loadu_ps(b.add(16)));
                    for r in 0..R {
                        let v = _mm512_set1_ps(*ap.add(r * lda + i));
                        lo[r] = _mm512_fmadd_ps(v, b0, lo[r]);
                        hi[r] = _mm512_fmadd_ps(v, b1, hi[r]);
                    }
                }
                i += 1;
            }
        }
    }
    for r in 0..R {
        // SAFETY: the caller's contract: NR = 32 writable values at each row of `out`.
        unsafe {
            _mm512_storeu_ps(out.add(r * ldo), lo[r]);
            _mm512_storeu_ps(out.add(r * ldo + 16), hi[r]);
        }
    }
}

/// `nr` weight rows of a convolution (`rows`, `lda` apart, `c·kh·kw` values each) times the
/// input under each of its taps for `NR` consecutive output positions that read consecutive
/// input values (stride 1 along a row, no padding under them), read in place from `x`: tap
/// `(ci, ky, kx)` is the `NR` values at `ci·cs + ky·rs + kx·ts`. The same sums in the same
/// order as [`f32_tile`] on the packed panel of those windows, without packing it.
///
/// # Safety
/// The CPU must have AVX-512F; `out` must have `NR` writable values at each of its `nr` rows,
/// `ldo` apart.
#[target_feature(enable = "avx512f")]
pub unsafe fn f32_window_tile(
    x: &[f32],
    taps: Taps,
    rows: &[f32],
    lda: usize,
    nr: usize,
    out: *mut f32,
    ldo: usize,
) {
    // SAFETY: same features as this fn; the tiles check their own bounds.
    unsafe {
        match nr {
            1 => window_rows::<1>(x, taps, rows, lda, out, ldo),
            2 => window_rows::<2>(x, taps, rows, lda, out, ldo),
            3 => window_rows::<3>(x, taps, rows, lda, out, ldo),
            4 => window_rows::<4>(x, taps, rows, lda, out, ldo),
            5 => window_rows::<5>(x, taps, rows, lda, out, ldo),
            6 => window_rows::<6>(x, taps, rows, lda, out, ldo),
            7 => window_rows::<7>(x, taps, rows, lda, out, ldo),
            8 => window_rows::<8>(x, taps, rows, lda, out, ldo),
            9 => window_rows::<9>(x, taps, rows, lda, out, ldo),
            10 => window_rows::<10>(x, taps, rows, lda, out, ldo),
            11 => window_rows::<11>(x, taps, rows, lda, out, ldo),
            _ => window_rows::<MR>(x, taps, rows, lda, out, ldo),
        }
    }
}

/// Bytes ahead of the current `k` step that the one-row kernels prefetch.
const ROW_PREFETCH_BYTES: usize = 2048;

macro_rules! sgemm_row {
    ($name:ident, $size:expr, $load:ident) => {
        /// One activation row times one whole panel (a decode step), into `out` plus `bias`:
        /// four `k` steps in flight on eight accumulators (with one row, two accumulators
        /// wait on the FMA latency every step), added pairwise at the end. The weights stream
        /// from memory here, so each step prefetches the line `ROW_PREFETCH_BYTES` ahead, past
        /// the panel's end too (a thread's next panel follows it).
        ///
        /// # Safety
        /// The CPU must have AVX-512F.
        #[target_feature(enable = "avx512f")]
        pub unsafe fn $name(
            panel: &[u8],
            row: &[f32],
            k: usize,
            out: &mut [f32; NR],
            bias: Option<&[f32; NR]>,
        ) {
            assert!(panel.len() >= k * NR * $size && row.len() >= k);
            const STEP: usize = NR * $size;
            let (bp, ap) = (panel.as_ptr(), row.as_ptr());
            let mut acc = [_mm512_setzero_ps(); 8];
            let mut i = 0;
            // SAFETY (all loads below): `i + u < k`, inside the asserted lengths; prefetches
            // never fault, and their addresses are formed with wrapping arithmetic.
            while i + 4 <= k {
                for u in 0..4 {
                    let p = unsafe { bp.add((i + u) * STEP) };
                    for l in (0..STEP).step_by(64) {
                        let ahead = p.wrapping_add(ROW_PREFETCH_BYTES + l);
                        _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                    }
                    let v = _mm512_set1_ps(unsafe { *ap.add(i + u) });
                    let (b0, b1) = unsafe { ($load(p), $load(p.add(16 * $size))) };
                    acc[2 * u] = _mm512_fmadd_ps(v, b0, acc[2 * u]);
                    acc[2 * u + 1] = _mm512_fmadd_ps(v, b1, acc[2 * u + 1]);
                }
                i += 4;
            }
            let mut lo =
                _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[4], acc[6]));
            let mut hi =
                _mm512_add_ps(_mm512_add_ps(acc[1], acc[3]), _mm512_add_ps(acc[5], acc[7]));
            while i < k {
                let p = unsafe { bp.add(i * STEP) };
                let v = _mm512_set1_ps(unsafe { *ap.add(i) });
                let (b0, b1) = unsafe { ($load(p), $load(p.add(16 * $size))) };
                lo = _mm512_fmadd_ps(v, b0, lo);
                hi = _mm512_fmadd_ps(v, b1, hi);
                i += 1;
            }
            if let Some(b) = bias {
                lo = _mm512_add_ps(lo, unsafe { _mm512_loadu_ps(b.as_ptr()) });
                hi = _mm512_add_ps(hi, unsafe { _mm512_loadu_ps(b.as_ptr().add(16)) });
            }
            // SAFETY: `out` holds NR = 32 values.
            unsafe {
                _mm512_storeu_ps(out.as_mut_ptr(), lo);
                _mm512_storeu_ps(out.as_mut_ptr().add(16), hi);
            }
        }
    };
}

sgemm_row!(f32_row, 4, load_f32);
sgemm_row!(f16_row, 2, load_f16);
sgemm_row!(bf16_row, 2, load_bf16);

// AVX2 + FMA tiles: eight f32 lanes, so one packed `k` step is four vectors and a row takes four
// accumulators. F32 takes three rows (12 accumulators, 3 broadcasts, one weight vector: the 16
// registers); F16 and BF16 take two, since their conversion needs one more register and three
// rows spilled an accumulator (`gemm_bench 128 2048 2048 1 f16`: 18.8 GMAC/s with three rows,
// 24 with two; widening a panel to f32 once per call measured slower still, 18). The driver's
// larger tiles are taken that many rows at a time, each pass over the panel from L1/L2.

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load8_f32(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 32 readable bytes.
    unsafe { _mm256_loadu_ps(p as *const f32) }
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load8_f16(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 16 readable bytes.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p as *const __m128i) })
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load8_bf16(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 16 readable bytes.
    let h = unsafe { _mm_loadu_si128(p as *const __m128i) };
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
}

macro_rules! sgemm_tile_avx2 {
    ($entry:ident, $rows:ident, $size:expr, $load:ident, $mr:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $rows<const R: usize>(
            panel: &[u8],
            rows: &[f32],
            lda: usize,
            k: usize,
            out: *mut f32,
            ldo: usize,
            first: bool,
            bias: Option<&[f32; NR]>,
        ) {
            assert!(R <= $mr && panel.len() >= k * NR * $size);
            assert!(rows.len() >= (R - 1) * lda + k);
            let mut acc = [[_mm256_setzero_ps(); 4]; R];
            if !first {
                for r in 0..R {
                    for q in 0..4 {
                        // SAFETY: the caller's contract: NR values at each of the R rows.
                        acc[r][q] = unsafe { _mm256_loadu_ps(out.add(r * ldo + 8 * q)) };
                    }
                }
            }
            let (bp, ap) = (panel.as_ptr(), rows.as_ptr());
            for i in 0..k {
                // SAFETY: i < k keeps every load inside the asserted lengths.
                unsafe {
                    // The R broadcasts, then one weight vector at a time: 12 accumulators + 3
                    // broadcasts + 1 weight vector = the 16 registers, nothing spilled.
                    let v: [__m256; R] =
                        std::array::from_fn(|r| _mm256_set1_ps(*ap.add(r * lda + i)));
                    for q in 0..4 {
                        let b = $load(bp.add((i * NR + 8 * q) * $size));
                        for r in 0..R {
                            acc[r][q] = _mm256_fmadd_ps(v[r], b, acc[r][q]);
                        }
                    }
                }
            }
            for r in 0..R {
                for q in 0..4 {
                    if let Some(b) = bias {
                        // SAFETY: `b` holds NR = 32 values.
                        let bq = unsafe { _mm256_loadu_ps(b.as_ptr().add(8 * q)) };
                        acc[r][q] = _mm256_add_ps(acc[r][q], bq);
                    }
                    // SAFETY: the caller's contract: NR = 32 writable values at each row of
                    // `out`.
                    unsafe { _mm256_storeu_ps(out.add(r * ldo + 8 * q), acc[r][q]) };
                }
            }
        }

        /// # Safety
        /// The CPU must have AVX2, FMA and F16C; `out` must have `NR` writable (and, unless
        /// `first`, readable: the sums so far) values at each of its `nr` rows, `ldo` apart.
        /// `bias`, when given, is added to every row before the store.
        #[target_feature(enable = "avx2,fma,f16c")]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $entry(
            panel: &[u8],
            rows: &[f32],
            lda: usize,
            k: usize,
            nr: usize,
            out: *mut f32,
            ldo: usize,
            first: bool,
            bias: Option<&[f32; NR]>,
        ) {
            let mut r0 = 0;
            while r0 < nr {
                let take = (nr - r0).min($mr);
                let (a, o) = (&rows[r0 * lda..], out.wrapping_add(r0 * ldo));
                // SAFETY: same features as this fn; rows r0.. of `out` per the contract; the
                // tiles check their inputs.
                unsafe {
                    match take {
                        1 => $rows::<1>(panel, a, lda, k, o, ldo, first, bias),
                        2 => $rows::<2>(panel, a, lda, k, o, ldo, first, bias),
                        _ => $rows::<$mr>(panel, a, lda, k, o, ldo, first, bias),
                    }
                }
                r0 += take;
            }
        }
    };
}

sgemm_tile_avx2!(f32_tile_avx2, f32_rows_avx2, 4, load8_f32, 3);
sgemm_tile_avx2!(f16_tile_avx2, f16_rows_avx2, 2, load8_f16, 2);
sgemm_tile_avx2!(bf16_tile_avx2, bf16_rows_avx2, 2, load8_bf16, 2);

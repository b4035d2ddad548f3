//! AVX-512 register tiles of `sgemm.rs`: `R` activation rows × 32 packed outputs, two
//! accumulators per row, all of `k` in registers.

use crate::sgemm::{MR, NR};
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
            bias: Option<&[f32; NR]>,
        ) {
            assert!(R <= MR && panel.len() >= k * NR * $size && rows.len() >= (R - 1) * lda + k);
            let mut lo = [_mm512_setzero_ps(); R];
            let mut hi = [_mm512_setzero_ps(); R];
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
        /// The CPU must have AVX-512F; `out` must have `NR` writable values at each of its
        /// `nr` rows, `ldo` apart. `bias`, when given, is added to every row before the store.
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
            bias: Option<&[f32; NR]>,
        ) {
            // SAFETY: same features as this fn; the tiles check their own bounds.
            unsafe {
                match nr {
                    1 => $rows::<1>(panel, rows, lda, k, out, ldo, bias),
                    2 => $rows::<2>(panel, rows, lda, k, out, ldo, bias),
                    3 => $rows::<3>(panel, rows, lda, k, out, ldo, bias),
                    4 => $rows::<4>(panel, rows, lda, k, out, ldo, bias),
                    5 => $rows::<5>(panel, rows, lda, k, out, ldo, bias),
                    6 => $rows::<6>(panel, rows, lda, k, out, ldo, bias),
                    7 => $rows::<7>(panel, rows, lda, k, out, ldo, bias),
                    8 => $rows::<8>(panel, rows, lda, k, out, ldo, bias),
                    9 => $rows::<9>(panel, rows, lda, k, out, ldo, bias),
                    10 => $rows::<10>(panel, rows, lda, k, out, ldo, bias),
                    11 => $rows::<11>(panel, rows, lda, k, out, ldo, bias),
                    _ => $rows::<MR>(panel, rows, lda, k, out, ldo, bias),
                }
            }
        }
    };
}

sgemm_tile!(f32_tile, f32_rows, 4, load_f32);
sgemm_tile!(f16_tile, f16_rows, 2, load_f16);
sgemm_tile!(bf16_tile, bf16_rows, 2, load_bf16);

//! AVX2 + FMA + F16C kernels of `float.rs`.

// Kernels index several parallel arrays (rows, columns, groups) by one loop counter.
#![allow(clippy::needless_range_loop)]

use super::x86_base::hsum;
use std::arch::x86_64::*;

// Loads of 8 weights as f32 from `p` (8 values of the weight dtype must be readable).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load_f32(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 32 readable bytes.
    unsafe { _mm256_loadu_ps(p as *const f32) }
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load_f16(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 16 readable bytes.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load_bf16(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 16 readable bytes.
    let h = unsafe { _mm_loadu_si128(p as *const __m128i) };
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
}

fn tail_value(kind: u8, w: &[u8], i: usize) -> f32 {
    match kind {
        1 => half::f16::from_le_bytes([w[2 * i], w[2 * i + 1]]).to_f32(),
        2 => half::bf16::from_le_bytes([w[2 * i], w[2 * i + 1]]).to_f32(),
        _ => f32::from_le_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]),
    }
}

macro_rules! float_kernel {
    ($entry:ident, $rows:ident, $size:expr, $kind:expr, $load:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $rows<const R: usize>(
            w: &[u8],
            a: &[f32],
            k: usize,
            r0: usize,
            out: &mut [f32; 4],
        ) {
            assert!(w.len() >= k * $size && a.len() >= (r0 + R) * k);
            let mut acc0 = [_mm256_setzero_ps(); R];
            let mut acc1 = [_mm256_setzero_ps(); R];
            let (k16, k8) = (k / 16 * 16, k / 8 * 8);
            let (wp, ap) = (w.as_ptr(), a.as_ptr());
            let mut i = 0;
            // SAFETY: i + 16 <= k16 <= k keeps every load inside the asserted lengths.
            unsafe {
                while i < k16 {
                    let w0 = $load(wp.add(i * $size));
                    let w1 = $load(wp.add((i + 8) * $size));
                    for r in 0..R {
                        let x = ap.add((r0 + r) * k + i);
                        acc0[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x), w0, acc0[r]);
                        acc1[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x.add(8)), w1, acc1[r]);
                    }
                    i += 16;
                }
                if i < k8 {
                    let w0 = $load(wp.add(i * $size));
                    for r in 0..R {
                        let x = ap.add((r0 + r) * k + i);
                        acc0[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x), w0, acc0[r]);
                    }
                }
            }
            for r in 0..R {
                let mut t = 0f32;
                for j in k8..k {
                    t += a[(r0 + r) * k + j] * tail_value($kind, w, j);
                }
                // SAFETY: same features as this fn.
                out[r] = unsafe { hsum(_mm256_add_ps(acc0[r], acc1[r])) } + t;
            }
        }

        /// # Safety
        /// The CPU must have AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $entry(
            w: &[u8],
            a: &[f32],
            k: usize,
            r0: usize,
            nr: usize,
            out: &mut [f32; 4],
        ) {
            // SAFETY: same features as this fn.
            unsafe {
                match nr {
                    1 => $rows::<1>(w, a, k, r0, out),
                    2 => $rows::<2>(w, a, k, r0, out),
                    3 => $rows::<3>(w, a, k, r0, out),
                    _ => $rows::<4>(w, a, k, r0, out),
                }
            }
        }
    };
}

float_kernel!(f32_avx2, f32_avx2_rows, 4, 0, load_f32);
float_kernel!(f16_avx2, f16_avx2_rows, 2, 1, load_f16);
float_kernel!(bf16_avx2, bf16_avx2_rows, 2, 2, load_bf16);

/// Activation rows and weight rows of one AVX-512 float tile: one activation row, since
/// matmuls of two or more rows take the packed GEMM (`sgemm/mod.rs`); this is the decode kernel.
pub const TILE_R: usize = 1;
pub const TILE_C: usize = 4;

/// `out[c][r]`: weight row `c` against activation row `r0 + r`.
pub type TileOut = [[f32; TILE_R]; TILE_C];

/// Up to `TILE_C` weight rows (`row_bytes` apart in `w`) against `TILE_R` activation rows (from
/// `r0`, `lda` apart in `a`), over their first `kk` values.
pub type FTile = unsafe fn(
    w: &[u8],
    row_bytes: usize,
    nc: usize,
    a: &[f32],
    lda: usize,
    kk: usize,
    r0: usize,
    out: &mut TileOut,
);

// Masked loads of 16 weights as f32 from `p`; lanes outside `mask` read nothing and are zero.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load512_f32(p: *const u8, mask: __mmask16) -> __m512 {
    // SAFETY: the caller guarantees the unmasked lanes are readable.
    unsafe { _mm512_maskz_loadu_ps(mask, p as *const f32) }
}
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
unsafe fn load512_f16(p: *const u8, mask: __mmask16) -> __m512 {
    // SAFETY: as above.
    _mm512_cvtph_ps(unsafe { _mm256_maskz_loadu_epi16(mask, p as *const i16) })
}
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
unsafe fn load512_bf16(p: *const u8, mask: __mmask16) -> __m512 {
    // SAFETY: as above.
    let h = unsafe { _mm256_maskz_loadu_epi16(mask, p as *const i16) };
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
}

macro_rules! float512_kernel {
    ($entry:ident, $tile:ident, $size:expr, $load:ident) => {
        /// `C` weight rows × `R` activation rows; every pair is one 16-lane sum over `k` in
        /// steps of 16 (the tail masked), reduced at the end, whatever `C` and `R` are.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
        unsafe fn $tile<const C: usize, const R: usize>(
            w: &[u8],
            row_bytes: usize,
            a: &[f32],
            lda: usize,
            k: usize,
            r0: usize,
            out: &mut TileOut,
        ) {
            assert!(w.len() >= (C - 1) * row_bytes + k * $size);
            assert!(R == 0 || a.len() >= (r0 + R - 1) * lda + k);
            let mut acc = [[_mm512_setzero_ps(); R]; C];
            let (wp, ap) = (w.as_ptr(), a.as_ptr());
            let mut i = 0;
            while i < k {
                let mask: __mmask16 = if k - i >= 16 {
                    0xffff
                } else {
                    ((1u32 << (k - i)) - 1) as u16
                };
                // SAFETY: the mask keeps every lane below k, inside the asserted lengths.
                unsafe {
                    let wv: [__m512; C] =
                        std::array::from_fn(|c| $load(wp.add(c * row_bytes + i * $size), mask));
                    for r in 0..R {
                        let x = _mm512_maskz_loadu_ps(mask, ap.add((r0 + r) * lda + i));
                        for c in 0..C {
                            acc[c][r] = _mm512_fmadd_ps(x, wv[c], acc[c][r]);
                        }
                    }
                }
                i += 16;
            }
            for c in 0..C {
                for r in 0..R {
                    out[c][r] = _mm512_reduce_add_ps(acc[c][r]);
                }
            }
        }

        /// # Safety
        /// The CPU must have the `Avx512` kernel set's features.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $entry(
            w: &[u8],
            row_bytes: usize,
            nc: usize,
            a: &[f32],
            lda: usize,
            k: usize,
            r0: usize,
            out: &mut TileOut,
        ) {
            // SAFETY: same features as this fn; the tiles check their own bounds.
            unsafe {
                if nc == TILE_C {
                    $tile::<TILE_C, TILE_R>(w, row_bytes, a, lda, k, r0, out);
                    return;
                }
                for c in 0..nc.min(TILE_C) {
                    let mut one: TileOut = [[0.0; TILE_R]; TILE_C];
                    let wc = &w[c * row_bytes..];
                    $tile::<1, TILE_R>(wc, row_bytes, a, lda, k, r0, &mut one);
                    out[c] = one[0];
                }
            }
        }
    };
}

float512_kernel!(f32_avx512, f32_avx512_tile, 4, load512_f32);
float512_kernel!(f16_avx512, f16_avx512_tile, 2, load512_f16);
float512_kernel!(bf16_avx512, bf16_avx512_tile, 2, load512_bf16);

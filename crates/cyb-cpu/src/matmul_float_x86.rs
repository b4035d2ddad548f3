//! AVX2 + FMA + F16C kernels of `matmul_float.rs`.

// Kernels index several parallel arrays (rows, columns, groups) by one loop counter.
#![allow(clippy::needless_range_loop)]

use crate::matmul_q4_x86::hsum;
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

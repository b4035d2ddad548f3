//! x86-64 kernels for the 32-value legacy formats (see `legacy.rs` for the math): AVX2
//! (`maddubs` + `madd`) and AVX-512 VNNI (`vpdpbusd` on 256-bit vectors).
//!
//! Every `pub unsafe fn` here requires the CPU features of its kernel set; `legacy::kernel`
//! hands them out only for a `KernelSet` that `is_available`.

// Kernels index several parallel arrays (rows, columns, groups) by one loop counter.
#![allow(clippy::needless_range_loop)]

use super::x86_base::{hsum, q4_0, q4_1, q5_0, q5_1, q8_0};
use crate::matmul::quant_act::QuantizedRows;
use std::arch::x86_64::*;

// SAFETY (whole file): each `#[target_feature]` fn is only called when its features were
// detected; pointer reads stay inside the slices whose lengths are asserted at the entry.

// Dot products of 32 bytes into eight i32 lanes. `_u`: unsigned weights; `_s`: signed weights,
// made unsigned by moving their sign onto the activations (levels are never -128 there).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot_u_avx2(w: __m256i, a: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1))
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot_s_avx2(w: __m256i, a: __m256i) -> __m256i {
    dot_u_avx2(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w))
}
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn dot_u_vnni(w: __m256i, a: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a)
}
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn dot_s_vnni(w: __m256i, a: __m256i) -> __m256i {
    dot_u_vnni(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w))
}

macro_rules! legacy_kernel {
    ($entry:ident, $tile:ident, $feat:literal, $bb:expr, $unpack:ident, $dot:ident) => {
        /// `C` weight rows × `R` activation rows; `out[c * 4 + r]`.
        #[target_feature(enable = $feat)]
        unsafe fn $tile<const C: usize, const R: usize>(
            w: &[u8],
            row_bytes: usize,
            a: &QuantizedRows,
            r0: usize,
            out: &mut [f32; 16],
        ) {
            let (k, nb) = (a.k, a.k / 32);
            assert!(row_bytes >= nb * $bb && w.len() >= (C - 1) * row_bytes + nb * $bb);
            assert!(a.qs.len() >= (r0 + R) * k);
            assert!(a.d.len() >= (r0 + R) * nb && a.s.len() >= (r0 + R) * nb);
            let mut acc = [[_mm256_setzero_ps(); R]; C];
            let mut corr = [[0f32; R]; C];
            for bi in 0..nb {
                // SAFETY: block bi of weight rows 0..C and of activation rows r0..r0+R lie
                // inside the asserted lengths.
                unsafe {
                    let mut qa = [_mm256_setzero_si256(); R];
                    let mut da = [0f32; R];
                    let mut sa = [0f32; R];
                    for r in 0..R {
                        let row = r0 + r;
                        qa[r] = _mm256_loadu_si256(
                            a.qs.as_ptr().add(row * k + bi * 32) as *const __m256i
                        );
                        da[r] = *a.d.get_unchecked(row * nb + bi);
                        sa[r] = *a.s.get_unchecked(row * nb + bi);
                    }
                    for c in 0..C {
                        let (q, d, off) = $unpack(w.as_ptr().add(c * row_bytes + bi * $bb));
                        for r in 0..R {
                            let dot = _mm256_cvtepi32_ps($dot(q, qa[r]));
                            acc[c][r] = _mm256_fmadd_ps(dot, _mm256_set1_ps(d * da[r]), acc[c][r]);
                            corr[c][r] += off * sa[r];
                        }
                    }
                }
            }
            for c in 0..C {
                for r in 0..R {
                    // SAFETY: same features as this fn.
                    out[c * 4 + r] = unsafe { hsum(acc[c][r]) } + corr[c][r];
                }
            }
        }

        /// # Safety
        /// The CPU must have this kernel set's features.
        #[target_feature(enable = $feat)]
        pub unsafe fn $entry(
            w: &[u8],
            row_bytes: usize,
            nc: usize,
            a: &QuantizedRows,
            r0: usize,
            nr: usize,
            out: &mut [f32; 16],
        ) {
            // SAFETY: same features as this fn; the tiles check their own bounds.
            unsafe {
                match (nc, nr) {
                    (4, 1) => $tile::<4, 1>(w, row_bytes, a, r0, out),
                    (1, 1) => $tile::<1, 1>(w, row_bytes, a, r0, out),
                    (1, 2) => $tile::<1, 2>(w, row_bytes, a, r0, out),
                    (1, 3) => $tile::<1, 3>(w, row_bytes, a, r0, out),
                    (1, _) => $tile::<1, 4>(w, row_bytes, a, r0, out),
                    (2, 1) => $tile::<2, 1>(w, row_bytes, a, r0, out),
                    (2, 2) => $tile::<2, 2>(w, row_bytes, a, r0, out),
                    (2, 3) => $tile::<2, 3>(w, row_bytes, a, r0, out),
                    (2, _) => $tile::<2, 4>(w, row_bytes, a, r0, out),
                    _ => {
                        // Three or four columns with several rows: pairs keep 8 accumulators.
                        let mut part = [0f32; 16];
                        $entry(w, row_bytes, 2, a, r0, nr, out);
                        $entry(&w[2 * row_bytes..], row_bytes, nc - 2, a, r0, nr, &mut part);
                        out[8..].copy_from_slice(&part[..8]);
                    }
                }
            }
        }
    };
}

legacy_kernel!(
    q4_0_avx2,
    q4_0_avx2_tile,
    "avx2,fma,f16c",
    18,
    q4_0,
    dot_u_avx2
);
legacy_kernel!(
    q4_1_avx2,
    q4_1_avx2_tile,
    "avx2,fma,f16c",
    20,
    q4_1,
    dot_u_avx2
);
legacy_kernel!(
    q5_0_avx2,
    q5_0_avx2_tile,
    "avx2,fma,f16c",
    22,
    q5_0,
    dot_u_avx2
);
legacy_kernel!(
    q5_1_avx2,
    q5_1_avx2_tile,
    "avx2,fma,f16c",
    24,
    q5_1,
    dot_u_avx2
);
legacy_kernel!(
    q8_0_avx2,
    q8_0_avx2_tile,
    "avx2,fma,f16c",
    34,
    q8_0,
    dot_s_avx2
);
legacy_kernel!(
    q4_0_vnni,
    q4_0_vnni_tile,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    18,
    q4_0,
    dot_u_vnni
);
legacy_kernel!(
    q4_1_vnni,
    q4_1_vnni_tile,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    20,
    q4_1,
    dot_u_vnni
);
legacy_kernel!(
    q5_0_vnni,
    q5_0_vnni_tile,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    22,
    q5_0,
    dot_u_vnni
);
legacy_kernel!(
    q5_1_vnni,
    q5_1_vnni_tile,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    24,
    q5_1,
    dot_u_vnni
);
legacy_kernel!(
    q8_0_vnni,
    q8_0_vnni_tile,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    34,
    q8_0,
    dot_s_vnni
);

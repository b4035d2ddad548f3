//! x86-64 kernels for the 32-value legacy formats against 16-bit activations (see
//! `q16.rs` for the math): weight levels are widened to i16 and multiplied pairwise with
//! `madd_epi16` (AVX2) or `vpdpwssd` (AVX-512 VNNI, on 256-bit vectors), one i32 sum per block.
//!
//! Every `pub unsafe fn` here requires the CPU features of its kernel set; `q16::kernel`
//! hands them out only for a `KernelSet` that `is_available`.

// Kernels index several parallel arrays (rows, columns, groups) by one loop counter.
#![allow(clippy::needless_range_loop)]

use super::x86_base::{f16_at, hsum, q5_0, q5_1};
use crate::matmul::quant_act::QuantizedRows;
use std::arch::x86_64::*;

// SAFETY (whole file): each `#[target_feature]` fn is only called when its features were
// detected; pointer reads stay inside the slices whose lengths are asserted at the entry.

/// 32 unsigned bytes as two vectors of 16 i16 (values 0..16 and 16..32).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn widen_u8(q: __m256i) -> [__m256i; 2] {
    [
        _mm256_cvtepu8_epi16(_mm256_castsi256_si128(q)),
        _mm256_cvtepu8_epi16(_mm256_extracti128_si256(q, 1)),
    ]
}

/// Sixteen packed nibbles (low nibbles are values 0..16, high ones 16..32) as i16.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn nibbles16(p: *const u8) -> [__m256i; 2] {
    // SAFETY: the caller guarantees 16 readable bytes at p.
    let v = _mm256_cvtepu8_epi16(unsafe { _mm_loadu_si128(p as *const __m128i) });
    [
        _mm256_and_si256(v, _mm256_set1_epi16(0x0f)),
        _mm256_srli_epi16(v, 4),
    ]
}

// Block unpackers: (i16 levels, d, off) with `x = d·q + off`; Q8_0's levels are signed.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q4_0w(p: *const u8) -> ([__m256i; 2], f32, f32) {
    // SAFETY: p points at an 18-byte Q4_0 block.
    unsafe {
        let d = f16_at(p);
        (nibbles16(p.add(2)), d, -8.0 * d)
    }
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q4_1w(p: *const u8) -> ([__m256i; 2], f32, f32) {
    // SAFETY: p points at a 20-byte Q4_1 block.
    unsafe { (nibbles16(p.add(4)), f16_at(p), f16_at(p.add(2))) }
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q5_0w(p: *const u8) -> ([__m256i; 2], f32, f32) {
    // SAFETY: p points at a 22-byte Q5_0 block.
    let (q, d, off) = unsafe { q5_0(p) };
    (widen_u8(q), d, off)
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q5_1w(p: *const u8) -> ([__m256i; 2], f32, f32) {
    // SAFETY: p points at a 24-byte Q5_1 block.
    let (q, d, off) = unsafe { q5_1(p) };
    (widen_u8(q), d, off)
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q8_0w(p: *const u8) -> ([__m256i; 2], f32, f32) {
    // SAFETY: p points at a 34-byte Q8_0 block.
    unsafe {
        let lo = _mm_loadu_si128(p.add(2) as *const __m128i);
        let hi = _mm_loadu_si128(p.add(18) as *const __m128i);
        (
            [_mm256_cvtepi8_epi16(lo), _mm256_cvtepi8_epi16(hi)],
            f16_at(p),
            0.0,
        )
    }
}

// 32 i16 products summed into eight i32 lanes (exact: |w| ≤ 127, |a| ≤ 32767).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_avx2(w: [__m256i; 2], a: [__m256i; 2]) -> __m256i {
    _mm256_add_epi32(_mm256_madd_epi16(w[0], a[0]), _mm256_madd_epi16(w[1], a[1]))
}
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_vnni(w: [__m256i; 2], a: [__m256i; 2]) -> __m256i {
    let s = _mm256_dpwssd_epi32(_mm256_setzero_si256(), w[0], a[0]);
    _mm256_dpwssd_epi32(s, w[1], a[1])
}

macro_rules! legacy16_kernel {
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
            assert!(a.qs16.len() >= (r0 + R) * k);
            assert!(a.d.len() >= (r0 + R) * nb && a.s.len() >= (r0 + R) * nb);
            let mut acc = [[_mm256_setzero_ps(); R]; C];
            let mut corr = [[0f32; R]; C];
            for bi in 0..nb {
                // SAFETY: block bi of weight rows 0..C and of activation rows r0..r0+R lie
                // inside the asserted lengths.
                unsafe {
                    let mut qa = [[_mm256_setzero_si256(); 2]; R];
                    let mut da = [0f32; R];
                    let mut sa = [0f32; R];
                    for r in 0..R {
                        let row = r0 + r;
                        let p = a.qs16.as_ptr().add(row * k + bi * 32);
                        qa[r] = [
                            _mm256_loadu_si256(p as *const __m256i),
                            _mm256_loadu_si256(p.add(16) as *const __m256i),
                        ];
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

legacy16_kernel!(
    q4_0_avx2,
    q4_0_avx2_tile,
    "avx2,fma,f16c",
    18,
    q4_0w,
    dot_avx2
);
legacy16_kernel!(
    q4_1_avx2,
    q4_1_avx2_tile,
    "avx2,fma,f16c",
    20,
    q4_1w,
    dot_avx2
);
legacy16_kernel!(
    q5_0_avx2,
    q5_0_avx2_tile,
    "avx2,fma,f16c",
    22,
    q5_0w,
    dot_avx2
);
legacy16_kernel!(
    q5_1_avx2,
    q5_1_avx2_tile,
    "avx2,fma,f16c",
    24,
    q5_1w,
    dot_avx2
);
legacy16_kernel!(
    q8_0_avx2,
    q8_0_avx2_tile,
    "avx2,fma,f16c",
    34,
    q8_0w,
    dot_avx2
);
legacy16_kernel!(
    q4_0_vnni,
    q4_0_vnni_tile,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    18,
    q4_0w,
    dot_vnni
);
legacy16_kernel!(
    q4_1_vnni,
    q4_1_vnni_tile,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    20,
    q4_1w,
    dot_vnni
);
legacy16_kernel!(
    q5_0_vnni,
    q5_0_vnni_tile,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    22,
    q5_0w,
    dot_vnni
);
legacy16_kernel!(
    q5_1_vnni,
    q5_1_vnni_tile,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    24,
    q5_1w,
    dot_vnni
);
legacy16_kernel!(
    q8_0_vnni,
    q8_0_vnni_tile,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    34,
    q8_0w,
    dot_vnni
);

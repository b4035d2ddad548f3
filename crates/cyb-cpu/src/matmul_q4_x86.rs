//! x86-64 kernels for the 32-value legacy formats (see `matmul_q4.rs` for the math): AVX2
//! (`maddubs` + `madd`) and AVX-512 VNNI (`vpdpbusd` on 256-bit vectors).
//!
//! Every `pub unsafe fn` here requires the CPU features of its kernel set; `matmul_q4::kernel`
//! hands them out only for a `KernelSet` that `is_available`.

// Kernels index several parallel arrays (rows, columns, groups) by one loop counter.
#![allow(clippy::needless_range_loop)]

use crate::quant_act::QuantizedRows;
use std::arch::x86_64::*;

// SAFETY (whole file): each `#[target_feature]` fn is only called when its features were
// detected; pointer reads stay inside the slices whose lengths are asserted at the entry.

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees two readable bytes at p.
    let bits = unsafe { std::ptr::read_unaligned(p as *const u16) };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes at p.
    let v = unsafe { _mm_loadu_si128(p as *const __m128i) };
    let both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0f))
}

/// 0x10 in byte `i` where bit `i` of `qh` is set.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn fifth_bits(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 4 readable bytes at p.
    let qh = unsafe { std::ptr::read_unaligned(p as *const u32) };
    let v = _mm256_set1_epi32(qh as i32);
    let idx = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    let bytes = _mm256_shuffle_epi8(v, idx);
    let bits = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bits), bits);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

// Block unpackers: (levels, d, off) with `x = d·q + off`; Q8_0's levels are signed.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q4_0(p: *const u8) -> (__m256i, f32, f32) {
    // SAFETY: p points at an 18-byte Q4_0 block.
    unsafe {
        let d = f16_at(p);
        (nibbles(p.add(2)), d, -8.0 * d)
    }
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q4_1(p: *const u8) -> (__m256i, f32, f32) {
    // SAFETY: p points at a 20-byte Q4_1 block.
    unsafe { (nibbles(p.add(4)), f16_at(p), f16_at(p.add(2))) }
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) unsafe fn q5_0(p: *const u8) -> (__m256i, f32, f32) {
    // SAFETY: p points at a 22-byte Q5_0 block.
    unsafe {
        let d = f16_at(p);
        let q = _mm256_or_si256(nibbles(p.add(6)), fifth_bits(p.add(2)));
        (q, d, -16.0 * d)
    }
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) unsafe fn q5_1(p: *const u8) -> (__m256i, f32, f32) {
    // SAFETY: p points at a 24-byte Q5_1 block.
    unsafe {
        let q = _mm256_or_si256(nibbles(p.add(8)), fifth_bits(p.add(4)));
        (q, f16_at(p), f16_at(p.add(2)))
    }
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q8_0(p: *const u8) -> (__m256i, f32, f32) {
    // SAFETY: p points at a 34-byte Q8_0 block.
    unsafe {
        let q = _mm256_loadu_si256(p.add(2) as *const __m256i);
        (q, f16_at(p), 0.0)
    }
}

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

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
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

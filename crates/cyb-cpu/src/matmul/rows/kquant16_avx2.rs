//! AVX2 kernels of `q16.rs` for Q4_K and Q6_K against 16-bit activations: levels are
//! unpacked 32 at a time, widened to i16 and multiplied by their group scale there (Q4_K:
//! `15·63`, Q6_K: `63·128`, both fit i16), then `madd_epi16` with the activations. Q4_K's whole
//! super-block stays in i32 (32 products of at most `945·32767` per lane < 2^30); Q6_K's larger
//! products go to f32 every 32 values (4 products per lane < 2^30). Used by both the AVX2 and
//! the AVX-512 kernel sets.

// Kernels index several parallel arrays (rows, columns, groups) by one loop counter.
#![allow(clippy::needless_range_loop)]

use super::x86_base::{f16_in, hsum, q6_k_levels};
use crate::matmul::blocks::scale_min_k4;
use crate::matmul::quant_act::QuantizedRows;
use std::arch::x86_64::*;

/// # Safety
/// `p` must point at 16 readable bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load16(p: *const u8) -> __m128i {
    // SAFETY: per the caller.
    unsafe { _mm_loadu_si128(p as *const __m128i) }
}

/// # Safety
/// `p` must point at 32 readable bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load32(p: *const u8) -> __m256i {
    // SAFETY: per the caller.
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

/// Sixteen i16 activations of row `row` from value `at` of that row.
///
/// # Safety
/// `row · k + at + 16` must be within `a.qs16`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn act(a: &QuantizedRows, at: usize) -> __m256i {
    // SAFETY: per the caller.
    unsafe { load32(a.qs16.as_ptr().add(at) as *const u8) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q4_k_one<const R: usize>(w: &[u8], a: &QuantizedRows, r0: usize, out: &mut [f32; 16], c: usize) {
    let (k, nb) = (a.k, a.k / 256);
    assert!(w.len() >= nb * 144 && a.qs16.len() >= (r0 + R) * k);
    assert!(a.d.len() >= (r0 + R) * nb && a.bsums.len() >= (r0 + R) * k / 16);
    let mask = _mm256_set1_epi16(0x0f);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut corr = [0f32; R];
    for bi in 0..nb {
        let b = &w[bi * 144..(bi + 1) * 144];
        let (d, dmin) = (f16_in(b, 0), f16_in(b, 2));
        let mut sc = [0i16; 8];
        let mut mn = [0i32; 8];
        for j in 0..8 {
            let (s, m) = scale_min_k4(j, &b[4..16]);
            sc[j] = i16::from(s);
            mn[j] = i32::from(m);
        }
        let mut isum = [_mm256_setzero_si256(); R];
        for chunk in 0..4 {
            // SAFETY: bytes 16 + 32·chunk .. +32 lie inside the 144-byte block.
            let (v0, v1) = unsafe {
                let p = b.as_ptr().add(16 + 32 * chunk);
                (
                    _mm256_cvtepu8_epi16(load16(p)),
                    _mm256_cvtepu8_epi16(load16(p.add(16))),
                )
            };
            let (s_lo, s_hi) = (
                _mm256_set1_epi16(sc[2 * chunk]),
                _mm256_set1_epi16(sc[2 * chunk + 1]),
            );
            let lv = [
                _mm256_mullo_epi16(_mm256_and_si256(v0, mask), s_lo),
                _mm256_mullo_epi16(_mm256_and_si256(v1, mask), s_lo),
                _mm256_mullo_epi16(_mm256_srli_epi16(v0, 4), s_hi),
                _mm256_mullo_epi16(_mm256_srli_epi16(v1, 4), s_hi),
            ];
            for r in 0..R {
                let at = (r0 + r) * k + bi * 256 + 64 * chunk;
                for (i, &l) in lv.iter().enumerate() {
                    // SAFETY: at + 64 <= (r0 + R) · k, asserted above.
                    let qa = unsafe { act(a, at + 16 * i) };
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(l, qa));
                }
            }
        }
        for r in 0..R {
            let row = r0 + r;
            let bs = &a.bsums[row * k / 16 + bi * 16..][..16];
            let msum: i32 = (0..8).map(|j| mn[j] * (bs[2 * j] + bs[2 * j + 1])).sum();
            let da = a.d[row * nb + bi];
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(d * da), acc[r]);
            corr[r] += dmin * da * msum as f32;
        }
    }
    for r in 0..R {
        // SAFETY: same features as this fn.
        out[c * 4 + r] = unsafe { hsum(acc[r]) } - corr[r];
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q6_k_one<const R: usize>(w: &[u8], a: &QuantizedRows, r0: usize, out: &mut [f32; 16], c: usize) {
    let (k, nb) = (a.k, a.k / 256);
    assert!(w.len() >= nb * 210 && a.qs16.len() >= (r0 + R) * k);
    assert!(a.d.len() >= (r0 + R) * nb && a.bsums.len() >= (r0 + R) * k / 16);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut corr = [0f32; R];
    for bi in 0..nb {
        let b = &w[bi * 210..(bi + 1) * 210];
        let d = f16_in(b, 208);
        let sc: [i32; 16] = std::array::from_fn(|g| i32::from(b[192 + g] as i8));
        let mut fsum = [_mm256_setzero_ps(); R];
        for h in 0..2 {
            // SAFETY: `b` is a whole 210-byte block and h < 2.
            let levels = unsafe { q6_k_levels(b.as_ptr(), h) };
            for (s, &q) in levels.iter().enumerate() {
                let g = 8 * h + 2 * s;
                let lv = [
                    _mm256_mullo_epi16(
                        _mm256_cvtepu8_epi16(_mm256_castsi256_si128(q)),
                        _mm256_set1_epi16(sc[g] as i16),
                    ),
                    _mm256_mullo_epi16(
                        _mm256_cvtepu8_epi16(_mm256_extracti128_si256(q, 1)),
                        _mm256_set1_epi16(sc[g + 1] as i16),
                    ),
                ];
                for r in 0..R {
                    let at = (r0 + r) * k + bi * 256 + 128 * h + 32 * s;
                    // SAFETY: at + 32 <= (r0 + R) · k, asserted above.
                    let t = unsafe {
                        _mm256_add_epi32(
                            _mm256_madd_epi16(lv[0], act(a, at)),
                            _mm256_madd_epi16(lv[1], act(a, at + 16)),
                        )
                    };
                    fsum[r] = _mm256_add_ps(fsum[r], _mm256_cvtepi32_ps(t));
                }
            }
        }
        for r in 0..R {
            let row = r0 + r;
            let bs = &a.bsums[row * k / 16 + bi * 16..][..16];
            let msum: i32 = (0..16).map(|g| sc[g] * bs[g]).sum();
            let da = a.d[row * nb + bi];
            acc[r] = _mm256_fmadd_ps(fsum[r], _mm256_set1_ps(d * da), acc[r]);
            corr[r] += d * 32.0 * da * msum as f32;
        }
    }
    for r in 0..R {
        // SAFETY: same features as this fn.
        out[c * 4 + r] = unsafe { hsum(acc[r]) } - corr[r];
    }
}

macro_rules! entry {
    ($name:ident, $one:ident) => {
        /// # Safety
        /// The CPU must have AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name(
            w: &[u8],
            row_bytes: usize,
            nc: usize,
            a: &QuantizedRows,
            r0: usize,
            nr: usize,
            out: &mut [f32; 16],
        ) {
            for c in 0..nc {
                let wc = &w[c * row_bytes..(c + 1) * row_bytes];
                match nr {
                    1 => $one::<1>(wc, a, r0, out, c),
                    2 => $one::<2>(wc, a, r0, out, c),
                    3 => $one::<3>(wc, a, r0, out, c),
                    _ => $one::<4>(wc, a, r0, out, c),
                }
            }
        }
    };
}
entry!(q4_k_avx2, q4_k_one);
entry!(q6_k_avx2, q6_k_one);

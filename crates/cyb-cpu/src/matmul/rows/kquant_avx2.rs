//! AVX2 kernels of `kquant.rs` for Q4_K and Q6_K (the pair in Q4_K_M files): levels are
//! unpacked in registers 32 at a time, multiplied with the 8-bit activations by `maddubs`, and
//! scaled per 16-value group by `madd` with the group scales, all in i32 until the super-block
//! ends. Used by both the AVX2 and the AVX-512 kernel sets. The other formats (Q2_K, Q3_K, Q5_K,
//! TQ1_0, TQ2_0) unpack on the scalar side and share the same dot products (AVX2 set; AVX-512
//! runs them on the repacked GEMM).

// Kernels index several parallel arrays (rows, columns, groups) by one loop counter.
#![allow(clippy::needless_range_loop)]

use super::x86_base::{f16_in, hsum, q6_k_levels};
use crate::matmul::blocks::{scale_min_k4, unpack_kquant};
use crate::matmul::quant_act::QuantizedRows;
use cyb_tensor::DType;
use std::arch::x86_64::*;

/// `Σ (u8 levels · i8 activations)` of 32 bytes, each 16-byte half scaled by its group scale.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn scaled_dot(q: __m256i, qa: __m256i, scales: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(q, qa), scales)
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn group_scales(lo: i32, hi: i32) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi as i16), _mm_set1_epi16(lo as i16))
}

/// # Safety
/// `p` must point at 32 readable bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load(p: *const u8) -> __m256i {
    // SAFETY: per the caller.
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q4_k_one<const R: usize>(w: &[u8], a: &QuantizedRows, r0: usize, out: &mut [f32; 16], c: usize) {
    let (k, nb) = (a.k, a.k / 256);
    assert!(w.len() >= nb * 144 && a.qs.len() >= (r0 + R) * k);
    assert!(a.d.len() >= (r0 + R) * nb && a.bsums.len() >= (r0 + R) * k / 16);
    let mask = _mm256_set1_epi8(0x0f);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut corr = [0f32; R];
    for bi in 0..nb {
        let b = &w[bi * 144..(bi + 1) * 144];
        let (d, dmin) = (f16_in(b, 0), f16_in(b, 2));
        let mut sc = [0i32; 8];
        let mut mn = [0i32; 8];
        for j in 0..8 {
            let (s, m) = scale_min_k4(j, &b[4..16]);
            sc[j] = i32::from(s);
            mn[j] = i32::from(m);
        }
        let mut isum = [_mm256_setzero_si256(); R];
        for chunk in 0..4 {
            // SAFETY: bytes 16 + 32·chunk .. +32 lie inside the 144-byte block.
            let raw = unsafe { load(b.as_ptr().add(16 + 32 * chunk)) };
            let lo = _mm256_and_si256(raw, mask);
            let hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
            let (s_lo, s_hi) = (
                group_scales(sc[2 * chunk], sc[2 * chunk]),
                group_scales(sc[2 * chunk + 1], sc[2 * chunk + 1]),
            );
            for r in 0..R {
                let at = (r0 + r) * k + bi * 256 + 64 * chunk;
                // SAFETY: at + 64 <= (r0 + R) · k, asserted above.
                let (qa_lo, qa_hi) = unsafe {
                    (
                        load(a.qs.as_ptr().add(at) as *const u8),
                        load(a.qs.as_ptr().add(at + 32) as *const u8),
                    )
                };
                isum[r] = _mm256_add_epi32(isum[r], scaled_dot(lo, qa_lo, s_lo));
                isum[r] = _mm256_add_epi32(isum[r], scaled_dot(hi, qa_hi, s_hi));
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
    assert!(w.len() >= nb * 210 && a.qs.len() >= (r0 + R) * k);
    assert!(a.d.len() >= (r0 + R) * nb && a.bsums.len() >= (r0 + R) * k / 16);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut corr = [0f32; R];
    for bi in 0..nb {
        let b = &w[bi * 210..(bi + 1) * 210];
        let d = f16_in(b, 208);
        let sc: [i32; 16] = std::array::from_fn(|g| i32::from(b[192 + g] as i8));
        let mut isum = [_mm256_setzero_si256(); R];
        for h in 0..2 {
            // SAFETY: `b` is a whole 210-byte block and h < 2.
            let levels = unsafe { q6_k_levels(b.as_ptr(), h) };
            for (s, &q) in levels.iter().enumerate() {
                let g = 8 * h + 2 * s;
                let scales = group_scales(sc[g], sc[g + 1]);
                for r in 0..R {
                    let at = (r0 + r) * k + bi * 256 + 128 * h + 32 * s;
                    // SAFETY: at + 32 <= (r0 + R) · k, asserted above.
                    let qa = unsafe { load(a.qs.as_ptr().add(at) as *const u8) };
                    isum[r] = _mm256_add_epi32(isum[r], scaled_dot(q, qa, scales));
                }
            }
        }
        for r in 0..R {
            let row = r0 + r;
            let bs = &a.bsums[row * k / 16 + bi * 16..][..16];
            let msum: i32 = (0..16).map(|g| sc[g] * bs[g]).sum();
            let da = a.d[row * nb + bi];
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(d * da), acc[r]);
            corr[r] += d * 32.0 * da * msum as f32;
        }
    }
    for r in 0..R {
        // SAFETY: same features as this fn.
        out[c * 4 + r] = unsafe { hsum(acc[r]) } - corr[r];
    }
}

/// Any format `blocks::unpack_kquant` reads (Q2_K, Q3_K, Q5_K, TQ1_0, TQ2_0 use it): the levels
/// unpacked on the scalar side, the 16-value group dot products and scaling in AVX2; the same
/// integer sums as the portable kernel, so the result only differs in float rounding order.
#[target_feature(enable = "avx2,fma,f16c")]
fn unpacked_one<const R: usize>(
    dtype: DType,
    w: &[u8],
    a: &QuantizedRows,
    r0: usize,
    out: &mut [f32; 16],
    c: usize,
) {
    let (k, nb, bb) = (a.k, a.k / 256, dtype.block_bytes());
    assert!(w.len() >= nb * bb && a.qs.len() >= (r0 + R) * k);
    assert!(a.d.len() >= (r0 + R) * nb && a.bsums.len() >= (r0 + R) * k / 16);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut corr = [0f32; R];
    for bi in 0..nb {
        let u = unpack_kquant(dtype, &w[bi * bb..(bi + 1) * bb]);
        let mut isum = [_mm256_setzero_si256(); R];
        for p in 0..8 {
            // SAFETY: levels 32·p .. +32 lie inside the 256 unpacked ones.
            let q = unsafe { load(u.q.as_ptr().add(32 * p)) };
            let scales = group_scales(u.sc[2 * p], u.sc[2 * p + 1]);
            for r in 0..R {
                let at = (r0 + r) * k + bi * 256 + 32 * p;
                // SAFETY: at + 32 <= (r0 + R) · k, asserted above.
                let qa = unsafe { load(a.qs.as_ptr().add(at) as *const u8) };
                isum[r] = _mm256_add_epi32(isum[r], scaled_dot(q, qa, scales));
            }
        }
        for r in 0..R {
            let row = r0 + r;
            let bs = &a.bsums[row * k / 16 + bi * 16..][..16];
            let msum: i32 = (0..16).map(|g| u.mn[g] * bs[g]).sum();
            let da = a.d[row * nb + bi];
            acc[r] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(isum[r]),
                _mm256_set1_ps(u.d * da),
                acc[r],
            );
            corr[r] += u.dmin * da * msum as f32;
        }
    }
    for r in 0..R {
        // SAFETY: same features as this fn.
        out[c * 4 + r] = unsafe { hsum(acc[r]) } - corr[r];
    }
}

macro_rules! entry {
    ($name:ident, $one:ident $(, $dt:expr)?) => {
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
                    1 => $one::<1>($($dt,)? wc, a, r0, out, c),
                    2 => $one::<2>($($dt,)? wc, a, r0, out, c),
                    3 => $one::<3>($($dt,)? wc, a, r0, out, c),
                    _ => $one::<4>($($dt,)? wc, a, r0, out, c),
                }
            }
        }
    };
}
entry!(q4_k_avx2, q4_k_one);
entry!(q6_k_avx2, q6_k_one);
entry!(q2_k_avx2, unpacked_one, DType::Q2_K);
entry!(q3_k_avx2, unpacked_one, DType::Q3_K);
entry!(q5_k_avx2, unpacked_one, DType::Q5_K);
entry!(tq1_0_avx2, unpacked_one, DType::TQ1_0);
entry!(tq2_0_avx2, unpacked_one, DType::TQ2_0);

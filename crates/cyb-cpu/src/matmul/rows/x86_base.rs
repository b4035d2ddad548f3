//! What the x86-64 per-row kernels share (`legacy_x86.rs`, `q16_x86.rs`, `kquant_avx2.rs`,
//! `kquant16_avx2.rs`, `float_x86.rs`): the legacy blocks unpacked into 32 levels in a 256-bit
//! register (nibbles, fifth bits, the f16 scale), f16 scalars read with F16C, and the horizontal
//! sum of eight lanes.
//!
//! A leaf: it uses nothing of this crate.

use std::arch::x86_64::*;

// SAFETY (whole file): each `#[target_feature]` fn is only called when its features were
// detected; pointer reads stay inside what each caller guarantees.

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
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
pub(super) unsafe fn q4_0(p: *const u8) -> (__m256i, f32, f32) {
    // SAFETY: p points at an 18-byte Q4_0 block.
    unsafe {
        let d = f16_at(p);
        (nibbles(p.add(2)), d, -8.0 * d)
    }
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q4_1(p: *const u8) -> (__m256i, f32, f32) {
    // SAFETY: p points at a 20-byte Q4_1 block.
    unsafe { (nibbles(p.add(4)), f16_at(p), f16_at(p.add(2))) }
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q5_0(p: *const u8) -> (__m256i, f32, f32) {
    // SAFETY: p points at a 22-byte Q5_0 block.
    unsafe {
        let d = f16_at(p);
        let q = _mm256_or_si256(nibbles(p.add(6)), fifth_bits(p.add(2)));
        (q, d, -16.0 * d)
    }
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q5_1(p: *const u8) -> (__m256i, f32, f32) {
    // SAFETY: p points at a 24-byte Q5_1 block.
    unsafe {
        let q = _mm256_or_si256(nibbles(p.add(8)), fifth_bits(p.add(4)));
        (q, f16_at(p), f16_at(p.add(2)))
    }
}
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q8_0(p: *const u8) -> (__m256i, f32, f32) {
    // SAFETY: p points at a 34-byte Q8_0 block.
    unsafe {
        let q = _mm256_loadu_si256(p.add(2) as *const __m256i);
        (q, f16_at(p), 0.0)
    }
}

/// The f16 at byte `at` of `b` (F16C).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn f16_in(b: &[u8], at: usize) -> f32 {
    let bits = u16::from_le_bytes([b[at], b[at + 1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

/// The 6-bit levels (0..=63) of half `h` of a Q6_K super-block: four vectors of 32 levels, each
/// the low or the high nibble of `ql` with two bits of `qh` above it.
///
/// # Safety
/// `b` must point at a whole 210-byte Q6_K block, and `h` must be 0 or 1.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q6_k_levels(b: *const u8, h: usize) -> [__m256i; 4] {
    let (m4, m2) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x03));
    // SAFETY: ql (0..128) and qh (128..192) reads stay inside the block, per the caller.
    let (ql0, ql1, qh) = unsafe {
        (
            _mm256_loadu_si256(b.add(64 * h) as *const __m256i),
            _mm256_loadu_si256(b.add(64 * h + 32) as *const __m256i),
            _mm256_loadu_si256(b.add(128 + 32 * h) as *const __m256i),
        )
    };
    let high = |v: __m256i| _mm256_slli_epi16(_mm256_and_si256(v, m2), 4);
    [
        _mm256_or_si256(_mm256_and_si256(ql0, m4), high(qh)),
        _mm256_or_si256(_mm256_and_si256(ql1, m4), high(_mm256_srli_epi16(qh, 2))),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
            high(_mm256_srli_epi16(qh, 4)),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
            high(_mm256_srli_epi16(qh, 6)),
        ),
    ]
}

//! AVX2 kernels of the repacked GEMM (`mod.rs`, layouts in `repack.rs`): one 16-row weight
//! group against `R` activation rows, as two halves of eight rows (the 32-byte half `h` of each
//! 64-byte weight vector holds four levels of rows `8h..8h + 8`). AVX2 has no `vpdpbusd`:
//! `maddubs` multiplies the unsigned weight levels by four broadcast signed activation bytes
//! into i16 pairs, which stay exact while summed over one scale unit (the bound is given at
//! each sum), and one `madd` widens them to an i32 per row. From there the steps are those of
//! the AVX-512 kernels (`avx512.rs`): exact i32 sums per unit, then the float steps per unit
//! and row, so a row's result never depends on `R`, tiling or threads.
//!
//! Formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K (the others keep the per-row kernels).
//! Where a format's levels reach 255 (Q8_0, stored with zero point 128) they are split into
//! nibbles, since `maddubs` saturates above 32767.

// Kernels index several parallel arrays (rows, units) by one loop counter.
#![allow(clippy::needless_range_loop)]

use super::act_quads::ActQuads;
use super::avx512_base::{check_act, legacy_unit, planes, GroupKernel, LegacyUnit, Out, Planes};
use super::avx512_base::{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use crate::matmul::quant_act::ActPrecision;
use cyb_tensor::DType;
use std::arch::x86_64::*;
use std::ops::Range;

// SAFETY (whole file): every `#[target_feature]` fn runs only when `KernelSet::Avx2` is
// available; pointer reads stay inside the slices whose lengths each kernel asserts first.

/// Most activation rows per call: the levels unpacked from one weight vector serve this many
/// rows (4 and 2 measured within noise of each other for prefill on a Zen 3).
pub const ROWS: usize = 4;

/// Four activation bytes broadcast to every lane.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn quad(p: *const i8) -> __m256i {
    // SAFETY: the caller guarantees four readable bytes at p.
    _mm256_set1_epi32(unsafe { std::ptr::read_unaligned(p as *const i32) })
}

#[target_feature(enable = "avx2")]
#[inline]
unsafe fn load(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 32 readable bytes at p.
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

/// Eight f16 scales at p as f32 lanes.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn scales_f16(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 16 readable bytes at p.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p as *const __m128i) })
}

/// Eight unsigned (`SIGNED == false`) or signed bytes at p as f32 lanes.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn scales_u8<const SIGNED: bool>(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 8 readable bytes at p.
    let v = unsafe { _mm_loadl_epi64(p as *const __m128i) };
    _mm256_cvtepi32_ps(if SIGNED {
        _mm256_cvtepi8_epi32(v)
    } else {
        _mm256_cvtepu8_epi32(v)
    })
}

/// Adds the i16 pair sums of `w` against the quad at value offset `off` (split: the `hi`
/// plane's to `acc[1]`). One `maddubs` lane is at most 2·|w|·128.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn dot16<const SPLIT: bool>(acc: &mut [__m256i; 2], w: __m256i, p: &Planes, off: usize) {
    // SAFETY: the caller guarantees the quad lies inside both planes.
    unsafe {
        acc[0] = _mm256_add_epi16(acc[0], _mm256_maddubs_epi16(w, quad(p.lo.add(off))));
        if SPLIT {
            acc[1] = _mm256_add_epi16(acc[1], _mm256_maddubs_epi16(w, quad(p.hi.add(off))));
        }
    }
}

/// One i32 per row from the i16 pair sums: `lo + 256·hi` (exact: every caller's sums stay
/// below 2^31).
#[target_feature(enable = "avx2")]
#[inline]
fn widen<const SPLIT: bool>(acc: [__m256i; 2]) -> __m256i {
    let lo = _mm256_madd_epi16(acc[0], _mm256_set1_epi16(1));
    if SPLIT {
        _mm256_add_epi32(lo, _mm256_madd_epi16(acc[1], _mm256_set1_epi16(256)))
    } else {
        lo
    }
}

/// Low and high nibbles of each byte.
#[target_feature(enable = "avx2")]
#[inline]
fn nibbles(raw: __m256i) -> (__m256i, __m256i) {
    let m4 = _mm256_set1_epi8(0x0f);
    (
        _mm256_and_si256(raw, m4),
        _mm256_and_si256(_mm256_srli_epi16::<4>(raw), m4),
    )
}

/// The halves of eight rows (0, 1) the passes of a kernel take, as [start, end) pairs: for several activation rows one
/// half per pass, so that only its R float sums stay live next to the integer ones (both halves
/// at once spilled registers with R = 4 and 16-bit activations: prefill 1.3× slower); for one
/// row (decode, bound by memory) both in one pass, which reads each weight vector once.
fn halves<const R: usize>() -> &'static [(usize, usize)] {
    if R == 1 {
        &[(0, 2)]
    } else {
        &[(0, 1), (1, 2)]
    }
}

/// Zero accumulators for a span from the first unit, else the partial sums left in `out`.
#[target_feature(enable = "avx2")]
#[inline]
fn start_acc<const R: usize>(out: &Out, first: usize) -> [[__m256; 2]; R] {
    std::array::from_fn(|r| {
        std::array::from_fn(|h| {
            if first == 0 {
                _mm256_setzero_ps()
            } else {
                // SAFETY: out[r] holds 16 floats.
                unsafe { _mm256_loadu_ps(out[r].as_ptr().add(8 * h)) }
            }
        })
    })
}

/// Stores both halves of each row's results.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn store<const R: usize>(acc: &[[__m256; 2]; R], out: &mut Out) {
    for r in 0..R {
        for h in 0..2 {
            // SAFETY: out[r] holds 16 floats.
            unsafe { _mm256_storeu_ps(out[r].as_mut_ptr().add(8 * h), acc[r][h]) };
        }
    }
}

/// Q4_0 (zero point 8), Q8_0 (zero point 128, levels taken as two nibbles), Q5_0 (zero point
/// 16) and Q4_1, Q5_1 (`x = d·q + m`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn legacy<const FMT: u8, const R: usize, const SPLIT: bool>(
    g: &[u8],
    a: &ActQuads,
    r0: usize,
    out: &mut Out,
    span: Range<usize>,
) {
    let nb = a.k / 32;
    let LegacyUnit {
        bytes: ub,
        levels,
        zero_point,
        five,
        with_min,
    } = legacy_unit(FMT);
    let bit4 = _mm256_set1_epi8(0x10);
    assert!(span.end <= nb && g.len() >= span.len() * ub && a.block == 32);
    check_act::<R, SPLIT>(a, r0);
    let p: [Planes; R] = std::array::from_fn(|r| planes::<SPLIT>(a, r0 + r));
    let mut acc = start_acc::<R>(out, span.start);
    for &(h0, h1) in halves::<R>() {
        for b in span.clone() {
            // SAFETY: unit b lies inside g, and values b·32 .. b·32 + 32 inside each row (asserted).
            unsafe {
                let u = g.as_ptr().add((b - span.start) * ub);
                for h in h0..h1 {
                    // Eight products of nibbles (≤ 15) per i16 lane: at most 8·3840 = 30720. Five-bit
                    // levels put their second four products in `high` (at most 4·7936 = 31744 each).
                    let mut isum = [[_mm256_setzero_si256(); 2]; R];
                    let mut high = [[_mm256_setzero_si256(); 2]; R];
                    if FMT == Q8_0 {
                        for v in 0..8 {
                            let (lo, hi) = nibbles(load(u.add(levels + 64 * v + 32 * h)));
                            for r in 0..R {
                                dot16::<SPLIT>(&mut isum[r], lo, &p[r], b * 32 + 4 * v);
                                dot16::<SPLIT>(&mut high[r], hi, &p[r], b * 32 + 4 * v);
                            }
                        }
                    } else {
                        let fifth = if five {
                            load(u.add(levels + 256 + 32 * h))
                        } else {
                            _mm256_setzero_si256()
                        };
                        for v in 0..4 {
                            let (mut lo, mut hi) = nibbles(load(u.add(levels + 64 * v + 32 * h)));
                            if five {
                                // Bit v (levels 4v + i) and bit v + 4 (levels 16 + 4v + i) to bit
                                // 4; 16-bit shifts of at most 4 keep bit 4 within its byte.
                                let up = _mm256_sll_epi16(fifth, _mm_cvtsi32_si128(4 - v as i32));
                                let down = _mm256_srl_epi16(fifth, _mm_cvtsi32_si128(v as i32));
                                lo = _mm256_or_si256(lo, _mm256_and_si256(up, bit4));
                                hi = _mm256_or_si256(hi, _mm256_and_si256(down, bit4));
                            }
                            for r in 0..R {
                                let acc = if five && v >= 2 {
                                    &mut high[r]
                                } else {
                                    &mut isum[r]
                                };
                                dot16::<SPLIT>(acc, lo, &p[r], b * 32 + 4 * v);
                                dot16::<SPLIT>(acc, hi, &p[r], b * 32 + 16 + 4 * v);
                            }
                        }
                    }
                    let dw = scales_f16(u.add(16 * h));
                    let mins = if with_min {
                        scales_f16(u.add(32 + 16 * h))
                    } else {
                        _mm256_setzero_ps()
                    };
                    for r in 0..R {
                        let mut s = widen::<SPLIT>(isum[r]);
                        if FMT == Q8_0 {
                            s = _mm256_add_epi32(
                                s,
                                _mm256_slli_epi32::<4>(widen::<SPLIT>(high[r])),
                            );
                        } else if five {
                            s = _mm256_add_epi32(s, widen::<SPLIT>(high[r]));
                        }
                        let bs = *a.sum32.get_unchecked((r0 + r) * nb + b);
                        if zero_point != 0 {
                            s = _mm256_add_epi32(s, _mm256_set1_epi32(-zero_point * bs));
                        }
                        let da = *a.d.get_unchecked((r0 + r) * nb + b);
                        let s = _mm256_cvtepi32_ps(s);
                        acc[r][h] =
                            _mm256_fmadd_ps(s, _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[r][h]);
                        if with_min {
                            let sa = _mm256_set1_ps(da * bs as f32);
                            acc[r][h] = _mm256_fmadd_ps(mins, sa, acc[r][h]);
                        }
                    }
                }
            }
        }
    }
    // SAFETY: same features as this fn.
    unsafe { store(&acc, out) };
}

/// Q4_K: `x = d·sc_j·q - dmin·m_j` per 32-value sub-block `j`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k<const R: usize, const SPLIT: bool>(
    g: &[u8],
    a: &ActQuads,
    r0: usize,
    out: &mut Out,
    span: Range<usize>,
) {
    let (k, nsb) = (a.k, a.k / 256);
    assert!(span.end <= nsb && g.len() >= span.len() * 2368 && a.block == 256);
    check_act::<R, SPLIT>(a, r0);
    let p: [Planes; R] = std::array::from_fn(|r| planes::<SPLIT>(a, r0 + r));
    let mut acc = start_acc::<R>(out, span.start);
    for &(h0, h1) in halves::<R>() {
        for sb in span.clone() {
            // SAFETY: super-block sb lies inside g, and its 256 values inside each row (asserted).
            unsafe {
                let u = g.as_ptr().add((sb - span.start) * 2368);
                for h in h0..h1 {
                    let mut scaled = [_mm256_setzero_ps(); R];
                    let mut mins = [_mm256_setzero_ps(); R];
                    for j in 0..8 {
                        // Eight products of nibbles per i16 lane: at most 30720.
                        let mut isum = [[_mm256_setzero_si256(); 2]; R];
                        for q in 0..4 {
                            let (lo, hi) = nibbles(load(u.add(320 + 256 * j + 64 * q + 32 * h)));
                            let off = sb * 256 + 32 * j + 8 * q;
                            for r in 0..R {
                                dot16::<SPLIT>(&mut isum[r], lo, &p[r], off);
                                dot16::<SPLIT>(&mut isum[r], hi, &p[r], off + 4);
                            }
                        }
                        let sc = scales_u8::<false>(u.add(64 + 16 * j + 8 * h));
                        let mn = scales_u8::<false>(u.add(192 + 16 * j + 8 * h));
                        for r in 0..R {
                            let s = _mm256_cvtepi32_ps(widen::<SPLIT>(isum[r]));
                            scaled[r] = _mm256_fmadd_ps(s, sc, scaled[r]);
                            let bs = *a.sum32.get_unchecked((r0 + r) * k / 32 + sb * 8 + j) as f32;
                            mins[r] = _mm256_fmadd_ps(mn, _mm256_set1_ps(bs), mins[r]);
                        }
                    }
                    let (d, dmin) = (scales_f16(u.add(16 * h)), scales_f16(u.add(32 + 16 * h)));
                    for r in 0..R {
                        let da = _mm256_set1_ps(*a.d.get_unchecked((r0 + r) * nsb + sb));
                        let v = _mm256_fmsub_ps(d, scaled[r], _mm256_mul_ps(dmin, mins[r]));
                        acc[r][h] = _mm256_fmadd_ps(v, da, acc[r][h]);
                    }
                }
            }
        }
    }
    // SAFETY: same features as this fn.
    unsafe { store(&acc, out) };
}

/// Q6_K: `x = d·sc_g·(q - 32)` per 16-value group `g`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k<const R: usize, const SPLIT: bool>(
    g: &[u8],
    a: &ActQuads,
    r0: usize,
    out: &mut Out,
    span: Range<usize>,
) {
    let (k, nsb) = (a.k, a.k / 256);
    assert!(span.end <= nsb && g.len() >= span.len() * 3360 && a.block == 256);
    check_act::<R, SPLIT>(a, r0);
    let m4 = _mm256_set1_epi8(0x0f);
    let m30 = _mm256_set1_epi8(0x30);
    let p: [Planes; R] = std::array::from_fn(|r| planes::<SPLIT>(a, r0 + r));
    let mut acc = start_acc::<R>(out, span.start);
    for &(h0, h1) in halves::<R>() {
        for sb in span.clone() {
            // SAFETY: super-block sb lies inside g, and its 256 values inside each row (asserted).
            unsafe {
                let u = g.as_ptr().add((sb - span.start) * 3360);
                for h in h0..h1 {
                    let mut scaled = [_mm256_setzero_ps(); R];
                    for grp in 0..16 {
                        let n0 = load(u.add(288 + 192 * grp + 32 * h));
                        let n1 = load(u.add(352 + 192 * grp + 32 * h));
                        let top = load(u.add(416 + 192 * grp + 32 * h));
                        let w = [
                            _mm256_or_si256(
                                _mm256_and_si256(n0, m4),
                                _mm256_and_si256(_mm256_slli_epi16::<4>(top), m30),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16::<4>(n0), m4),
                                _mm256_and_si256(_mm256_slli_epi16::<2>(top), m30),
                            ),
                            _mm256_or_si256(_mm256_and_si256(n1, m4), _mm256_and_si256(top, m30)),
                            _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16::<4>(n1), m4),
                                _mm256_and_si256(_mm256_srli_epi16::<2>(top), m30),
                            ),
                        ];
                        let sc = scales_u8::<true>(u.add(32 + 16 * grp + 8 * h));
                        let off = sb * 256 + 16 * grp;
                        for r in 0..R {
                            let s = *a.sum16.get_unchecked((r0 + r) * k / 16 + sb * 16 + grp);
                            // Levels ≤ 63: two products per i16 lane, at most 2·16128 = 32256.
                            let mut pair = [[_mm256_setzero_si256(); 2]; 2];
                            for q in 0..4 {
                                dot16::<SPLIT>(&mut pair[q / 2], w[q], &p[r], off + 4 * q);
                            }
                            let i =
                                _mm256_add_epi32(widen::<SPLIT>(pair[0]), widen::<SPLIT>(pair[1]));
                            let i = _mm256_add_epi32(i, _mm256_set1_epi32(-32 * s));
                            scaled[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), sc, scaled[r]);
                        }
                    }
                    let d = scales_f16(u.add(16 * h));
                    for r in 0..R {
                        let da = _mm256_set1_ps(*a.d.get_unchecked((r0 + r) * nsb + sb));
                        acc[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(scaled[r], d), da, acc[r][h]);
                    }
                }
            }
        }
    }
    // SAFETY: same features as this fn.
    unsafe { store(&acc, out) };
}

macro_rules! entry {
    ($name:ident, $kern:ident $(, $fmt:tt)?) => {
        /// # Safety
        /// The CPU must have the `Avx2` kernel set's features.
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $name(g: &[u8], a: &ActQuads, r0: usize, nr: usize, span: Range<usize>, out: &mut Out) {
            // SAFETY: same features as this fn; the kernels check their bounds.
            unsafe {
                match (a.split, nr) {
                    (false, 1) => $kern::<$($fmt,)? 1, false>(g, a, r0, out, span),
                    (false, 2) => $kern::<$($fmt,)? 2, false>(g, a, r0, out, span),
                    (false, 3) => $kern::<$($fmt,)? 3, false>(g, a, r0, out, span),
                    (false, 4) => $kern::<$($fmt,)? 4, false>(g, a, r0, out, span),
                    (true, 1) => $kern::<$($fmt,)? 1, true>(g, a, r0, out, span),
                    (true, 2) => $kern::<$($fmt,)? 2, true>(g, a, r0, out, span),
                    (true, 3) => $kern::<$($fmt,)? 3, true>(g, a, r0, out, span),
                    (true, 4) => $kern::<$($fmt,)? 4, true>(g, a, r0, out, span),
                    _ => unreachable!("at most {ROWS} rows"),
                }
            }
        }
    };
}
entry!(q4_0_group, legacy, Q4_0);
entry!(q8_0_group, legacy, Q8_0);
entry!(q4_1_group, legacy, Q4_1);
entry!(q5_0_group, legacy, Q5_0);
entry!(q5_1_group, legacy, Q5_1);
entry!(q4_k_group, q4_k);
entry!(q6_k_group, q6_k);

/// Whether a matmul of `m` activation rows is better left to the per-row kernels
/// (`rows/q16.rs`): Q8_0 against 16-bit activations needs four `maddubs` per weight vector and
/// row here (two nibbles, two planes), where the per-row kernel's `madd_epi16` takes the bytes
/// as they are; with one row the repacked layout's single stream still wins (1B Q8_0 decode 6.9
/// → 8.8 tokens/s, prefill 30 → 22 with the repacked kernel on an AVX2-only Zen 3).
pub(crate) fn rows_first(dtype: DType, act: ActPrecision, m: usize) -> bool {
    dtype == DType::Q8_0 && act == ActPrecision::Q16 && m > 1
}

/// The AVX2 group kernel for `dtype`, if there is one.
pub(crate) fn kernel(dtype: DType) -> Option<GroupKernel> {
    match dtype {
        DType::Q4_0 => Some(q4_0_group),
        DType::Q8_0 => Some(q8_0_group),
        DType::Q4_1 => Some(q4_1_group),
        DType::Q5_0 => Some(q5_0_group),
        DType::Q5_1 => Some(q5_1_group),
        DType::Q4_K => Some(q4_k_group),
        DType::Q6_K => Some(q6_k_group),
        _ => None,
    }
}

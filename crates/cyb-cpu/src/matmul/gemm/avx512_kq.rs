//! AVX-512 VNNI kernels of the repacked GEMM for Q2_K, Q3_K and the ternary formats (layouts in
//! `repack.rs`), built like `avx512.rs`'s Q4_K and Q6_K: levels unpacked to bytes of 16 rows, one
//! `vpdpbusd` per four levels and activation row, exact i32 sums per scale unit, then the float
//! steps per unit and row.

// Kernels index several parallel arrays (rows, units) by one loop counter.
#![allow(clippy::needless_range_loop)]

use super::act_quads::ActQuads;
use super::avx512_base::{
    check_act, combine, dot, load, move_bit, planes, scales_f16, scales_u8, start_acc, Out, Planes,
};
use std::arch::x86_64::*;
use std::ops::Range;

/// The four vectors of two-bit levels `4s + i` (s = 0..4) of one 16-value group.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn two_bit(v: __m512i) -> [__m512i; 4] {
    let m2 = _mm512_set1_epi8(0x03);
    std::array::from_fn(|s| _mm512_and_si512(move_bit(v, 2 * s, 0), m2))
}

/// Q2_K: `x = d·sc_g·q - dmin·m_g` per 16-value group `g`, `q` two bits.
///
/// # Safety
/// The CPU must have the `Avx512` kernel set's features.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
pub(crate) unsafe fn q2_k<const R: usize, const SPLIT: bool>(
    g: &[u8],
    a: &ActQuads,
    r0: usize,
    out: &mut Out,
    span: Range<usize>,
) {
    let (k, nsb) = (a.k, a.k / 256);
    assert!(span.end <= nsb && g.len() >= span.len() * 1600 && a.block == 256);
    check_act::<R, SPLIT>(a, r0);
    let p: [Planes; R] = std::array::from_fn(|r| planes::<SPLIT>(a, r0 + r));
    let mut acc = start_acc::<R>(out, span.start);
    for sb in span.clone() {
        // SAFETY: super-block sb lies inside g, and its 256 values inside each row (asserted).
        unsafe {
            let u = g.as_ptr().add((sb - span.start) * 1600);
            let mut scaled = [_mm512_setzero_ps(); R];
            let mut mins = [_mm512_setzero_ps(); R];
            for grp in 0..16 {
                let w = two_bit(load(u.add(576 + 64 * grp)));
                let sc = scales_u8::<false>(u.add(64 + 16 * grp));
                let mn = scales_u8::<false>(u.add(320 + 16 * grp));
                let off = sb * 256 + 16 * grp;
                for r in 0..R {
                    let mut isum = [_mm512_setzero_si512(); 2];
                    for (s, &wv) in w.iter().enumerate() {
                        dot::<SPLIT>(&mut isum, wv, &p[r], off + 4 * s);
                    }
                    let sf = _mm512_cvtepi32_ps(combine::<SPLIT>(isum));
                    scaled[r] = _mm512_fmadd_ps(sf, sc, scaled[r]);
                    let bs = *a.sum16.get_unchecked((r0 + r) * k / 16 + sb * 16 + grp) as f32;
                    mins[r] = _mm512_fmadd_ps(mn, _mm512_set1_ps(bs), mins[r]);
                }
            }
            let (d, dmin) = (scales_f16(u), scales_f16(u.add(32)));
            for r in 0..R {
                let da = _mm512_set1_ps(*a.d.get_unchecked((r0 + r) * nsb + sb));
                let v = _mm512_fmsub_ps(d, scaled[r], _mm512_mul_ps(dmin, mins[r]));
                acc[r] = _mm512_fmadd_ps(v, da, acc[r]);
            }
        }
    }
    for r in 0..R {
        // SAFETY: out[r] holds 16 floats.
        unsafe { _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]) };
    }
}

/// Q3_K: `x = d·sc_g·(q - 4)` per 16-value group `g`, `q` three bits, `sc_g` signed.
///
/// # Safety
/// The CPU must have the `Avx512` kernel set's features.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
pub(crate) unsafe fn q3_k<const R: usize, const SPLIT: bool>(
    g: &[u8],
    a: &ActQuads,
    r0: usize,
    out: &mut Out,
    span: Range<usize>,
) {
    let (k, nsb) = (a.k, a.k / 256);
    assert!(span.end <= nsb && g.len() >= span.len() * 1824 && a.block == 256);
    check_act::<R, SPLIT>(a, r0);
    let bit2 = _mm512_set1_epi8(0x04);
    let p: [Planes; R] = std::array::from_fn(|r| planes::<SPLIT>(a, r0 + r));
    let mut acc = start_acc::<R>(out, span.start);
    for sb in span.clone() {
        // SAFETY: super-block sb lies inside g, and its 256 values inside each row (asserted).
        unsafe {
            let u = g.as_ptr().add((sb - span.start) * 1824);
            let mut scaled = [_mm512_setzero_ps(); R];
            for grp in 0..16 {
                let low = two_bit(load(u.add(288 + 64 * grp)));
                let high = load(u.add(1312 + 64 * (grp / 2)));
                let w: [__m512i; 4] = std::array::from_fn(|s| {
                    let third = move_bit(high, s + 4 * (grp % 2), 2);
                    _mm512_or_si512(low[s], _mm512_and_si512(third, bit2))
                });
                let sc = scales_u8::<true>(u.add(32 + 16 * grp));
                let off = sb * 256 + 16 * grp;
                for r in 0..R {
                    let s16 = *a.sum16.get_unchecked((r0 + r) * k / 16 + sb * 16 + grp);
                    let mut isum = [_mm512_set1_epi32(-4 * s16), _mm512_setzero_si512()];
                    for (s, &wv) in w.iter().enumerate() {
                        dot::<SPLIT>(&mut isum, wv, &p[r], off + 4 * s);
                    }
                    let sf = _mm512_cvtepi32_ps(combine::<SPLIT>(isum));
                    scaled[r] = _mm512_fmadd_ps(sf, sc, scaled[r]);
                }
            }
            let d = scales_f16(u);
            for r in 0..R {
                let da = _mm512_set1_ps(*a.d.get_unchecked((r0 + r) * nsb + sb));
                acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(scaled[r], d), da, acc[r]);
            }
        }
    }
    for r in 0..R {
        // SAFETY: out[r] holds 16 floats.
        unsafe { _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]) };
    }
}

/// TQ1_0 and TQ2_0: `x = d·(q - 1)`, one scale per 256 values.
///
/// # Safety
/// The CPU must have the `Avx512` kernel set's features.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
pub(crate) unsafe fn ternary<const R: usize, const SPLIT: bool>(
    g: &[u8],
    a: &ActQuads,
    r0: usize,
    out: &mut Out,
    span: Range<usize>,
) {
    let (k, nsb) = (a.k, a.k / 256);
    assert!(span.end <= nsb && g.len() >= span.len() * 1056 && a.block == 256);
    check_act::<R, SPLIT>(a, r0);
    let p: [Planes; R] = std::array::from_fn(|r| planes::<SPLIT>(a, r0 + r));
    let mut acc = start_acc::<R>(out, span.start);
    for sb in span.clone() {
        // SAFETY: super-block sb lies inside g, and its 256 values inside each row (asserted).
        unsafe {
            let u = g.as_ptr().add((sb - span.start) * 1056);
            let mut isum: [[__m512i; 2]; R] = std::array::from_fn(|r| {
                let sums = &a.sum16[(r0 + r) * k / 16 + sb * 16..][..16];
                [
                    _mm512_set1_epi32(-sums.iter().sum::<i32>()),
                    _mm512_setzero_si512(),
                ]
            });
            for grp in 0..16 {
                let w = two_bit(load(u.add(32 + 64 * grp)));
                let off = sb * 256 + 16 * grp;
                for r in 0..R {
                    for (s, &wv) in w.iter().enumerate() {
                        dot::<SPLIT>(&mut isum[r], wv, &p[r], off + 4 * s);
                    }
                }
            }
            let d = scales_f16(u);
            for r in 0..R {
                let da = *a.d.get_unchecked((r0 + r) * nsb + sb);
                let sf = _mm512_cvtepi32_ps(combine::<SPLIT>(isum[r]));
                acc[r] = _mm512_fmadd_ps(sf, _mm512_mul_ps(d, _mm512_set1_ps(da)), acc[r]);
            }
        }
    }
    for r in 0..R {
        // SAFETY: out[r] holds 16 floats.
        unsafe { _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]) };
    }
}

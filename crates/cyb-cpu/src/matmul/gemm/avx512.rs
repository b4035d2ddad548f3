//! AVX-512 VNNI kernels of the repacked GEMM (`mod.rs`, layouts in `repack.rs`): one 16-row
//! weight group against `R` activation rows. Each 64-byte weight vector (four levels of 16
//! rows, unsigned) meets four broadcast activation bytes (signed) in one `vpdpbusd`, so a
//! loaded vector serves all `R` rows; zero points, mins and the 16-bit split are exact i32
//! arithmetic per scale unit, then one float multiply-add per unit and row.
//!
//! Every row's result comes from the same sequence of operations whatever `R` is, so tiling
//! and threads never change results.

// Kernels index several parallel arrays (rows, units) by one loop counter.
#![allow(clippy::needless_range_loop)]

use super::act_quads::ActQuads;
use super::avx512_base::{
    check_act, combine, dot, legacy_unit, load, move_bit, planes, scales_f16, scales_u8, start_acc,
    LegacyUnit, Out, Planes, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, ROWS,
};
use super::avx512_kq::{q2_k, q3_k, ternary};
use std::arch::x86_64::*;
use std::ops::Range;

/// How far past the unit being read the few-row kernels (`R <= 4`, decode) ask for weights.
///
/// Decode reads every weight once, so the hardware prefetcher alone leaves the
/// kernels below memory speed. Measured with gemm_bench (1×2048×8192 and 1×8192×2048,
/// 20 weight sets, 2 threads, Intel AMX VM): no software prefetch gave Q8_0 24–26,
/// Q4_0 19–21, Q4_K 19–21, Q6_K 17–19 GB/s; into L1 2 KB ahead 27–29 / 24–26 / 22–24 /
/// 23–25; into L2 4 KB ahead 28–30 / 26–29 / 23–25 / 24–25.5 (8 KB ahead about the same).
/// Asking for a whole K-quant unit (37 or 53 lines) at its start stalled the kernel: spread
/// over the unit's loop instead, a few lines per step, Q4_K read 18–19 → 22 and Q6_K 20.5 →
/// 23 GB/s (1×8192×2048, at a `membw` of 23 GB/s), Q4_0 22 → 24, Q8_0 the same.
const UNIT_AHEAD_BYTES: usize = 4096;

/// Step `step` of `steps` through a unit of `unit_bytes`: in the few-row kernels (`R <= 4`),
/// asks for that step's share of the lines of the unit lying `UNIT_AHEAD_BYTES` past `u`,
/// so a long unit's lines are asked for over its loop instead of all at once. (Through
/// `sgemm::prefetch_l2` on a subslice of the group instead, the decode kernels read 15–20%
/// slower in `gemm_bench 1 8192 2048 2`, Q8_0 included.)
#[inline(always)]
fn prefetch_step<const R: usize>(u: *const u8, unit_bytes: usize, step: usize, steps: usize) {
    if R > 4 {
        return;
    }
    let per_step = unit_bytes.div_ceil(64).div_ceil(steps);
    for l in per_step * step..per_step * (step + 1) {
        // SAFETY: a prefetch never faults; the address is formed with wrapping arithmetic.
        unsafe {
            _mm_prefetch::<_MM_HINT_T1>(u.wrapping_add(UNIT_AHEAD_BYTES + 64 * l) as *const i8)
        };
    }
}

/// Q4_0 (zero point 8), Q8_0 (128), Q5_0 (16), Q4_1 and Q5_1 (`x = d·q + m`).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
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
    assert!(span.end <= nb && g.len() >= span.len() * ub && a.block == 32);
    check_act::<R, SPLIT>(a, r0);
    let m4 = _mm512_set1_epi8(0x0f);
    let bit4 = _mm512_set1_epi8(0x10);
    let p: [Planes; R] = std::array::from_fn(|r| planes::<SPLIT>(a, r0 + r));
    let mut acc = start_acc::<R>(out, span.start);
    for b in span.clone() {
        // SAFETY: unit b lies inside g, and values b·32 .. b·32 + 32 inside each row (asserted).
        unsafe {
            let u = g.as_ptr().add((b - span.start) * ub);
            let mut isum = [[_mm512_setzero_si512(); 2]; R];
            if zero_point != 0 {
                for r in 0..R {
                    let s = *a.sum32.get_unchecked((r0 + r) * nb + b);
                    isum[r][0] = _mm512_set1_epi32(-zero_point * s);
                }
            }
            if FMT == Q8_0 {
                for v in 0..8 {
                    prefetch_step::<R>(u, ub, v, 8);
                    let w = load(u.add(levels + 64 * v));
                    for r in 0..R {
                        dot::<SPLIT>(&mut isum[r], w, &p[r], b * 32 + 4 * v);
                    }
                }
            } else {
                let fifth = if five {
                    load(u.add(levels + 256))
                } else {
                    _mm512_setzero_si512()
                };
                for v in 0..4 {
                    prefetch_step::<R>(u, ub, v, 4);
                    let raw = load(u.add(levels + 64 * v));
                    let mut lo = _mm512_and_si512(raw, m4);
                    let mut hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
                    if five {
                        // Bit v (levels 4v + i) and bit v + 4 (levels 16 + 4v + i) to bit 4;
                        // 16-bit shifts of at most 4 keep bit 4 within its byte.
                        let up = _mm512_sll_epi16(fifth, _mm_cvtsi32_si128(4 - v as i32));
                        let down = _mm512_srl_epi16(fifth, _mm_cvtsi32_si128(v as i32));
                        lo = _mm512_or_si512(lo, _mm512_and_si512(up, bit4));
                        hi = _mm512_or_si512(hi, _mm512_and_si512(down, bit4));
                    }
                    for r in 0..R {
                        dot::<SPLIT>(&mut isum[r], lo, &p[r], b * 32 + 4 * v);
                        dot::<SPLIT>(&mut isum[r], hi, &p[r], b * 32 + 16 + 4 * v);
                    }
                }
            }
            let dw = scales_f16(u);
            for r in 0..R {
                let da = *a.d.get_unchecked((r0 + r) * nb + b);
                let s = _mm512_cvtepi32_ps(combine::<SPLIT>(isum[r]));
                acc[r] = _mm512_fmadd_ps(s, _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[r]);
                if with_min {
                    let sa = da * *a.sum32.get_unchecked((r0 + r) * nb + b) as f32;
                    acc[r] = _mm512_fmadd_ps(scales_f16(u.add(32)), _mm512_set1_ps(sa), acc[r]);
                }
            }
        }
    }
    for r in 0..R {
        // SAFETY: out[r] holds 16 floats.
        unsafe { _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]) };
    }
}

/// Q4_K and (`FIVE`) Q5_K: `x = d·sc_j·q - dmin·m_j` per 32-value sub-block `j`; Q5_K's fifth
/// bits come from one more vector per sub-block.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
unsafe fn q4_k<const FIVE: bool, const R: usize, const SPLIT: bool>(
    g: &[u8],
    a: &ActQuads,
    r0: usize,
    out: &mut Out,
    span: Range<usize>,
) {
    let (k, nsb) = (a.k, a.k / 256);
    let ub = if FIVE { 2880 } else { 2368 };
    assert!(span.end <= nsb && g.len() >= span.len() * ub && a.block == 256);
    check_act::<R, SPLIT>(a, r0);
    let m4 = _mm512_set1_epi8(0x0f);
    let bit4 = _mm512_set1_epi8(0x10);
    let p: [Planes; R] = std::array::from_fn(|r| planes::<SPLIT>(a, r0 + r));
    let mut acc = start_acc::<R>(out, span.start);
    for sb in span.clone() {
        // SAFETY: super-block sb lies inside g, and its 256 values inside each row (asserted).
        unsafe {
            let u = g.as_ptr().add((sb - span.start) * ub);
            let mut scaled = [_mm512_setzero_ps(); R];
            let mut mins = [_mm512_setzero_ps(); R];
            for j in 0..8 {
                prefetch_step::<R>(u, ub, j, 8);
                let mut isum = [[_mm512_setzero_si512(); 2]; R];
                let fifth = if FIVE {
                    load(u.add(2368 + 64 * j))
                } else {
                    _mm512_setzero_si512()
                };
                for h in 0..4 {
                    let raw = load(u.add(320 + 256 * j + 64 * h));
                    let mut lo = _mm512_and_si512(raw, m4);
                    let mut hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
                    if FIVE {
                        lo = _mm512_or_si512(lo, _mm512_and_si512(move_bit(fifth, 2 * h, 4), bit4));
                        let b5 = move_bit(fifth, 2 * h + 1, 4);
                        hi = _mm512_or_si512(hi, _mm512_and_si512(b5, bit4));
                    }
                    let off = sb * 256 + 32 * j + 8 * h;
                    for r in 0..R {
                        dot::<SPLIT>(&mut isum[r], lo, &p[r], off);
                        dot::<SPLIT>(&mut isum[r], hi, &p[r], off + 4);
                    }
                }
                let sc = scales_u8::<false>(u.add(64 + 16 * j));
                let mn = scales_u8::<false>(u.add(192 + 16 * j));
                for r in 0..R {
                    let s = _mm512_cvtepi32_ps(combine::<SPLIT>(isum[r]));
                    scaled[r] = _mm512_fmadd_ps(s, sc, scaled[r]);
                    let bs = *a.sum32.get_unchecked((r0 + r) * k / 32 + sb * 8 + j) as f32;
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

/// Q6_K: `x = d·sc_g·(q - 32)` per 16-value group `g`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
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
    let m4 = _mm512_set1_epi8(0x0f);
    let m30 = _mm512_set1_epi8(0x30);
    let p: [Planes; R] = std::array::from_fn(|r| planes::<SPLIT>(a, r0 + r));
    let mut acc = start_acc::<R>(out, span.start);
    for sb in span.clone() {
        // SAFETY: super-block sb lies inside g, and its 256 values inside each row (asserted).
        unsafe {
            let u = g.as_ptr().add((sb - span.start) * 3360);
            let mut scaled = [_mm512_setzero_ps(); R];
            for grp in 0..16 {
                prefetch_step::<R>(u, 3360, grp, 16);
                let n0 = load(u.add(288 + 192 * grp));
                let n1 = load(u.add(352 + 192 * grp));
                let top = load(u.add(416 + 192 * grp));
                let w = [
                    _mm512_or_si512(
                        _mm512_and_si512(n0, m4),
                        _mm512_and_si512(_mm512_slli_epi16(top, 4), m30),
                    ),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16(n0, 4), m4),
                        _mm512_and_si512(_mm512_slli_epi16(top, 2), m30),
                    ),
                    _mm512_or_si512(_mm512_and_si512(n1, m4), _mm512_and_si512(top, m30)),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16(n1, 4), m4),
                        _mm512_and_si512(_mm512_srli_epi16(top, 2), m30),
                    ),
                ];
                let sc = scales_u8::<true>(u.add(32 + 16 * grp));
                let off = sb * 256 + 16 * grp;
                for r in 0..R {
                    let s = *a.sum16.get_unchecked((r0 + r) * k / 16 + sb * 16 + grp);
                    let mut isum = [_mm512_set1_epi32(-32 * s), _mm512_setzero_si512()];
                    for (q, &wv) in w.iter().enumerate() {
                        dot::<SPLIT>(&mut isum, wv, &p[r], off + 4 * q);
                    }
                    let s = _mm512_cvtepi32_ps(combine::<SPLIT>(isum));
                    scaled[r] = _mm512_fmadd_ps(s, sc, scaled[r]);
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

macro_rules! entry {
    ($name:ident, $kern:ident $(, $q8:tt)?) => {
        /// # Safety
        /// The CPU must have the `Avx512` kernel set's features.
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
        pub unsafe fn $name(g: &[u8], a: &ActQuads, r0: usize, nr: usize, span: Range<usize>, out: &mut Out) {
            // SAFETY: same features as this fn; the kernels check their bounds.
            unsafe {
                match (a.split, nr) {
                    (false, 1) if 1 <= ROWS => $kern::<$($q8,)? 1, false>(g, a, r0, out, span),
                    (false, 2) if 2 <= ROWS => $kern::<$($q8,)? 2, false>(g, a, r0, out, span),
                    (false, 3) if 3 <= ROWS => $kern::<$($q8,)? 3, false>(g, a, r0, out, span),
                    (false, 4) if 4 <= ROWS => $kern::<$($q8,)? 4, false>(g, a, r0, out, span),
                    (false, 5) if 5 <= ROWS => $kern::<$($q8,)? 5, false>(g, a, r0, out, span),
                    (false, 6) if 6 <= ROWS => $kern::<$($q8,)? 6, false>(g, a, r0, out, span),
                    (false, 7) if 7 <= ROWS => $kern::<$($q8,)? 7, false>(g, a, r0, out, span),
                    (false, 8) => $kern::<$($q8,)? 8, false>(g, a, r0, out, span),
                    (true, 1) if 1 <= ROWS => $kern::<$($q8,)? 1, true>(g, a, r0, out, span),
                    (true, 2) if 2 <= ROWS => $kern::<$($q8,)? 2, true>(g, a, r0, out, span),
                    (true, 3) if 3 <= ROWS => $kern::<$($q8,)? 3, true>(g, a, r0, out, span),
                    (true, 4) if 4 <= ROWS => $kern::<$($q8,)? 4, true>(g, a, r0, out, span),
                    (true, 5) if 5 <= ROWS => $kern::<$($q8,)? 5, true>(g, a, r0, out, span),
                    (true, 6) if 6 <= ROWS => $kern::<$($q8,)? 6, true>(g, a, r0, out, span),
                    (true, 7) if 7 <= ROWS => $kern::<$($q8,)? 7, true>(g, a, r0, out, span),
                    (true, 8) => $kern::<$($q8,)? 8, true>(g, a, r0, out, span),
                    _ => unreachable!("at most 8 rows"),
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
entry!(q5_k_group, q4_k, true);
entry!(q2_k_group, q2_k);
entry!(q3_k_group, q3_k);
entry!(ternary_group, ternary);
entry!(q4_k_group, q4_k, false);
entry!(q6_k_group, q6_k);

//! What the AVX-512 group kernels of the repacked GEMM share (`avx512.rs`, `avx512_kq.rs`,
//! `amx.rs`; the AVX2 kernels of `avx2.rs` take the unit layouts and activation planes): the
//! result tile, the loads of weight vectors and of the per-row scales, the `vpdpbusd` step over
//! one activation row's planes, the legacy formats' unit layouts and the group kernel's type.
//!
//! A leaf: it uses nothing of this crate but `act_quads.rs` and `features.rs`.

use super::act_quads::ActQuads;
use std::arch::x86_64::*;
use std::ops::Range;

/// Most activation rows per kernel call (the AMX kernels take 16, these 8).
pub const ROWS: usize = 16;

/// Activation rows per kernel call: 8-bit rows need half the accumulators of split 16-bit
/// ones, so more of them fit in the 32 vector registers (measured best: 8 and 6).
pub fn tile_rows(split: bool) -> usize {
    if split {
        6
    } else {
        8
    }
}

/// Results: `out[r][lane]` is activation row `r0 + r` against weight row `16g + lane`.
pub type Out = [[f32; 16]; ROWS];

// SAFETY (whole file): every `#[target_feature]` fn runs only when `KernelSet::Avx512` is
// available; pointer reads stay inside the slices whose lengths each kernel asserts first.

/// Four activation bytes broadcast to every lane.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn quad(p: *const i8) -> __m512i {
    // SAFETY: the caller guarantees four readable bytes at p.
    _mm512_set1_epi32(unsafe { std::ptr::read_unaligned(p as *const i32) })
}

#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn load(p: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 64 readable bytes at p.
    unsafe { _mm512_loadu_si512(p as *const __m512i) }
}

/// Sixteen f16 scales at p as f32 lanes.
#[target_feature(enable = "avx512f,f16c")]
#[inline]
pub(crate) unsafe fn scales_f16(p: *const u8) -> __m512 {
    // SAFETY: the caller guarantees 32 readable bytes at p.
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p as *const __m256i) })
}

/// Sixteen unsigned (`SIGNED == false`) or signed bytes at p as f32 lanes.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn scales_u8<const SIGNED: bool>(p: *const u8) -> __m512 {
    // SAFETY: the caller guarantees 16 readable bytes at p.
    let v = unsafe { _mm_loadu_si128(p as *const __m128i) };
    _mm512_cvtepi32_ps(if SIGNED {
        _mm512_cvtepi8_epi32(v)
    } else {
        _mm512_cvtepu8_epi32(v)
    })
}

/// The level planes of one activation row: `lo` and (split) `hi` at value offset `at`.
pub(crate) struct Planes {
    pub(crate) lo: *const i8,
    pub(crate) hi: *const i8,
}

/// Adds `Σ w·a` over the quad at value offset `off` to the row's accumulators (split: `hi`
/// products go to `acc[1]`).
#[target_feature(enable = "avx512f,avx512vnni")]
#[inline]
pub(crate) unsafe fn dot<const SPLIT: bool>(
    acc: &mut [__m512i; 2],
    w: __m512i,
    p: &Planes,
    off: usize,
) {
    // SAFETY: the caller guarantees the quad lies inside both planes.
    unsafe {
        acc[0] = _mm512_dpbusd_epi32(acc[0], w, quad(p.lo.add(off)));
        if SPLIT {
            acc[1] = _mm512_dpbusd_epi32(acc[1], w, quad(p.hi.add(off)));
        }
    }
}

/// `lo + 256·hi` (exact: every caller's sums stay below 2^31).
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn combine<const SPLIT: bool>(acc: [__m512i; 2]) -> __m512i {
    if SPLIT {
        _mm512_add_epi32(acc[0], _mm512_slli_epi32(acc[1], 8))
    } else {
        acc[0]
    }
}

/// Checks the activation planes hold rows `r0..r0 + R` of `a.k` values.
pub(crate) fn check_act<const R: usize, const SPLIT: bool>(a: &ActQuads, r0: usize) {
    let (k, end) = (a.k, (r0 + R) * a.stride);
    assert!(a.stride >= k && a.lo.len() >= end && (!SPLIT || a.hi.len() >= end));
    assert!(a.d.len() >= (r0 + R) * k / a.block);
    assert!(a.sum16.len() >= (r0 + R) * k / 16 && a.sum32.len() >= (r0 + R) * k / 32);
}

pub(crate) fn planes<const SPLIT: bool>(a: &ActQuads, row: usize) -> Planes {
    let at = row * a.stride;
    Planes {
        lo: a.lo[at..].as_ptr(),
        hi: if SPLIT {
            a.hi[at..].as_ptr()
        } else {
            a.lo[at..].as_ptr()
        },
    }
}

/// Zero accumulators for a span from the first unit, else the partial sums left in `out`
/// (the results of the span before it: a row's sums run over the units in one order however
/// `k` is split into spans).
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn start_acc<const R: usize>(out: &Out, first: usize) -> [__m512; R] {
    std::array::from_fn(|r| {
        if first == 0 {
            _mm512_setzero_ps()
        } else {
            // SAFETY: out[r] holds 16 floats.
            unsafe { _mm512_loadu_ps(out[r].as_ptr()) }
        }
    })
}

/// Copies a group's sums (`src`, up to 16) into a kernel's result row for the next span, with
/// the vector width the kernels load them at (a load spanning several narrower stores would
/// wait for them to retire).
///
/// # Safety
/// The CPU must have `set`'s features.
pub(crate) unsafe fn reload(set: crate::features::KernelSet, row: &mut [f32; 16], src: &[f32]) {
    match (set, <&[f32; 16]>::try_from(src)) {
        // SAFETY: AVX-512 per the caller.
        (crate::features::KernelSet::Avx512, Ok(s)) => unsafe { copy_512(row, s) },
        // SAFETY: the other sets with repacked kernels (AVX2) have AVX.
        (_, Ok(s)) => unsafe { copy_256(row, s) },
        (_, Err(_)) => row[..src.len()].copy_from_slice(src),
    }
}

#[target_feature(enable = "avx512f")]
unsafe fn copy_512(row: &mut [f32; 16], s: &[f32; 16]) {
    // SAFETY: both hold 16 floats.
    unsafe { _mm512_storeu_ps(row.as_mut_ptr(), _mm512_loadu_ps(s.as_ptr())) }
}

#[target_feature(enable = "avx")]
unsafe fn copy_256(row: &mut [f32; 16], s: &[f32; 16]) {
    for h in 0..2 {
        // SAFETY: both hold 16 floats.
        unsafe {
            _mm256_storeu_ps(
                row.as_mut_ptr().add(8 * h),
                _mm256_loadu_ps(s.as_ptr().add(8 * h)),
            )
        }
    }
}

/// The 32-value formats of the `legacy` kernels (`avx512.rs`, `amx.rs`, `avx2.rs`).
pub(crate) const Q4_0: u8 = 0;
pub(crate) const Q8_0: u8 = 1;
pub(crate) const Q4_1: u8 = 2;
pub(crate) const Q5_0: u8 = 3;
pub(crate) const Q5_1: u8 = 4;

/// One legacy format's repacked unit (`repack.rs`).
pub(crate) struct LegacyUnit {
    /// Bytes of the unit.
    pub bytes: usize,
    /// Offset of the level vectors (after the scales and, with a minimum, the minimums).
    pub levels: usize,
    /// Subtracted from every level (`x = d·(q - zero_point)`).
    pub zero_point: i32,
    /// Fifth bits in one more vector after the four of nibbles.
    pub five: bool,
    /// `x = d·q + m` with per-row minimums after the scales.
    pub with_min: bool,
}

/// The unit of legacy format `fmt`.
pub(crate) const fn legacy_unit(fmt: u8) -> LegacyUnit {
    let (bytes, levels, zero_point) = match fmt {
        Q4_0 => (288, 32, 8),
        Q8_0 => (544, 32, 128),
        Q4_1 => (320, 64, 0),
        Q5_1 => (384, 64, 0),
        _ => (352, 32, 16),
    };
    LegacyUnit {
        bytes,
        levels,
        zero_point,
        five: fmt == Q5_0 || fmt == Q5_1,
        with_min: fmt == Q4_1 || fmt == Q5_1,
    }
}

/// `v` shifted so that bit `from` of each byte lands on bit `to` (shifts of 16-bit lanes whose
/// spill into the neighbouring byte the callers mask away: `to - from` at most 4 left, at most
/// 5 right with `to` ≤ 2).
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
pub(crate) fn move_bit(v: __m512i, from: usize, to: usize) -> __m512i {
    if from <= to {
        _mm512_sll_epi16(v, _mm_cvtsi32_si128((to - from) as i32))
    } else {
        _mm512_srl_epi16(v, _mm_cvtsi32_si128((from - to) as i32))
    }
}

/// One group's kernel: the group's bytes of a span of units, activations, first row, rows
/// (1..=ROWS), the span (unit indices), results (which hold the sums of the spans before it
/// unless the span starts at unit 0).
pub type GroupKernel = unsafe fn(&[u8], &ActQuads, usize, usize, Range<usize>, &mut Out);

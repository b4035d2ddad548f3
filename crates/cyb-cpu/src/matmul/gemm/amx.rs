//! AMX-INT8 kernels of the repacked GEMM (`mod.rs`, layouts in `repack.rs`) for prefill: one
//! 16-row weight group against 16 activation rows per call.
//!
//! A repacked unit already is an AMX `B` tile: its 64-byte vectors hold four consecutive levels
//! of each of the 16 weight rows, which is the row layout `tdpbsud` takes (`K/4` rows of 16 × 4
//! bytes). Per 32-value scale unit the activation rows are an `A` tile (16 rows × 32 contiguous
//! bytes, laid out by `ActQuads::tile_planes`), one `tdpbsud` per plane gives the 16 × 16
//! integer sums, and these go through exactly the float steps of the VNNI kernels
//! (`avx512.rs`). Integer sums are exact whichever instruction makes them, so every output is
//! bit-identical to the VNNI kernel's: decode (VNNI) and prefill (AMX) agree, and neither the
//! tiling nor the thread count changes a result.
//!
//! Tiles (one configuration per thread, loaded by [`Tiles::load`]): tmm0/tmm1 the `lo`/`hi`
//! activation planes over 32 values, tmm2 the weights of 32 values, tmm3/tmm4 the `lo`/`hi`
//! sums; for Q6_K's 16-value groups tmm5/tmm6 the planes over 16 values and tmm7 the weights.
//!
//! Each tile product here covers only 32 values (16 for Q6_K: the formats' scale units) and
//! its sums go through memory to the float steps, so AMX gains far less than its peak: the
//! kernels are bound by tile stores and float steps, not by the products. What they are built
//! around (measured on the development machine's Xeon, virtualised): a tile load right after
//! the vector stores of its bytes waits ~13 ns for them, so packed levels are unpacked ahead
//! (a unit ahead, or a whole super-block before its tile loads); the float steps run per row
//! over a super-block's units with the row's partial sums in registers; the sums and weight
//! tiles live in a per-thread scratch. At 128 rows, one thread (`gemm_bench`): Q8_0 ~130,
//! Q4_0 ~130, Q4_K ~130, Q6_K ~96 GMAC/s against VNNI's ~110, ~115, ~105, ~78.
//!
//! The AMX instructions are written as inline assembly (their intrinsics are not stable Rust);
//! they only name tile registers, which the compiler never uses.

// Kernels index several parallel arrays (rows, units) by one loop counter.
#![allow(clippy::needless_range_loop)]

use super::act_quads::ActQuads;
use super::avx512_base::{
    legacy_unit, load, move_bit, scales_f16, scales_u8, start_acc, LegacyUnit, Out, Q4_0, Q4_1,
    Q5_0, Q5_1, Q8_0,
};
use std::arch::asm;
use std::arch::x86_64::*;
use std::ops::Range;
use std::sync::OnceLock;

/// Activation rows of one AMX tile: the activations come as whole tiles (see
/// [`ActQuads::tile_planes`]).
pub const TILE_ROWS: usize = 16;

/// Whether this CPU and OS run AMX-INT8: CPUID's AMX-TILE and AMX-INT8 bits, and Linux's
/// permission for the tile data state (asked once per process).
pub fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        // SAFETY: CPUID leaf 7 exists on every x86-64 CPU with AVX-512 (checked by the caller's
        // kernel set first); reading it has no side effects.
        #[allow(unused_unsafe)]
        let edx = unsafe { __cpuid_count(7, 0) }.edx;
        edx & (3 << 24) == 3 << 24 && request_tile_data()
    })
}

/// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`: Linux refuses AMX instructions to a
/// process that did not ask for the tile state first.
#[cfg(target_os = "linux")]
fn request_tile_data() -> bool {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let ret: i64;
    // SAFETY: a plain system call that changes nothing but this process's permission.
    unsafe {
        asm!("syscall", inlateout("rax") SYS_ARCH_PRCTL => ret, in("rdi") ARCH_REQ_XCOMP_PERM,
             in("rsi") XFEATURE_XTILEDATA, lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    ret == 0
}

#[cfg(not(target_os = "linux"))]
fn request_tile_data() -> bool {
    false
}

#[repr(C, align(64))]
struct Config([u8; 64]);

/// The tile configuration loaded on this thread; released on drop.
pub struct Tiles(());

impl Tiles {
    /// Loads this file's tile shapes on the calling thread.
    ///
    /// # Safety
    /// [`available`] must have returned true.
    pub unsafe fn load() -> Tiles {
        // (rows, bytes per row) of tmm0..tmm7.
        const SHAPES: [(u8, u16); 8] = [
            (16, 32),
            (16, 32),
            (8, 64),
            (16, 64),
            (16, 64),
            (16, 16),
            (16, 16),
            (4, 64),
        ];
        let mut c = Config([0; 64]);
        c.0[0] = 1; // palette 1
        for (t, (rows, bytes)) in SHAPES.iter().enumerate() {
            c.0[16 + 2 * t..18 + 2 * t].copy_from_slice(&bytes.to_le_bytes());
            c.0[48 + t] = *rows;
        }
        // SAFETY: a valid palette-1 configuration, AMX permitted (caller's contract).
        unsafe { asm!("ldtilecfg [{0}]", in(reg) c.0.as_ptr(), options(nostack, readonly)) };
        Tiles(())
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: tiles were configured on this thread by `load`.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// The 16 × 16 sums of one scale unit: `lo` then (split) `hi`, 64-byte aligned.
#[repr(C, align(64))]
struct Sums([[i32; 16]; 32]);

/// Sums of one unit of 32 values: activation tiles at `lo`/`hi` (rows 32 bytes apart), weights
/// at `w` (8 rows of 64 bytes) into `s`; the weight bytes are unsigned, or signed with
/// `SIGNED_W` (`tdpbssd`).
///
/// # Safety
/// Tiles loaded; 16 rows × 32 bytes readable at each plane, 512 bytes at `w`.
#[inline(always)]
unsafe fn sums32<const SPLIT: bool, const SIGNED_W: bool>(
    lo: *const i8,
    hi: *const i8,
    w: *const u8,
    s: &mut Sums,
) {
    let k = 32usize;
    // SAFETY: per this fn's contract.
    unsafe {
        asm!("tileloadd tmm2, [{w} + {s64}*1]", "tileloadd tmm0, [{a} + {k}*1]",
             "tilezero tmm3",
             w = in(reg) w, a = in(reg) lo, k = in(reg) k, s64 = in(reg) 64usize,
             options(nostack));
        if SIGNED_W {
            asm!("tdpbssd tmm3, tmm0, tmm2", options(nostack, nomem));
        } else {
            asm!("tdpbsud tmm3, tmm0, tmm2", options(nostack, nomem));
        }
        asm!("tilestored [{o} + {s64}*1], tmm3", s64 = in(reg) 64usize,
             o = in(reg) s.0.as_mut_ptr(), options(nostack));
        if SPLIT {
            asm!("tileloadd tmm1, [{a} + {k}*1]", "tilezero tmm4",
                 a = in(reg) hi, k = in(reg) k, options(nostack));
            if SIGNED_W {
                asm!("tdpbssd tmm4, tmm1, tmm2", options(nostack, nomem));
            } else {
                asm!("tdpbsud tmm4, tmm1, tmm2", options(nostack, nomem));
            }
            asm!("tilestored [{o} + {s64}*1], tmm4", s64 = in(reg) 64usize,
                 o = in(reg) s.0[16..].as_mut_ptr(), options(nostack));
        }
    }
}

/// Row `r`'s integer sum: `lo + 256·hi + bias` (what the VNNI kernels' `combine` gives).
#[target_feature(enable = "avx512f")]
#[inline]
fn row_sum<const SPLIT: bool>(s: &Sums, r: usize, bias: i32) -> __m512i {
    // SAFETY: rows r and 16 + r of `s` hold 16 i32 each.
    unsafe {
        let mut v = _mm512_add_epi32(
            _mm512_loadu_si512(s.0[r].as_ptr() as *const __m512i),
            _mm512_set1_epi32(bias),
        );
        if SPLIT {
            let hi = _mm512_loadu_si512(s.0[16 + r].as_ptr() as *const __m512i);
            v = _mm512_add_epi32(v, _mm512_slli_epi32(hi, 8));
        }
        v
    }
}

#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn store(p: *mut u8, v: __m512i) {
    // SAFETY: the caller guarantees 64 writable bytes at p.
    unsafe { _mm512_storeu_si512(p as *mut __m512i, v) }
}

/// Checks the activation tiles and the per-row data of rows `r0..r0 + nr`.
fn check_act<const SPLIT: bool>(a: &ActQuads, r0: usize, nr: usize) {
    let k = a.k;
    let end = (r0 + TILE_ROWS) * k;
    assert!(r0.is_multiple_of(TILE_ROWS) && nr <= TILE_ROWS && a.tiles_lo.len() >= end);
    assert!(!SPLIT || a.tiles_hi.len() >= end);
    assert!(a.d.len() >= (r0 + nr) * k / a.block);
    assert!(a.sum16.len() >= (r0 + nr) * k / 16 && a.sum32.len() >= (r0 + nr) * k / 32);
}

/// The tiles of rows `r0..r0 + 16` in each plane: value `v` of row `r0 + r` is at
/// `(v / 32)·512 + 32·r + v % 32`.
fn planes<const SPLIT: bool>(a: &ActQuads, r0: usize) -> (*const i8, *const i8) {
    let at = r0 * a.k;
    let lo = a.tiles_lo[at..].as_ptr();
    (lo, if SPLIT { a.tiles_hi[at..].as_ptr() } else { lo })
}

/// Offset of value `v` of a tile's first row (rows are 32 bytes apart).
fn at(v: usize) -> usize {
    v / 32 * 512 + v % 32
}

/// Weight tiles of up to eight units, 64-byte aligned.
#[repr(C, align(64))]
struct BlockWeights<const N: usize>([[u8; 512]; N]);

/// The tile sums of one super-block's units (eight of 32 values, or Q6_K's sixteen of 16;
/// `lo` rows then `hi` rows per unit), 64-byte aligned.
#[repr(C, align(64))]
struct BlockSums([Sums; 16]);

/// One thread's sums and weight tiles, reused by every kernel call on it (zeroing 20 KB per
/// call took ~6% of a prefill): every byte a kernel reads here it wrote in the same call.
struct Scratch {
    sums: BlockSums,
    weights: BlockWeights<8>,
}

thread_local! {
    static SCRATCH: std::cell::UnsafeCell<Scratch> = const {
        std::cell::UnsafeCell::new(Scratch {
            sums: BlockSums([const { Sums([[0; 16]; 32]) }; 16]),
            weights: BlockWeights([[0; 512]; 8]),
        })
    };
}

/// This thread's [`Scratch`].
///
/// # Safety
/// At most one reference from it may be live on a thread (kernels do not nest).
unsafe fn scratch() -> &'static mut Scratch {
    // SAFETY: per this fn's contract; the thread-local outlives every kernel call on its thread.
    SCRATCH.with(|c| unsafe { &mut *c.get() })
}

/// Q4_0, Q8_0, Q4_1, Q5_0 and Q5_1: `avx512::legacy` with the sums from AMX.
///
/// Unit by unit, with the row accumulators in registers, so that the tile work of one unit
/// overlaps the float steps of the one before; packed levels are unpacked one unit ahead (a
/// tile load right after the vector stores of its bytes waits ~13 ns for them on the
/// development machine's Xeon).
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn legacy<const FMT: u8, const SPLIT: bool>(
    g: &[u8],
    a: &ActQuads,
    r0: usize,
    nr: usize,
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
    check_act::<SPLIT>(a, r0, nr);
    let (lo, hi) = planes::<SPLIT>(a, r0);
    let m4 = _mm512_set1_epi8(0x0f);
    let bit4 = _mm512_set1_epi8(0x10);
    // SAFETY: the only reference to this thread's scratch while the kernel runs.
    let Scratch { sums, weights: wt } = unsafe { scratch() };
    let s = &mut sums.0[0];
    let unit = |b: usize| {
        // SAFETY: callers pass b inside the span, whose units lie inside g (asserted).
        unsafe { g.as_ptr().add((b - span.start) * ub) }
    };
    // The levels of unit b as tile bytes (in `wt`'s slot b % 2 unless stored as such).
    let mut unpack = |b: usize| -> *const u8 {
        let u = unit(b);
        let t = wt.0[b % 2].as_mut_ptr();
        if FMT == Q8_0 {
            // Stored as `q + 128`: flipping the top bit gives `q` as a signed byte, for
            // `tdpbssd` (the same integer sums without the zero point's correction).
            let top = _mm512_set1_epi8(-128);
            for v in 0..8 {
                // SAFETY: the unit's 512 level bytes follow its scales; the slot is 512 bytes.
                unsafe {
                    store(
                        t.add(64 * v),
                        _mm512_xor_si512(load(u.add(levels + 64 * v)), top),
                    )
                };
            }
            return t;
        }
        // SAFETY: the unit's 4 (5) level vectors lie inside it; the slot is 512 bytes.
        unsafe {
            let fifth = if five {
                load(u.add(levels + 256))
            } else {
                _mm512_setzero_si512()
            };
            for v in 0..4 {
                let raw = load(u.add(levels + 64 * v));
                let mut l = _mm512_and_si512(raw, m4);
                let mut h = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
                if five {
                    let up = _mm512_sll_epi16(fifth, _mm_cvtsi32_si128(4 - v as i32));
                    let down = _mm512_srl_epi16(fifth, _mm_cvtsi32_si128(v as i32));
                    l = _mm512_or_si512(l, _mm512_and_si512(up, bit4));
                    h = _mm512_or_si512(h, _mm512_and_si512(down, bit4));
                }
                // Levels 4v + i are tile row v; levels 16 + 4v + i row 4 + v.
                store(t.add(64 * v), l);
                store(t.add(64 * (4 + v)), h);
            }
        }
        t
    };
    let mut acc = start_acc::<16>(out, span.start);
    let mut next = if span.is_empty() {
        std::ptr::null()
    } else {
        unpack(span.start)
    };
    for b in span.clone() {
        let w = next;
        if b + 1 < span.end {
            next = unpack(b + 1);
        }
        // SAFETY: unit b lies inside g; values b·32 .. b·32 + 32 of 16 padded rows inside each
        // plane (asserted); `w` holds its 512 tile bytes.
        unsafe {
            let u = unit(b);
            let (pl, ph) = (lo.add(at(b * 32)), hi.add(at(b * 32)));
            if FMT == Q8_0 {
                sums32::<SPLIT, true>(pl, ph, w, s);
            } else {
                sums32::<SPLIT, false>(pl, ph, w, s);
            }
            let dw = scales_f16(u);
            for r in 0..nr {
                let sum = *a.sum32.get_unchecked((r0 + r) * nb + b);
                let bias = if FMT == Q8_0 { 0 } else { -zero_point * sum };
                let isum = row_sum::<SPLIT>(s, r, bias);
                let da = *a.d.get_unchecked((r0 + r) * nb + b);
                let sf = _mm512_cvtepi32_ps(isum);
                acc[r] = _mm512_fmadd_ps(sf, _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[r]);
                if with_min {
                    let sa = da * sum as f32;
                    acc[r] = _mm512_fmadd_ps(scales_f16(u.add(32)), _mm512_set1_ps(sa), acc[r]);
                }
            }
        }
    }
    for r in 0..nr {
        // SAFETY: out[r] holds 16 floats.
        unsafe { _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]) };
    }
}

/// Q4_K and (`FIVE`) Q5_K: `avx512::q4_k` with the sums from AMX.
///
/// Per super-block the tiles first make all eight units' sums (into `BlockSums`), then each
/// activation row runs the VNNI kernel's float steps over the units with its `scaled` and
/// `mins` in registers (the same operations in the same order, so the same bits); the
/// results accumulate in `out`.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn q4_k<const FIVE: bool, const SPLIT: bool>(
    g: &[u8],
    a: &ActQuads,
    r0: usize,
    nr: usize,
    out: &mut Out,
    span: Range<usize>,
) {
    let (k, nsb) = (a.k, a.k / 256);
    let ub = if FIVE { 2880 } else { 2368 };
    assert!(span.end <= nsb && g.len() >= span.len() * ub && a.block == 256);
    check_act::<SPLIT>(a, r0, nr);
    let (lo, hi) = planes::<SPLIT>(a, r0);
    let m4 = _mm512_set1_epi8(0x0f);
    let bit4 = _mm512_set1_epi8(0x10);
    // SAFETY: the only reference to this thread's scratch while the kernel runs.
    let Scratch {
        sums: s,
        weights: wt,
    } = unsafe { scratch() };
    if span.start == 0 {
        for r in 0..nr {
            out[r] = [0.0; 16];
        }
    }
    for sb in span.clone() {
        // SAFETY: super-block sb lies inside g, its 256 values of 16 padded rows inside each
        // plane (asserted); rows r < nr of `out` and of the activations exist.
        unsafe {
            let u = g.as_ptr().add((sb - span.start) * ub);
            // All eight units' weight tiles first: a tile load right after the vector stores
            // of its bytes waits for them to reach the cache (~13 ns a tile on the development
            // machine's Xeon), so the stores get a head start.
            for j in 0..8 {
                let fifth = if FIVE {
                    load(u.add(2368 + 64 * j))
                } else {
                    _mm512_setzero_si512()
                };
                let w = wt.0[j].as_mut_ptr();
                for h in 0..4 {
                    let raw = load(u.add(320 + 256 * j + 64 * h));
                    let mut low = _mm512_and_si512(raw, m4);
                    let mut high = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
                    if FIVE {
                        low =
                            _mm512_or_si512(low, _mm512_and_si512(move_bit(fifth, 2 * h, 4), bit4));
                        let b5 = move_bit(fifth, 2 * h + 1, 4);
                        high = _mm512_or_si512(high, _mm512_and_si512(b5, bit4));
                    }
                    // Levels 8h + i are tile row 2h; levels 8h + 4 + i row 2h + 1.
                    store(w.add(128 * h), low);
                    store(w.add(128 * h + 64), high);
                }
            }
            for j in 0..8 {
                let off = sb * 256 + 32 * j;
                let w = wt.0[j].as_ptr();
                sums32::<SPLIT, false>(lo.add(at(off)), hi.add(at(off)), w, &mut s.0[j]);
            }
            let sc: [__m512; 8] = std::array::from_fn(|j| scales_u8::<false>(u.add(64 + 16 * j)));
            let mn: [__m512; 8] = std::array::from_fn(|j| scales_u8::<false>(u.add(192 + 16 * j)));
            let (d, dmin) = (scales_f16(u), scales_f16(u.add(32)));
            // Each row's eight unit sums as floats (exact: below 2^24), for broadcasts from
            // memory.
            let mut bs = [[0f32; 8]; 16];
            for r in 0..nr {
                let p = a.sum32.as_ptr().add((r0 + r) * k / 32 + sb * 8);
                let v = _mm256_cvtepi32_ps(_mm256_loadu_si256(p as *const __m256i));
                _mm256_storeu_ps(bs[r].as_mut_ptr(), v);
            }
            for r in 0..nr {
                let mut scaled = _mm512_setzero_ps();
                let mut mins = _mm512_setzero_ps();
                for j in 0..8 {
                    let sf = _mm512_cvtepi32_ps(row_sum::<SPLIT>(&s.0[j], r, 0));
                    scaled = _mm512_fmadd_ps(sf, sc[j], scaled);
                    mins = _mm512_fmadd_ps(mn[j], _mm512_set1_ps(bs[r][j]), mins);
                }
                let da = _mm512_set1_ps(*a.d.get_unchecked((r0 + r) * nsb + sb));
                let v = _mm512_fmsub_ps(d, scaled, _mm512_mul_ps(dmin, mins));
                let o = out[r].as_mut_ptr();
                _mm512_storeu_ps(o, _mm512_fmadd_ps(v, da, _mm512_loadu_ps(o)));
            }
        }
    }
}

/// Sums of one Q6_K group of 16 values: activation tiles at `lo`/`hi` (16 rows × 16 bytes, 32
/// apart), signed weights at `w` (4 rows of 64 bytes) into `s`, with `tdpbssd`.
///
/// # Safety
/// Tiles loaded; 16 rows × 16 bytes readable at each plane (rows 32 bytes apart), 256 bytes at
/// `w`.
#[inline(always)]
unsafe fn sums16<const SPLIT: bool>(lo: *const i8, hi: *const i8, w: *const u8, s: &mut Sums) {
    // SAFETY: per this fn's contract.
    unsafe {
        asm!("tileloadd tmm7, [{w} + {s64}*1]", "tileloadd tmm5, [{a} + {k}*1]",
             "tilezero tmm3", "tdpbssd tmm3, tmm5, tmm7", "tilestored [{o} + {s64}*1], tmm3",
             w = in(reg) w, a = in(reg) lo, k = in(reg) 32usize, s64 = in(reg) 64usize,
             o = in(reg) s.0.as_mut_ptr(), options(nostack));
        if SPLIT {
            asm!("tileloadd tmm6, [{a} + {k}*1]", "tilezero tmm4", "tdpbssd tmm4, tmm6, tmm7",
                 "tilestored [{o} + {s64}*1], tmm4",
                 a = in(reg) hi, k = in(reg) 32usize, s64 = in(reg) 64usize,
                 o = in(reg) s.0[16..].as_mut_ptr(), options(nostack));
        }
    }
}

/// Q6_K: `avx512::q6_k` with the sums from AMX. Per super-block: the sixteen groups' levels
/// as signed `q - 32` (so `tdpbssd` gives the VNNI kernel's corrected sums directly), their
/// tile sums, then each row's float steps over the groups in the VNNI kernel's order.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn q6_k<const SPLIT: bool>(
    g: &[u8],
    a: &ActQuads,
    r0: usize,
    nr: usize,
    out: &mut Out,
    span: Range<usize>,
) {
    let nsb = a.k / 256;
    assert!(span.end <= nsb && g.len() >= span.len() * 3360 && a.block == 256);
    check_act::<SPLIT>(a, r0, nr);
    let (lo, hi) = planes::<SPLIT>(a, r0);
    let m4 = _mm512_set1_epi8(0x0f);
    let m30 = _mm512_set1_epi8(0x30);
    let c32 = _mm512_set1_epi8(32);
    // SAFETY: the only reference to this thread's scratch while the kernel runs.
    let Scratch {
        sums: s,
        weights: wt,
    } = unsafe { scratch() };
    if span.start == 0 {
        for r in 0..nr {
            out[r] = [0.0; 16];
        }
    }
    for sb in span.clone() {
        // SAFETY: super-block sb lies inside g, its 256 values of 16 padded rows inside each
        // plane (asserted); rows r < nr of `out` and of the activations exist; group grp's
        // tile bytes are the 256 at 256·grp of the 4 KiB of `wt`.
        unsafe {
            let u = g.as_ptr().add((sb - span.start) * 3360);
            let wb = wt.0.as_mut_ptr() as *mut u8;
            for grp in 0..16 {
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
                // Levels 4q + i of the group are tile row q.
                for (q, &v) in w.iter().enumerate() {
                    store(wb.add(256 * grp + 64 * q), _mm512_sub_epi8(v, c32));
                }
            }
            for grp in 0..16 {
                let off = at(sb * 256 + 16 * grp);
                sums16::<SPLIT>(lo.add(off), hi.add(off), wb.add(256 * grp), &mut s.0[grp]);
            }
            let sc: [__m512; 16] =
                std::array::from_fn(|grp| scales_u8::<true>(u.add(32 + 16 * grp)));
            let d = scales_f16(u);
            for r in 0..nr {
                let mut scaled = _mm512_setzero_ps();
                for grp in 0..16 {
                    let sf = _mm512_cvtepi32_ps(row_sum::<SPLIT>(&s.0[grp], r, 0));
                    scaled = _mm512_fmadd_ps(sf, sc[grp], scaled);
                }
                let da = _mm512_set1_ps(*a.d.get_unchecked((r0 + r) * nsb + sb));
                let o = out[r].as_mut_ptr();
                let v = _mm512_mul_ps(scaled, d);
                _mm512_storeu_ps(o, _mm512_fmadd_ps(v, da, _mm512_loadu_ps(o)));
            }
        }
    }
}

macro_rules! entry {
    ($name:ident, $kern:ident $(, $fmt:tt)?) => {
        /// # Safety
        /// The CPU must have the `Avx512` kernel set's features, [`available`] must be true and
        /// this thread's tiles loaded ([`Tiles::load`]).
        #[target_feature(enable = "avx512f,avx512bw,f16c")]
        pub unsafe fn $name(g: &[u8], a: &ActQuads, r0: usize, nr: usize, span: Range<usize>, out: &mut Out) {
            // SAFETY: same features as this fn; the kernels check their bounds.
            unsafe {
                if a.split {
                    $kern::<$($fmt,)? true>(g, a, r0, nr, out, span)
                } else {
                    $kern::<$($fmt,)? false>(g, a, r0, nr, out, span)
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
entry!(q4_k_group, q4_k, false);
entry!(q5_k_group, q4_k, true);
entry!(q6_k_group, q6_k);

//! The AVX-512 kernels of decode attention (`mod.rs`'s `decode_chunk`): one query row's scores
//! against 16 keys with the 16 sums transposed in registers, and the weighted sum of value rows
//! for four query rows at a time. Keys and values are f32, or f16 widened as they are loaded.

use super::KvElem;

/// Sixteen keys' or values' lanes at `p` under `mask` as f32 (zeros elsewhere): f32 as they
/// are, f16 widened.
///
/// # Safety
/// The lanes under `mask` must be readable; the CPU must have AVX-512F/BW/VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
unsafe fn load16<T: KvElem>(
    p: *const T,
    mask: std::arch::x86_64::__mmask16,
) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    // SAFETY: per this fn's contract.
    unsafe {
        if T::HALF {
            _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p as *const i16))
        } else {
            _mm512_maskz_loadu_ps(mask, p as *const f32)
        }
    }
}

/// Raw scores of one query row `q` (`d` values) against `m ≤ 16` keys, key `i` at `keys[i ·
/// ld..]`, into `out[..m]`: one 16-lane product sum per key (the head's `d` in 16-value steps,
/// the last one masked), then the 16 keys' lanes summed by an in-register transpose (pairs of
/// keys, quads, then 128-bit quarters), so the sums leave in one vector.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
unsafe fn scores16_avx512<T: KvElem>(q: &[f32], keys: &[T], ld: usize, m: usize, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let d = q.len();
    assert!((1..=16).contains(&m) && out.len() >= m && keys.len() >= (m - 1) * ld + d);
    // All 16 accumulators in registers (a fixed count: keys past `m` repeat key `m - 1`, and
    // the store leaves them out).
    let rows: [*const T; 16] = std::array::from_fn(|i| keys[i.min(m - 1) * ld..].as_ptr());
    let mut acc = [_mm512_setzero_ps(); 16];
    let mut c = 0;
    while c < d {
        let mask: __mmask16 = if d - c >= 16 {
            0xffff
        } else {
            (1u16 << (d - c)) - 1
        };
        // SAFETY: lanes under `mask` lie inside `q` and each key row (asserted above).
        unsafe {
            let x = _mm512_maskz_loadu_ps(mask, q.as_ptr().add(c));
            for i in 0..16 {
                let y = load16(rows[i].add(c), mask);
                acc[i] = _mm512_fmadd_ps(x, y, acc[i]);
            }
        }
        c += 16;
    }
    // Pairs: per 128-bit quarter, [a0+a2, b0+b2, a1+a3, b1+b3] of keys a, b.
    let pair =
        |a: __m512, b: __m512| _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    let t: [__m512; 8] = std::array::from_fn(|i| pair(acc[2 * i], acc[2 * i + 1]));
    // Quads: per quarter, the quarter's sums of four keys.
    let quad = |a: __m512, b: __m512| {
        let (a, b) = (_mm512_castps_pd(a), _mm512_castps_pd(b));
        _mm512_add_ps(
            _mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
            _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)),
        )
    };
    let u: [__m512; 4] = std::array::from_fn(|i| quad(t[2 * i], t[2 * i + 1]));
    // Quarters: keys 4i..4i + 4 of `u[i]` summed over its four quarters into quarter i.
    let half = |a: __m512, b: __m512| {
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b),
        )
    };
    let sums = half(half(u[0], u[1]), half(u[2], u[3]));
    // SAFETY: `out` holds `m` values (asserted); the store is masked to them.
    unsafe {
        _mm512_mask_storeu_ps(
            out.as_mut_ptr(),
            (((1u32 << m) - 1) & 0xffff) as __mmask16,
            sums,
        )
    };
}

/// [`scores16_avx512`] of query rows `q[at..at + d]` for each `at` in `rows` against the same
/// `m ≤ 16` keys, row `r`'s scores into `out[r · stride..][..m]`: one call per block of keys,
/// so the key pointers and masks are set up once for the rows, whose loads then hit L1.
///
/// # Safety
/// The CPU must have AVX-512F/BW/VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores16_rows_avx512<T: KvElem>(
    q: &[f32],
    rows: &[usize],
    d: usize,
    keys: &[T],
    ld: usize,
    m: usize,
    out: &mut [f32],
    stride: usize,
) {
    for (r, &at) in rows.iter().enumerate() {
        // SAFETY: per this fn's contract; the kernel checks its bounds.
        unsafe { scores16_avx512(&q[at..at + d], keys, ld, m, &mut out[r * stride..][..m]) };
    }
}

/// `acc_r += Σ_j w_rj · v_j` for the `n` rows of `acc` (each `dv` = `acc.len() / n` long) over
/// `keys` value rows (`vals`: rows and their distance), the weights of row `r` at `w[r ·
/// ld..]`. Rows go in passes of up to eight, each value vector loaded once for a pass's rows
/// (four rows × 64 columns of sums in registers, or eight × 32), keys in order. Keys weighted 0
/// are skipped (a non-finite value there cannot leak in).
///
/// # Safety
/// The CPU must have AVX-512F/BW/VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
pub(super) unsafe fn weighted_avx512<T: KvElem>(
    w: &[f32],
    ld: usize,
    n: usize,
    (vals, vs): (&[T], usize),
    keys: usize,
    acc: &mut [f32],
) {
    let dv = acc.len() / n.max(1);
    assert!(n >= 1 && keys >= 1 && w.len() >= (n - 1) * ld + keys);
    assert!(vals.len() >= (keys - 1) * vs + dv && acc.len() == n * dv);
    let mut r0 = 0;
    while r0 < n {
        let rn = (n - r0).min(8);
        let (w, vals, acc) = (&w[r0 * ld..], (vals, vs), &mut acc[r0 * dv..]);
        // SAFETY: per this fn's contract; the bounds are asserted above.
        unsafe {
            match rn {
                1 => weighted_pass::<T, 1, 4>(w, ld, vals, keys, acc, dv),
                2 => weighted_pass::<T, 2, 4>(w, ld, vals, keys, acc, dv),
                3 => weighted_pass::<T, 3, 4>(w, ld, vals, keys, acc, dv),
                4 => weighted_pass::<T, 4, 4>(w, ld, vals, keys, acc, dv),
                5 => weighted_pass::<T, 5, 2>(w, ld, vals, keys, acc, dv),
                6 => weighted_pass::<T, 6, 2>(w, ld, vals, keys, acc, dv),
                7 => weighted_pass::<T, 7, 2>(w, ld, vals, keys, acc, dv),
                _ => weighted_pass::<T, 8, 2>(w, ld, vals, keys, acc, dv),
            }
        }
        r0 += rn;
    }
}

/// The first `R` rows of [`weighted_avx512`] (`w` and `acc` start at them), `C` vectors of 16
/// columns at a time.
///
/// # Safety
/// As [`weighted_avx512`], whose asserts cover the reads and writes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
unsafe fn weighted_pass<T: KvElem, const R: usize, const C: usize>(
    w: &[f32],
    ld: usize,
    (vals, vs): (&[T], usize),
    keys: usize,
    acc: &mut [f32],
    dv: usize,
) {
    use std::arch::x86_64::*;
    for c0 in (0..dv).step_by(16 * C) {
        let mask: [__mmask16; C] = std::array::from_fn(|i| {
            let left = dv.saturating_sub(c0 + 16 * i).min(16);
            ((1u32 << left) - 1) as __mmask16
        });
        let mut a = [[_mm512_setzero_ps(); C]; R];
        for j in 0..keys {
            // SAFETY: lanes under `mask` lie inside value row `j` (the caller's asserts).
            let v: [__m512; C] = std::array::from_fn(|i| unsafe {
                load16(vals.as_ptr().add(j * vs + c0 + 16 * i), mask[i])
            });
            for (r, ar) in a.iter_mut().enumerate() {
                // SAFETY: row r's weights hold `keys` values (the caller's asserts).
                let wr = unsafe { *w.get_unchecked(r * ld + j) };
                if wr != 0.0 {
                    let b = _mm512_set1_ps(wr);
                    for (x, &vi) in ar.iter_mut().zip(&v) {
                        *x = _mm512_fmadd_ps(b, vi, *x);
                    }
                }
            }
        }
        for (r, ar) in a.iter().enumerate() {
            for (i, &x) in ar.iter().enumerate() {
                let at = r * dv + c0 + 16 * i;
                // SAFETY: lanes under `mask` lie inside row `r` of `acc`.
                unsafe {
                    _mm512_mask_storeu_ps(acc.as_mut_ptr().add(at.min(acc.len())), mask[i], x)
                };
            }
        }
    }
}

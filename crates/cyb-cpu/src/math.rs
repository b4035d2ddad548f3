//! Branch-free f32 `exp`, `tanh` and `erf` that vectorize (the libm calls do not), for the
//! softmax of attention, the GELUs of encoders and the gated activations of vocoders.

/// `e^x` to about 1 ulp (Cephes' expf polynomial on `x - n·ln2`, `|x - n·ln2| ≤ ln2/2`);
/// 0 below -87.3 (where f32 turns denormal), clamped above 88.3 (callers pass x ≤ 0).
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    let xc = x.clamp(-87.3, 88.3);
    // Round to nearest by the 1.5·2^23 trick (vectorizes, unlike `round`).
    let shifted = xc * std::f32::consts::LOG2_E + 12_582_912.0;
    let n = shifted - 12_582_912.0;
    let r = xc - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let z = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 0.166_666_65)
        * r
        + 0.5;
    let e = p * z + r + 1.0;
    // `shifted`'s low mantissa bits hold n + 2^22 as an integer (|n| ≤ 127); taking them from
    // the bits skips the saturating float-to-int cast, which does not vectorize well.
    let n_int = shifted.to_bits().wrapping_sub(0x4B40_0000);
    let scale = f32::from_bits(n_int.wrapping_add(127) << 23);
    if x < -87.3 {
        0.0
    } else {
        e * scale
    }
}

/// `tanh x` to a few ulp: Cephes' tanhf polynomial in x² below |x| = 0.625, `1 − 2/(e^{2|x|} + 1)`
/// above (both computed, one kept, so the loop vectorizes); NaN stays NaN, ±∞ gives ±1.
#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    let z = x.abs();
    // e^{2z} is past 2^63 from z = 22 on, where 2/(s + 1) no longer reaches 1's ulp.
    let s = exp(2.0 * z.min(22.0));
    let big = 1.0 - 2.0 / (s + 1.0);
    let q = z * z;
    let p = (((-5.704_988_7e-3 * q + 2.063_909e-2) * q - 5.373_971_6e-2) * q + 1.333_144_2e-1) * q
        - 3.333_328e-1;
    let small = p * q * z + z;
    let r = if z > 0.625 { big } else { small };
    r.copysign(x)
}

/// erf by Abramowitz–Stegun 7.1.26 (absolute error ≤ 1.5e-7) in f32.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152 + t * 1.061_405_4))));
    let r = 1.0 - poly * exp(-z * z);
    r.copysign(x)
}

/// The erf GELU, `x/2 · (1 + erf(x/√2))`.
#[inline(always)]
pub(crate) fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

#[cfg(test)]
mod tests {
    #[test]
    fn exp_and_erf_match_libm() {
        let mut worst = (0f64, 0f64);
        for i in -20_000..20_000 {
            let x = i as f32 * 0.0043;
            let e = super::exp(x) as f64;
            let want = (x as f64).exp();
            worst.0 = worst.0.max(((e - want) / want).abs());
            let g = super::gelu_erf(x) as f64;
            let xd = x as f64;
            let want = 0.5 * xd * (1.0 + libm_erf(xd / 2f64.sqrt()));
            worst.1 = worst.1.max((g - want).abs());
        }
        assert!(worst.0 < 3e-7, "exp relative error {}", worst.0);
        assert!(worst.1 < 1e-6, "gelu absolute error {}", worst.1);
        let mut tanh_err = 0f64;
        for i in -30_000..30_000 {
            let x = i as f32 * 0.00071;
            let want = (x as f64).tanh();
            let err = (super::tanh(x) as f64 - want).abs() / want.abs().max(1e-30);
            tanh_err = tanh_err.max(if x == 0.0 { 0.0 } else { err });
        }
        assert!(tanh_err < 4e-7, "tanh relative error {tanh_err}");
        assert_eq!(super::tanh(0.0), 0.0);
        assert_eq!(super::tanh(f32::INFINITY), 1.0);
        assert_eq!(super::tanh(-50.0), -1.0);
        assert!(super::tanh(f32::NAN).is_nan());
        assert_eq!(super::exp(-100.0), 0.0);
        assert_eq!(super::exp(f32::NEG_INFINITY), 0.0);
    }

    /// erf by its Maclaurin series (|x| < 3) or continued fraction, in f64: exact enough to
    /// judge an f32 approximation.
    fn libm_erf(x: f64) -> f64 {
        let z = x.abs();
        let r = if z < 3.0 {
            let (mut term, mut sum, mut n) = (z, z, 0.0);
            while term.abs() > 1e-17 * sum.abs() {
                n += 1.0;
                term *= -z * z / n;
                sum += term / (2.0 * n + 1.0);
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            let mut f = 0.0;
            for k in (1..60).rev() {
                f = (k as f64 / 2.0) / (z + f);
            }
            1.0 - (-z * z).exp() / (std::f64::consts::PI.sqrt() * (z + f))
        };
        r.copysign(x)
    }
}

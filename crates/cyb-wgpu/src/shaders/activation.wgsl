// Activation functions shared by unary.wgsl and binary.wgsl.

fn silu_f(x: f32) -> f32 { return x / (1.0 + exp(-x)); }

// Abramowitz–Stegun 7.1.26 has |error| ≤ 1.5e-7; this rational form (W. J. Cody style) is used
// instead for |x| < 0.5 where relative accuracy matters, and the A–S form beyond.
fn erf_f(x: f32) -> f32 {
    let a = abs(x);
    if (a < 0.5) {
        let z = x * x;
        // Taylor series to x^13: truncation error below 1e-9 for |x| < 0.5.
        var term = x;
        var sum = x;
        for (var n = 1u; n < 7u; n++) {
            term = -term * z / f32(n);
            sum += term / f32(2u * n + 1u);
        }
        return 1.1283791670955126 * sum;
    }
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
        + 0.254829592) * t * exp(-a * a);
    return select(-y, y, x >= 0.0);
}

fn tanh_f(x: f32) -> f32 {
    // Clamped: some drivers compute tanh through exp and overflow to NaN for large |x|.
    let c = clamp(x, -15.0, 15.0);
    let e = exp(2.0 * c);
    return (e - 1.0) / (e + 1.0);
}

fn gelu_erf(x: f32) -> f32 { return 0.5 * x * (1.0 + erf_f(x / 1.4142135623730951)); }
fn gelu_tanh(x: f32) -> f32 {
    return 0.5 * x * (1.0 + tanh_f(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}


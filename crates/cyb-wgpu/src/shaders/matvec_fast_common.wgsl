// Activation helpers of matvec_fast.wgsl (one copy per kernel, whatever its weight bindings).

// Σ of the activations a[p .. p + 4] times the four bytes of `x` (low to high), each taken as
// an unsigned value minus `bias`.
fn dotu(x: u32, p: u32, bias: f32) -> f32 {
    let q = vec4<f32>((vec4<u32>(x) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu)) - bias;
    return dot(q, vec4<f32>(A[p], A[p + 1u], A[p + 2u], A[p + 3u]));
}

// The same with the bytes signed.
fn dots(x: u32, p: u32) -> f32 {
    let q = vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(x) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
    return dot(q, vec4<f32>(A[p], A[p + 1u], A[p + 2u], A[p + 3u]));
}

fn asum4(p: u32) -> f32 {
    return A[p] + A[p + 1u] + A[p + 2u] + A[p + 3u];
}

// Helpers of matvec_fast.wgsl (one copy per kernel, whatever its weight bindings).

// The four bytes of `x` (low to high) as unsigned values.
fn ubytes(x: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(x) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu));
}

// The four bytes of `x` (low to high) as signed values.
fn sbytes(x: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(x) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}

// The low four bits of `b`, bit e moved to bit 8e (one bit per byte).
fn spread4(b: u32) -> u32 {
    return (b & 1u) | ((b & 2u) << 7u) | ((b & 4u) << 14u) | ((b & 8u) << 21u);
}

// This thread's share of one weight row's dot products with MB activation rows, exactly as
// matmul.wgsl's `main` sums them. A template: the host instantiates it once per weight binding,
// `@` replaced by the binding's number (W@, deq@).
fn dot@(j: u32, i0: u32, t: u32) -> array<f32, MB> {
    let m = pu(0u);
    let k = pu(1u);
    let row = j * pu(2u);
    var acc: array<f32, MB>;
    for (var r = 0u; r < MB; r++) { acc[r] = 0.0; }
    if (k % 4u == 0u) {
        for (var c = t * 4u; c < k; c += 256u) {
            let w = vec4<f32>(deq@(row + (c / BLOCK) * BYTES, c % BLOCK),
                              deq@(row + ((c + 1u) / BLOCK) * BYTES, (c + 1u) % BLOCK),
                              deq@(row + ((c + 2u) / BLOCK) * BYTES, (c + 2u) % BLOCK),
                              deq@(row + ((c + 3u) / BLOCK) * BYTES, (c + 3u) % BLOCK));
            for (var r = 0u; r < MB; r++) {
                if (i0 + r < m) {
                    let a = (i0 + r) * k + c;
                    acc[r] += dot(vec4<f32>(A[a], A[a + 1u], A[a + 2u], A[a + 3u]), w);
                }
            }
        }
    } else {
        for (var col = t; col < k; col += 64u) {
            let w = deq@(row + (col / BLOCK) * BYTES, col % BLOCK);
            for (var r = 0u; r < MB; r++) {
                if (i0 + r < m) { acc[r] += A[(i0 + r) * k + col] * w; }
            }
        }
    }
    return acc;
}

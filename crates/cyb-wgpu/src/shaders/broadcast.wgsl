// Broadcast indexing of two-input pointwise ops (rank ≤ 4, left-padded with 1s). From word `p`:
// p+0 n, p+1..4 output dims, p+5..8 strides of A, p+9..12 strides of B (0 where broadcast).

// (A, B) elements of output element `i`.
fn offsets_at(i: u32, p: u32) -> vec2<u32> {
    var rem = i;
    var oa = 0u;
    var ob = 0u;
    for (var d = 3i; d >= 0i; d--) {
        let u = u32(d);
        let dim = pu(p + 1u + u);
        let c = rem % dim;
        rem = rem / dim;
        oa += c * pu(p + 5u + u);
        ob += c * pu(p + 9u + u);
    }
    return vec2<u32>(oa, ob);
}

fn apply(op: u32, a: f32, b: f32) -> f32 {
    switch op {
        case 0u: { return a + b; }
        case 1u: { return a - b; }
        case 2u: { return a * b; }
        default: { return a / b; }
    }
}

// Strided copy of 4-byte elements: permute, transpose, slice, concat and split are all this.
// Params: 0 n, 1..4 iteration dims (rank ≤ 4, left-padded with 1s), 5..8 source strides,
// 9..12 destination strides, 13 source base, 14 destination base (elements).

@group(0) @binding(1) var<storage, read> X: array<u32>;
@group(0) @binding(2) var<storage, read_write> O: array<u32>;

@compute @workgroup_size(64)
fn copy(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = flat_wg(wg, nw) * 64u + t;
    if (i >= pu(0u)) { return; }
    var rem = i;
    var src = pu(13u);
    var dst = pu(14u);
    for (var d = 3i; d >= 0i; d--) {
        let u = u32(d);
        let dim = pu(1u + u);
        let c = rem % dim;
        rem = rem / dim;
        src += c * pu(5u + u);
        dst += c * pu(9u + u);
    }
    O[dst] = X[src];
}

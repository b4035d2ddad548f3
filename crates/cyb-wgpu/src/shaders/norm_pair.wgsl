// Two independent RMS norms with one eps and weight offset in one launch (such as Qwen3's q and
// k norms, rows of a head's length): one workgroup of 64 threads per row of either.
// Params: 0 rows, 1 d of the first, 2 eps, 3 weight offset, 4 rows, 5 d of the second.

@group(0) @binding(1) var<storage, read> X0: array<f32>;
@group(0) @binding(2) var<storage, read> X1: array<f32>;
@group(0) @binding(3) var<storage, read> W0: array<f32>;
@group(0) @binding(4) var<storage, read> W1: array<f32>;
@group(0) @binding(5) var<storage, read_write> O0: array<f32>;
@group(0) @binding(6) var<storage, read_write> O1: array<f32>;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn norm_pair(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let id = flat_wg(wg, nw);
    let second = id >= pu(0u);
    let row = select(id, id - pu(0u), second);
    let d = select(pu(1u), pu(5u), second);
    let valid = row < select(pu(0u), pu(4u), second);
    var s = 0.0;
    if (valid) {
        if (second) {
            for (var c = t; c < d; c += 64u) { let v = X1[row * d + c]; s += v * v; }
        } else {
            for (var c = t; c < d; c += 64u) { let v = X0[row * d + c]; s += v * v; }
        }
    }
    red[t] = s;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) { red[t] += red[t + k]; }
        workgroupBarrier();
    }
    if (valid) {
        let inv = 1.0 / sqrt(red[0] / f32(d) + pf(2u));
        let off = pf(3u);
        if (second) {
            for (var c = t; c < d; c += 64u) {
                O1[row * d + c] = X1[row * d + c] * inv * (W1[c] + off);
            }
        } else {
            for (var c = t; c < d; c += 64u) {
                O0[row * d + c] = X0[row * d + c] * inv * (W0[c] + off);
            }
        }
    }
}

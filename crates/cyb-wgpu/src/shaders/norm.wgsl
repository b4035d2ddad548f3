// RMS norm over rows of length d: y = x / sqrt(mean(x²) + eps) · (w + offset).
// One workgroup of 64 threads per row. Params: 0 rows, 1 d, 2 eps, 3 weight offset.

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> Wt: array<f32>;
@group(0) @binding(3) var<storage, read_write> O: array<f32>;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn rms_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let row = flat_wg(wg, nw);
    let valid = row < pu(0u);
    let d = pu(1u);
    var s = 0.0;
    if (valid) {
        for (var c = t; c < d; c += 64u) { let v = X[row * d + c]; s += v * v; }
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
        for (var c = t; c < d; c += 64u) {
            O[row * d + c] = X[row * d + c] * inv * (Wt[c] + off);
        }
    }
}

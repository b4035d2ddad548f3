// Softmax over rows of length d (the last axis). One workgroup per row. Params: 0 rows, 1 d.

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> O: array<f32>;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn softmax(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let row = flat_wg(wg, nw);
    let valid = row < pu(0u);
    let d = pu(1u);
    let neg_inf = bitcast<f32>(0xff800000u);
    var mx = neg_inf;
    if (valid) { for (var c = t; c < d; c += 64u) { mx = max(mx, X[row * d + c]); } }
    red[t] = mx;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) { red[t] = max(red[t], red[t + k]); }
        workgroupBarrier();
    }
    let m = red[0];
    workgroupBarrier();
    var s = 0.0;
    if (valid) { for (var c = t; c < d; c += 64u) { s += exp(X[row * d + c] - m); } }
    red[t] = s;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) { red[t] += red[t + k]; }
        workgroupBarrier();
    }
    if (valid) {
        let sum = red[0];
        for (var c = t; c < d; c += 64u) { O[row * d + c] = exp(X[row * d + c] - m) / sum; }
    }
}

// Layer norm over rows of length d: y = (x - mean) / sqrt(var + eps) · w + b, var the biased
// variance (two passes: the mean, then the squared deviations). One workgroup of 64 threads
// per row. Params: 0 rows, 1 d, 2 eps, 3 has w, 4 has b (absent ones are bound to X, unread).

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> Wt: array<f32>;
@group(0) @binding(3) var<storage, read> Bs: array<f32>;
@group(0) @binding(4) var<storage, read_write> O: array<f32>;

var<workgroup> red: array<f32, 64>;

fn row_sum(t: u32, v: f32) -> f32 {
    red[t] = v;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) { red[t] += red[t + k]; }
        workgroupBarrier();
    }
    let s = red[0];
    workgroupBarrier();
    return s;
}

@compute @workgroup_size(64)
fn layer_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
              @builtin(local_invocation_index) t: u32) {
    let row = flat_wg(wg, nw);
    let valid = row < pu(0u);
    let d = pu(1u);
    var s = 0.0;
    if (valid) { for (var c = t; c < d; c += 64u) { s += X[row * d + c]; } }
    let mean = row_sum(t, s) / f32(d);
    var q = 0.0;
    if (valid) {
        for (var c = t; c < d; c += 64u) { let v = X[row * d + c] - mean; q += v * v; }
    }
    let inv = 1.0 / sqrt(row_sum(t, q) / f32(d) + pf(2u));
    if (valid) {
        for (var c = t; c < d; c += 64u) {
            var y = (X[row * d + c] - mean) * inv;
            if (pu(3u) == 1u) { y = y * Wt[c]; }
            if (pu(4u) == 1u) { y = y + Bs[c]; }
            O[row * d + c] = y;
        }
    }
}

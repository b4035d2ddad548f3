// RMS norm over rows of length d: y = x / sqrt(mean(x²) + eps) · (w + offset).
// One workgroup of 256 threads per row, loads issued in groups of four before the stores (as
// add_norm.wgsl). Params: 0 rows, 1 d, 2 eps, 3 weight offset.

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> Wt: array<f32>;
@group(0) @binding(3) var<storage, read_write> O: array<f32>;

var<workgroup> red: array<f32, 256>;

// X at element c of the row at base, 0 past its end d.
fn xat(base: u32, c: u32, d: u32) -> f32 {
    if (c < d) { return X[base + c]; }
    return 0.0;
}

@compute @workgroup_size(256)
fn rms_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let row = flat_wg(wg, nw);
    let valid = row < pu(0u);
    let d = pu(1u);
    let base = row * d;
    var s = 0.0;
    if (valid) {
        for (var c0 = t; c0 < d; c0 += 1024u) {
            let v0 = xat(base, c0, d);
            let v1 = xat(base, c0 + 256u, d);
            let v2 = xat(base, c0 + 512u, d);
            let v3 = xat(base, c0 + 768u, d);
            s += (v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3);
        }
    }
    red[t] = s;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if (t < k) { red[t] += red[t + k]; }
        workgroupBarrier();
    }
    if (valid) {
        let inv = 1.0 / sqrt(red[0] / f32(d) + pf(2u));
        let off = pf(3u);
        for (var c0 = t; c0 < d; c0 += 1024u) {
            var v = vec4<f32>(0.0);
            for (var u = 0u; u < 4u; u++) {
                let c = c0 + 256u * u;
                if (c < d) { v[u] = X[base + c] * inv * (Wt[c] + off); }
            }
            for (var u = 0u; u < 4u; u++) {
                let c = c0 + 256u * u;
                if (c < d) { O[base + c] = v[u]; }
            }
        }
    }
}

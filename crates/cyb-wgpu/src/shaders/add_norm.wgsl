// Residual add and RMS norm in one pass (Op::AddRmsNorm): s = a + b, y = s / sqrt(mean(s²) +
// eps) · (w + offset), both written. One workgroup of 256 threads per row of length d; each
// thread takes elements t, t + 256, ... in groups of four whose loads are all issued before
// its stores (a store may alias a later load as far as the compiler knows, so loads and stores
// taken one element at a time would each wait a full memory latency).
// Params: 0 rows, 1 d, 2 eps, 3 weight offset.

@group(0) @binding(1) var<storage, read> A: array<f32>;
@group(0) @binding(2) var<storage, read> B: array<f32>;
@group(0) @binding(3) var<storage, read> Wt: array<f32>;
@group(0) @binding(4) var<storage, read_write> S: array<f32>;
@group(0) @binding(5) var<storage, read_write> Y: array<f32>;

var<workgroup> red: array<f32, 256>;

// A + B at element c of the row at base, 0 past its end d.
fn ab(base: u32, c: u32, d: u32) -> f32 {
    if (c < d) { return A[base + c] + B[base + c]; }
    return 0.0;
}

@compute @workgroup_size(256)
fn add_rms_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let row = flat_wg(wg, nw);
    let valid = row < pu(0u);
    let d = pu(1u);
    let base = row * d;
    var acc = 0.0;
    if (valid) {
        // Four elements' loads issued before their squares are summed (plain lets: a private
        // array may live in slow local memory).
        for (var c0 = t; c0 < d; c0 += 1024u) {
            let v0 = ab(base, c0, d);
            let v1 = ab(base, c0 + 256u, d);
            let v2 = ab(base, c0 + 512u, d);
            let v3 = ab(base, c0 + 768u, d);
            acc += (v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3);
        }
    }
    red[t] = acc;
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
            var w = vec4<f32>(0.0);
            for (var u = 0u; u < 4u; u++) {
                let c = c0 + 256u * u;
                if (c < d) {
                    v[u] = A[base + c] + B[base + c];
                    w[u] = Wt[c] + off;
                }
            }
            for (var u = 0u; u < 4u; u++) {
                let c = c0 + 256u * u;
                if (c < d) {
                    S[base + c] = v[u];
                    Y[base + c] = v[u] * inv * w[u];
                }
            }
        }
    }
}

// Residual add and RMS norm in one pass (Op::AddRmsNorm): s = a + b, y = s / sqrt(mean(s²) +
// eps) · (w + offset), both written. One workgroup of 64 threads per row of length d.
// Params: 0 rows, 1 d, 2 eps, 3 weight offset.

@group(0) @binding(1) var<storage, read> A: array<f32>;
@group(0) @binding(2) var<storage, read> B: array<f32>;
@group(0) @binding(3) var<storage, read> Wt: array<f32>;
@group(0) @binding(4) var<storage, read_write> S: array<f32>;
@group(0) @binding(5) var<storage, read_write> Y: array<f32>;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn add_rms_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let row = flat_wg(wg, nw);
    let valid = row < pu(0u);
    let d = pu(1u);
    var acc = 0.0;
    if (valid) {
        for (var c = t; c < d; c += 64u) {
            let v = A[row * d + c] + B[row * d + c];
            S[row * d + c] = v;
            acc += v * v;
        }
    }
    red[t] = acc;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) { red[t] += red[t + k]; }
        workgroupBarrier();
    }
    if (valid) {
        let inv = 1.0 / sqrt(red[0] / f32(d) + pf(2u));
        let off = pf(3u);
        // Each thread reads back only the sums it wrote itself: no barrier needed for S.
        for (var c = t; c < d; c += 64u) {
            Y[row * d + c] = S[row * d + c] * inv * (Wt[c] + off);
        }
    }
}

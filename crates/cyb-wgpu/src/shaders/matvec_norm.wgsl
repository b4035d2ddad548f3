// A decode step's RMS norm and the matvecs that read its output in one launch (launch.rs):
// every workgroup first normalizes the activation row into workgroup memory (XS), with the
// sums and products of norm.wgsl's `rms_norm` or add_norm.wgsl's `add_rms_norm` in the same
// order, so the normalized values are the same; then it computes its rows of the two or three
// products (and the gated unit) of matvec_multi_body.wgsl's `mv`, reading the activations from
// XS (the host renames `A4[` to `XS[` in the matvec code of this kernel). Workgroup 0 also
// writes the norm's own outputs: the sum S = A + B (with a residual) and the normalized row Yn.
// Params: 0-8 as matvec_multi.wgsl (m = 1; k = d, the row's length: a multiple of 4, at most
// 4 · 1024), 9 eps, 10 weight offset, 11 residual (1: A + B is normalized, 0: A).

@group(0) @binding(1) var<storage, read> A: array<f32>;
@group(0) @binding(2) var<storage, read> W0: array<u32>;
@group(0) @binding(3) var<storage, read> W1: array<u32>;
@group(0) @binding(4) var<storage, read> W2: array<u32>;
@group(0) @binding(5) var<storage, read> B: array<f32>;
@group(0) @binding(6) var<storage, read> Wn: array<f32>;
@group(0) @binding(7) var<storage, read_write> Y0: array<f32>;
@group(0) @binding(8) var<storage, read_write> Y1: array<f32>;
@group(0) @binding(9) var<storage, read_write> Y2: array<f32>;
@group(0) @binding(10) var<storage, read_write> G: array<f32>;
@group(0) @binding(11) var<storage, read_write> S: array<f32>;
@group(0) @binding(12) var<storage, read_write> Yn: array<f32>;

var<workgroup> XS: array<vec4<f32>, 1024>;

// The value normalized at element c (0 past the row's end d).
fn xin(c: u32, d: u32) -> f32 {
    if (c >= d) { return 0.0; }
    if (pu(11u) != 0u) { return A[c] + B[c]; }
    return A[c];
}

@compute @workgroup_size(256)
fn mv_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
           @builtin(local_invocation_index) t: u32) {
    let id = flat_wg(wg, nw);
    let d = pu(1u);
    var acc = 0.0;
    for (var c0 = t; c0 < d; c0 += 1024u) {
        let v0 = xin(c0, d);
        let v1 = xin(c0 + 256u, d);
        let v2 = xin(c0 + 512u, d);
        let v3 = xin(c0 + 768u, d);
        acc += (v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3);
    }
    red[t] = acc;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (t < s) { red[t] += red[t + s]; }
        workgroupBarrier();
    }
    let inv = 1.0 / sqrt(red[0] / f32(d) + pf(9u));
    let off = pf(10u);
    let residual = pu(11u) != 0u;
    for (var c0 = t; c0 < d; c0 += 1024u) {
        var v = vec4<f32>(0.0);
        var w = vec4<f32>(0.0);
        for (var u = 0u; u < 4u; u++) {
            let c = c0 + 256u * u;
            if (c < d) {
                v[u] = xin(c, d);
                w[u] = Wn[c] + off;
            }
        }
        for (var u = 0u; u < 4u; u++) {
            let c = c0 + 256u * u;
            if (c < d) {
                let y = v[u] * inv * w[u];
                XS[c / 4u][c % 4u] = y;
                if (id == 0u) {
                    if (residual) { S[c] = v[u]; }
                    Yn[c] = y;
                }
            }
        }
    }
    // Every thread has read red[0] before `mv_rows` reuses it, and XS is complete.
    workgroupBarrier();
    mv_rows(id, t);
}

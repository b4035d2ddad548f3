// The RMS norm of a decode row and the matvecs of its output in one launch (launch.rs): the
// launch before it (matvec_res.wgsl) wrote the residual sum S = A and SW = A · (w + offset),
// the sum times the norm's weights; every workgroup here sums A's squares itself (one vec4
// load per 1024 values per thread), and its dot products read SW and are scaled by the
// inverse RMS at the end (matvec_multi_body.wgsl's `mv_rows`, its activation reads renamed to
// `xn`). Workgroup 0 also writes the normalized row Yn = SW · inverse RMS, the norm's own
// output.
// Params: 0-8 as matvec_multi.wgsl (m = 1; k = d, the row's length: a multiple of 4, at most
// 4096), 9 eps.

@group(0) @binding(1) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> A4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> W0: array<WT>;
@group(0) @binding(3) var<storage, read> W1: array<WT>;
@group(0) @binding(4) var<storage, read> W2: array<WT>;
@group(0) @binding(5) var<storage, read> SW4: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> Y0: array<f32>;
@group(0) @binding(7) var<storage, read_write> Y1: array<f32>;
@group(0) @binding(8) var<storage, read_write> Y2: array<f32>;
@group(0) @binding(9) var<storage, read_write> G: array<f32>;
@group(0) @binding(10) var<storage, read_write> Yn4: array<vec4<f32>>;

// Values 4i .. 4i + 3 of the row times the norm's weights (the inverse RMS comes later).
fn xn(i: u32) -> vec4<f32> {
    return SW4[i];
}

// Values 4i .. 4i + 3 of the row, 0 past its end (n4 vec4s).
fn row4(i: u32, n4: u32) -> vec4<f32> {
    if (i < n4) { return A4[i]; }
    return vec4<f32>(0.0);
}

@compute @workgroup_size(256)
fn mv_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
           @builtin(local_invocation_index) t: u32) {
    let id = flat_wg(wg, nw);
    let d = pu(1u);
    let n4 = d / 4u;
    let v0 = row4(t, n4);
    let v1 = row4(t + 256u, n4);
    let v2 = row4(t + 512u, n4);
    let v3 = row4(t + 768u, n4);
    let sq = (dot(v0, v0) + dot(v1, v1)) + (dot(v2, v2) + dot(v3, v3));
    let total = wg_sum(t, sq);
    let inv = 1.0 / sqrt(total / f32(d) + pf(9u));
    ROW_SCALE = inv;
    if (id == 0u) {
        for (var i = t; i < n4; i += 256u) { Yn4[i] = SW4[i] * inv; }
    }
    // `wg_sum` ends with a barrier: `mv_rows` may reuse `red`.
    mv_rows(id, t);
}

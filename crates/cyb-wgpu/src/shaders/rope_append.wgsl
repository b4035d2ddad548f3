// The rope of q and k and the KV cache appends of k (rotated) and v in one launch. q and k as
// rope_pair (params 0-8); then 9 end of k's workgroups; k's append: 10-13 dims, 14-17 cache
// strides, 18 cache base; v's append: 19 n, 20-23 dims, 24-27 cache strides, 28 cache base
// (0 n: no v append). The appends read contiguous sources.

@group(0) @binding(1) var<storage, read> X0: array<f32>;
@group(0) @binding(2) var<storage, read> X1: array<f32>;
@group(0) @binding(3) var<storage, read> T: array<f32>;
@group(0) @binding(4) var<storage, read> V: array<f32>;
@group(0) @binding(5) var<storage, read_write> O0: array<f32>;
@group(0) @binding(6) var<storage, read_write> O1: array<f32>;
@group(0) @binding(7) var<storage, read_write> KC: array<f32>;
@group(0) @binding(8) var<storage, read_write> VC: array<f32>;

@compute @workgroup_size(64)
fn rope_append(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let id = flat_wg(wg, nw);
    if (id < pu(8u)) {
        let idx = id * 64u + t;
        if (idx >= pu(0u)) { return; }
        let r = rope_at(idx, pu(1u));
        if (!r.rotated) { O0[idx] = X0[idx]; return; }
        O0[idx] = rotate(X0[r.a], X0[r.b], T[r.tab], T[r.tab + 1u], r.side);
    } else if (id < pu(9u)) {
        let idx = (id - pu(8u)) * 64u + t;
        if (idx >= pu(6u)) { return; }
        let r = rope_at(idx, pu(7u));
        var y = X1[idx];
        if (r.rotated) { y = rotate(X1[r.a], X1[r.b], T[r.tab], T[r.tab + 1u], r.side); }
        O1[idx] = y;
        KC[scatter_offset(idx, 10u, 14u, pu(18u))] = y;
    } else {
        let i = (id - pu(9u)) * 64u + t;
        if (i >= pu(19u)) { return; }
        VC[scatter_offset(i, 20u, 24u, pu(28u))] = V[i];
    }
}

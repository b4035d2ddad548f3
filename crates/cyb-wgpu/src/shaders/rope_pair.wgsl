@group(0) @binding(1) var<storage, read> X0: array<f32>;
@group(0) @binding(2) var<storage, read> X1: array<f32>;
@group(0) @binding(3) var<storage, read> T: array<f32>;
@group(0) @binding(4) var<storage, read_write> O0: array<f32>;
@group(0) @binding(5) var<storage, read_write> O1: array<f32>;

@compute @workgroup_size(64)
fn rope_pair(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let id = flat_wg(wg, nw);
    let first = pu(8u);
    if (id < first) {
        let idx = id * 64u + t;
        if (idx >= pu(0u)) { return; }
        let r = rope_at(idx, pu(1u));
        if (!r.rotated) { O0[idx] = X0[idx]; return; }
        O0[idx] = rotate(X0[r.a], X0[r.b], T[r.tab], T[r.tab + 1u], r.side);
    } else {
        let idx = (id - first) * 64u + t;
        if (idx >= pu(6u)) { return; }
        let r = rope_at(idx, pu(7u));
        if (!r.rotated) { O1[idx] = X1[idx]; return; }
        O1[idx] = rotate(X1[r.a], X1[r.b], T[r.tab], T[r.tab + 1u], r.side);
    }
}

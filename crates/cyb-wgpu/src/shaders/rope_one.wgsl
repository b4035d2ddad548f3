@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> T: array<f32>;
@group(0) @binding(3) var<storage, read_write> O: array<f32>;

@compute @workgroup_size(64)
fn rope(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let idx = flat_wg(wg, nw) * 64u + t;
    if (idx >= pu(0u)) { return; }
    let r = rope_at(idx, pu(1u));
    if (!r.rotated) { O[idx] = X[idx]; return; }
    O[idx] = rotate(X[r.a], X[r.b], T[r.tab], T[r.tab + 1u], r.side);
}

@group(0) @binding(1) var<storage, read> X: array<u32>;
@group(0) @binding(2) var<storage, read_write> O: array<u32>;

@compute @workgroup_size(64)
fn copy(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = flat_wg(wg, nw) * 64u + t;
    if (i >= pu(0u)) { return; }
    let o = copy_offsets(i, 0u);
    O[o.y] = X[o.x];
}

// Two independent broadcasting binary ops of one kind in one launch (such as the q and k bias
// adds). Params: 0..12 the first's (broadcast.wgsl), 13..25 the second's, 26 the first's
// workgroups, 27 the op (0 add, 1 sub, 2 mul, 3 div).

@group(0) @binding(1) var<storage, read> A0: array<f32>;
@group(0) @binding(2) var<storage, read> B0: array<f32>;
@group(0) @binding(3) var<storage, read> A1: array<f32>;
@group(0) @binding(4) var<storage, read> B1: array<f32>;
@group(0) @binding(5) var<storage, read_write> O0: array<f32>;
@group(0) @binding(6) var<storage, read_write> O1: array<f32>;

@compute @workgroup_size(64)
fn binary_pair(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let id = flat_wg(wg, nw);
    let first = pu(26u);
    let op = pu(27u);
    if (id < first) {
        let i = id * 64u + t;
        if (i >= pu(0u)) { return; }
        let o = offsets_at(i, 0u);
        O0[i] = apply(op, A0[o.x], B0[o.y]);
    } else {
        let i = (id - first) * 64u + t;
        if (i >= pu(13u)) { return; }
        let o = offsets_at(i, 13u);
        O1[i] = apply(op, A1[o.x], B1[o.y]);
    }
}

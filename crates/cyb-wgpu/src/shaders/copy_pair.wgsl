// Two independent copies in one launch (two consecutive ops, such as the key and value
// appends of a layer). Word 30: workgroups of the first copy; the second's follow.

@group(0) @binding(1) var<storage, read> X0: array<u32>;
@group(0) @binding(2) var<storage, read> X1: array<u32>;
@group(0) @binding(3) var<storage, read_write> O0: array<u32>;
@group(0) @binding(4) var<storage, read_write> O1: array<u32>;

@compute @workgroup_size(64)
fn copy_pair(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let id = flat_wg(wg, nw);
    let first = pu(30u);
    if (id < first) {
        let i = id * 64u + t;
        if (i >= pu(0u)) { return; }
        let o = copy_offsets(i, 0u);
        O0[o.y] = X0[o.x];
    } else {
        let i = (id - first) * 64u + t;
        if (i >= pu(15u)) { return; }
        let o = copy_offsets(i, 15u);
        O1[o.y] = X1[o.x];
    }
}

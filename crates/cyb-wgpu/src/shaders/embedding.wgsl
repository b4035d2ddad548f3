// y[r, c] = table[ids[r], c], dequantized (dequant.wgsl). Ids were range-checked on the host.
// Params: 0 rows, 1 dim, 2 bytes per table row, 3 id stride in u32 words (1 for I32, 2 for I64).

@group(0) @binding(1) var<storage, read> W: array<WT>;
@group(0) @binding(2) var<storage, read> IDS: array<u32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let idx = flat_wg(wg, nw) * 64u + t;
    let dim = pu(1u);
    if (idx >= pu(0u) * dim) { return; }
    let r = idx / dim;
    let c = idx % dim;
    let id = IDS[r * pu(3u)];
    let o = id * pu(2u) + (c / BLOCK) * BYTES;
    Y[idx] = deq(o, c % BLOCK);
}

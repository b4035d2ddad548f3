// y[i, j] = Σ_p a[i, p] · w[j, p] for a weight w [n, k] of any supported dtype (dequant.wgsl).
// One workgroup per (weight row j, MB activation rows); 64 threads stride over the row's blocks
// and the partial sums are reduced in workgroup memory.
// Params: 0 m, 1 n, 2 k, 3 blocks per row, 4 bytes per row, 5 workgroups in the grid.

@group(0) @binding(1) var<storage, read> A: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let m = pu(0u);
    let n = pu(1u);
    let k = pu(2u);
    let nb = pu(3u);
    let row_bytes = pu(4u);
    let id = flat_wg(wg, nw);
    let valid = id < pu(5u);
    let j = id % n;
    let i0 = (id / n) * MB;
    var acc: array<f32, MB>;
    for (var r = 0u; r < MB; r++) { acc[r] = 0.0; }
    if (valid) {
        for (var b = t; b < nb; b += 64u) {
            let o = j * row_bytes + b * BYTES;
            for (var e = 0u; e < BLOCK; e++) {
                let w = deq(o, e);
                let col = b * BLOCK + e;
                for (var r = 0u; r < MB; r++) {
                    if (i0 + r < m) { acc[r] += A[(i0 + r) * k + col] * w; }
                }
            }
        }
    }
    for (var r = 0u; r < MB; r++) { red[r * 64u + t] = acc[r]; }
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (t < s) {
            for (var r = 0u; r < MB; r++) { red[r * 64u + t] += red[r * 64u + t + s]; }
        }
        workgroupBarrier();
    }
    if (t == 0u && valid) {
        for (var r = 0u; r < MB; r++) {
            if (i0 + r < m) { Y[(i0 + r) * n + j] = red[r * 64u]; }
        }
    }
}

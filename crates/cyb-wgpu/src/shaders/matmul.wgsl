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

// Prefill: a tiled product. One workgroup of 256 threads computes a 64 × 64 tile of Y (64
// activation rows × 64 weight rows), each thread a 4 × 4 block. Per step of 32 along k, the
// threads stage 64 × 32 activations and 64 × 32 dequantized weights in workgroup memory, so
// each weight element is read from the buffer once per 64 activation rows (not once per row).
// Params as `main`; 5 is the number of tiles.

const TS: u32 = 64u;
const TK: u32 = 32u;
// Row stride of the staged tiles: one more than the tile so that a column walk of 32 threads
// touches 32 different banks.
const TP: u32 = 65u;
var<workgroup> As: array<f32, 2080>;
var<workgroup> Ws: array<f32, 2080>;

@compute @workgroup_size(256)
fn tiled(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
         @builtin(local_invocation_index) t: u32) {
    let m = pu(0u);
    let n = pu(1u);
    let k = pu(2u);
    let row_bytes = pu(4u);
    let id = flat_wg(wg, nw);
    if (id >= pu(5u)) { return; }
    let tiles_n = (n + TS - 1u) / TS;
    let i0 = (id / tiles_n) * TS;
    let j0 = (id % tiles_n) * TS;
    let tx = t % 16u;
    let ty = t / 16u;
    var acc: array<f32, 16>;
    for (var q = 0u; q < 16u; q++) { acc[q] = 0.0; }
    for (var k0 = 0u; k0 < k; k0 += TK) {
        for (var q = 0u; q < 8u; q++) {
            let idx = q * 256u + t;
            let r = idx / TK;
            let kk = idx % TK;
            let col = k0 + kk;
            var av = 0.0;
            if (i0 + r < m && col < k) { av = A[(i0 + r) * k + col]; }
            As[kk * TP + r] = av;
            var wv = 0.0;
            if (j0 + r < n && col < k) {
                wv = deq((j0 + r) * row_bytes + (col / BLOCK) * BYTES, col % BLOCK);
            }
            Ws[kk * TP + r] = wv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            var a: array<f32, 4>;
            var w: array<f32, 4>;
            for (var q = 0u; q < 4u; q++) {
                a[q] = As[kk * TP + ty * 4u + q];
                w[q] = Ws[kk * TP + tx * 4u + q];
            }
            for (var r = 0u; r < 4u; r++) {
                for (var c = 0u; c < 4u; c++) { acc[r * 4u + c] += a[r] * w[c]; }
            }
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < 4u; r++) {
        let i = i0 + ty * 4u + r;
        for (var c = 0u; c < 4u; c++) {
            let j = j0 + tx * 4u + c;
            if (i < m && j < n) { Y[i * n + j] = acc[r * 4u + c]; }
        }
    }
}

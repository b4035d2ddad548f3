// y[i, j] = Σ_p a[i, p] · w[j, p] for a weight w [n, k] of any supported dtype (dequant.wgsl).
// One workgroup per (weight row j, MB activation rows); its 64 threads stride over the row's
// columns (thread t takes columns t, t + 64, ...: neighbouring threads read neighbouring bytes,
// and every thread has work even when a row holds only a few 256-value blocks), and the
// partial sums are reduced in workgroup memory.
// Params: 0 m, 1 n, 2 k, 3 blocks per row, 4 bytes per row, 5 workgroups in the grid.

@group(0) @binding(1) var<storage, read> A: array<f32>;
// The same activations four at a time, for `mv` (matvec_fast.wgsl; k is a multiple of 4 there).
@group(0) @binding(1) var<storage, read> A4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> W: array<WT>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
// `mvq` reads the row `qact` quantized (matvec_q16.wgsl): levels as (low, high) byte words per
// four values, then the blocks' scales; `qact` writes it.
@group(0) @binding(1) var<storage, read> AQ: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read_write> QO: array<u32>;

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let m = pu(0u);
    let n = pu(1u);
    let k = pu(2u);
    let row_bytes = pu(4u);
    let id = flat_wg(wg, nw);
    let valid = id < pu(5u);
    let j = id % n;
    let i0 = (id / n) * MB;
    var acc: array<f32, MB>;
    for (var r = 0u; r < MB; r++) { acc[r] = 0.0; }
    if (valid) {
        let row = j * row_bytes;
        if (k % 4u == 0u) {
            // Four neighbouring columns per thread and step: their weights share the block's
            // scale and packed words, which the compiler loads once.
            for (var c = t * 4u; c < k; c += 256u) {
                let w = vec4<f32>(deq(row + (c / BLOCK) * BYTES, c % BLOCK),
                                  deq(row + ((c + 1u) / BLOCK) * BYTES, (c + 1u) % BLOCK),
                                  deq(row + ((c + 2u) / BLOCK) * BYTES, (c + 2u) % BLOCK),
                                  deq(row + ((c + 3u) / BLOCK) * BYTES, (c + 3u) % BLOCK));
                for (var r = 0u; r < MB; r++) {
                    if (i0 + r < m) {
                        let a = (i0 + r) * k + c;
                        acc[r] += dot(vec4<f32>(A[a], A[a + 1u], A[a + 2u], A[a + 3u]), w);
                    }
                }
            }
        } else {
            for (var col = t; col < k; col += 64u) {
                let w = deq(row + (col / BLOCK) * BYTES, col % BLOCK);
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
    // Accumulators as vectors, not an indexed array: an indexed local array may be placed in
    // slow thread-local memory by the driver's compiler.
    var c0 = vec4<f32>(0.0);
    var c1 = vec4<f32>(0.0);
    var c2 = vec4<f32>(0.0);
    var c3 = vec4<f32>(0.0);
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
            let ab = kk * TP + ty * 4u;
            let wb = kk * TP + tx * 4u;
            let a = vec4<f32>(As[ab], As[ab + 1u], As[ab + 2u], As[ab + 3u]);
            let w = vec4<f32>(Ws[wb], Ws[wb + 1u], Ws[wb + 2u], Ws[wb + 3u]);
            c0 += a.x * w;
            c1 += a.y * w;
            c2 += a.z * w;
            c3 += a.w * w;
        }
        workgroupBarrier();
    }
    let jb = j0 + tx * 4u;
    let ib = i0 + ty * 4u;
    store_row(ib, jb, m, n, c0);
    store_row(ib + 1u, jb, m, n, c1);
    store_row(ib + 2u, jb, m, n, c2);
    store_row(ib + 3u, jb, m, n, c3);
}

fn store_row(i: u32, j: u32, m: u32, n: u32, v: vec4<f32>) {
    if (i >= m) { return; }
    if (j < n) { Y[i * n + j] = v.x; }
    if (j + 1u < n) { Y[i * n + j + 1u] = v.y; }
    if (j + 2u < n) { Y[i * n + j + 2u] = v.z; }
    if (j + 3u < n) { Y[i * n + j + 3u] = v.w; }
}

// Decode (one activation row): 256 / LPR groups of MR weight rows per workgroup of 256 threads,
// LPR lanes per group (matvec_fast.wgsl's `vdotm`), then each row's LPR partial sums reduced.
// Params as `main`; 5 is ⌈n / (MR · 256 / LPR)⌉.
@compute @workgroup_size(256)
fn mv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
      @builtin(local_invocation_index) t: u32) {
    let id = flat_wg(wg, nw);
    let y = mv_sum(id, t);
    let j = mv_row(id, t);
    if (t % LPR == 0u && id < pu(5u)) {
        for (var r = 0u; r < MR; r++) {
            if (j + r < pu(1u)) { Y[j + r] = y[r]; }
        }
    }
}

// The first of the MR weight rows thread t of workgroup `id` works on in `mv`.
fn mv_row(id: u32, t: u32) -> u32 {
    return (id * (256u / LPR) + t / LPR) * MR;
}

// Workgroup `id`'s rows of `mv`: thread t gets the dot products of its MR rows where it is
// their first lane (every thread of the workgroup calls it).
fn mv_sum(id: u32, t: u32) -> vec4<f32> {
    let n = pu(1u);
    let j = mv_row(id, t);
    let ok = id < pu(5u) && j < n;
    var s = vec4<f32>(0.0);
    if (ok) { s = vdotm(j, n, t % LPR, pu(2u), pu(4u)); }
    return lanes_summ(t, s);
}

// Decode on integer dot products: the activation row of k values (param 2) quantized by `qact`,
// one weight row per LPR lanes as `mv` (MR is 1); params as `mv`.
@compute @workgroup_size(256)
fn mvq(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
       @builtin(local_invocation_index) t: u32) {
    let id = flat_wg(wg, nw);
    let n = pu(1u);
    let j = id * (256u / LPR) + t / LPR;
    let ok = id < pu(5u) && j < n;
    var s = 0.0;
    if (ok) { s = vdotq(j, t % LPR, pu(2u), pu(4u)); }
    let y = lanes_sum(t, s);
    if (ok && t % LPR == 0u) { Y[j] = y; }
}

// Threads of `qact` per block (the scalar formats, which `qact` never sees, get one).
const QTPB: u32 = max(BLOCK / 8u, 1u);

// The activation row (param 0: k values, a multiple of BLOCK) quantized for `mvq`: each
// workgroup takes 2048 values, each thread eight (a block's 32 or 256 values lie in one
// workgroup); params 0 k, 1 workgroups.
@compute @workgroup_size(256)
fn qact(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let k = pu(0u);
    let id = flat_wg(wg, nw);
    let v = id * 2048u + 8u * t;
    let ok = id < pu(1u) && v < k;
    var x0 = vec4<f32>(0.0);
    var x1 = vec4<f32>(0.0);
    if (ok) {
        x0 = A4[v / 4u];
        x1 = A4[v / 4u + 1u];
    }
    let m = max(abs(x0), abs(x1));
    red[t] = max(max(m.x, m.y), max(m.z, m.w));
    workgroupBarrier();
    // The block's threads: QTPB from the first of them.
    let first = t - t % QTPB;
    var amax = 0.0;
    for (var i = 0u; i < QTPB; i++) { amax = max(amax, red[first + i]); }
    if (!ok) { return; }
    // As the CPU's quantize_block16: an all-zero or non-finite block has zero levels and d.
    var inv = 0.0;
    var d = 0.0;
    if (amax > 0.0 && amax <= 3.4028235e38) {
        inv = 32639.0 / amax;
        d = amax / 32639.0;
    }
    let p0 = pack_levels(x0 * inv);
    let p1 = pack_levels(x1 * inv);
    QO[v / 2u] = p0.x;
    QO[v / 2u + 1u] = p0.y;
    QO[v / 2u + 2u] = p1.x;
    QO[v / 2u + 3u] = p1.y;
    if (t % QTPB == 0u) { QO[k / 2u + v / BLOCK] = bitcast<u32>(d); }
}

// Prompt attention in tiles (flash-attention style): one workgroup of 256 threads per (batch,
// query head, tile of BR = 16 query rows) walks the keys in tiles of BC = 32, keeping for each
// row the running maximum score m, the running sum of weights l and the weighted sum of values
// (rescaled by e^(m_old − m_new) whenever m grows), so no score ever leaves the workgroup and
// each key and value row is read once per tile of queries instead of once per query.
// Thread (r, j) = (t / 16, t % 16) scores keys j and j + 16 of the key tile against query row
// r and owns the value columns 4j .. 4j + 3 and 4(j + 16) .. of row r's output. The query tile
// and the key tile are in workgroup memory as vec4s; key rows are padded by one vec4 so that
// the threads of a row, reading different keys, hit different banks. With a causal mask a tile
// of queries stops at its last row's position, and a sliding window starts its keys at its
// first row's.
// Params: sdpa.wgsl's 0-12. The host takes this kernel for rows of d and dv values, multiples
// of four and at most 128, where the adapter's workgroup memory holds the tiles.

@group(0) @binding(1) var<storage, read> Q: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> K: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> V: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> O: array<vec4<f32>>;

const BR: u32 = 16u;
const BC: u32 = 32u;
const TPR: u32 = 16u;

var<workgroup> qt: array<vec4<f32>, 512>;
var<workgroup> kv: array<vec4<f32>, 1056>;
var<workgroup> pt: array<f32, 512>;

@compute @workgroup_size(256)
fn sdpa_tile(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
             @builtin(local_invocation_index) t: u32) {
    let hq = pu(1u);
    let lq = pu(2u);
    let d4 = pu(3u) / 4u;
    let hkv = pu(4u);
    let lk = pu(5u);
    let dv4 = pu(6u) / 4u;
    let causal = pu(8u) == 1u;
    let win = i32(pu(9u));
    let cap = pf(10u);
    let scale = pf(7u);
    let neg_inf = bitcast<f32>(0xff800000u);
    let tiles = (lq + BR - 1u) / BR;
    let flat = flat_wg(wg, nw);
    let bh = flat / tiles;
    let tile = flat % tiles;
    let valid = bh < pu(0u) / lq;
    let h = bh % hq;
    let kvh = (bh / hq) * hkv + h / (hq / hkv);
    let r = t / TPR;
    let j = t % TPR;
    let i = tile * BR + r;
    let live = valid && i < lq;
    let pos = i32(lk) - i32(lq) + i32(i);
    for (var x = t; x < BR * d4; x += 256u) {
        let qi = tile * BR + x / d4;
        var v = vec4<f32>(0.0);
        if (valid && qi < lq) { v = Q[(bh * lq + tile * BR) * d4 + x]; }
        qt[x] = v;
    }
    // The tile's keys: up to its last row's position with a causal mask, from its first row's
    // window start with a window (whole key tiles; masks inside them).
    let last = min(lq, tile * BR + BR);
    var kend = lk;
    if (causal) { kend = u32(clamp(i32(lk) - i32(lq) + i32(last), 0i, i32(lk))); }
    var kstart = 0u;
    if (win > 0i) {
        let first = i32(lk) - i32(lq) + i32(tile * BR) - win + 1;
        kstart = (u32(max(first, 0i)) / BC) * BC;
    }
    let ks = d4 + 1u;
    var m = neg_inf;
    var l = 0.0;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    for (var kb = kstart; kb < kend; kb += BC) {
        workgroupBarrier();
        for (var x = t; x < BC * d4; x += 256u) {
            let c = x / d4;
            let key = kb + c;
            var v = vec4<f32>(0.0);
            if (valid && key < lk) { v = K[(kvh * pu(11u) + key) * d4 + x % d4]; }
            kv[c * ks + x % d4] = v;
        }
        workgroupBarrier();
        // Both keys' dot products in one pass over the query row.
        var a = vec2<f32>(0.0);
        for (var x = 0u; x < d4; x++) {
            let qx = qt[r * d4 + x];
            a += vec2<f32>(dot(qx, kv[j * ks + x]), dot(qx, kv[(j + TPR) * ks + x]));
        }
        for (var cc = 0u; cc < 2u; cc++) {
            let c = j + cc * TPR;
            let key = kb + c;
            let kk = i32(key);
            let hidden = key >= lk || (causal && kk > pos) || (win > 0i && kk <= pos - win);
            var s = neg_inf;
            if (live && !hidden) {
                s = a[cc] * scale;
                if (cap != 0.0) { s = cap * tanh(clamp(s / cap, -15.0, 15.0)); }
            }
            pt[r * BC + c] = s;
        }
        workgroupBarrier();
        var mx = m;
        for (var c = 0u; c < BC; c++) { mx = max(mx, pt[r * BC + c]); }
        // Every thread of row r takes the same maximum from the same scores; the weights are
        // written back over them once all have been read.
        var corr = 1.0;
        if (mx != neg_inf && m != neg_inf) { corr = exp(m - mx); }
        var p = array<f32, 2>(0.0, 0.0);
        for (var cc = 0u; cc < 2u; cc++) {
            let s = pt[r * BC + j + cc * TPR];
            if (s != neg_inf) { p[cc] = exp(s - mx); }
        }
        // The new weights are summed into l as they are applied below.
        l *= corr;
        acc0 *= corr;
        acc1 *= corr;
        m = mx;
        workgroupBarrier();
        pt[r * BC + j] = p[0];
        pt[r * BC + j + TPR] = p[1];
        for (var x = t; x < BC * dv4; x += 256u) {
            let c = x / dv4;
            let key = kb + c;
            var v = vec4<f32>(0.0);
            if (valid && key < lk) { v = V[(kvh * pu(12u) + key) * dv4 + x % dv4]; }
            kv[x] = v;
        }
        workgroupBarrier();
        for (var c = 0u; c < BC; c++) {
            let w = pt[r * BC + c];
            l += w;
            if (j < dv4) { acc0 += w * kv[c * dv4 + j]; }
            if (j + TPR < dv4) { acc1 += w * kv[c * dv4 + j + TPR]; }
        }
    }
    if (live) {
        var inv = 0.0;
        if (l > 0.0) { inv = 1.0 / l; }
        let row = bh * lq + i;
        if (j < dv4) { O[row * dv4 + j] = acc0 * inv; }
        if (j + TPR < dv4) { O[row * dv4 + j + TPR] = acc1 * inv; }
    }
}

// Decode attention (one query row per head) split over the keys and grouped by KV head: one
// workgroup of 256 threads per (batch, kv head, chunk of CH keys) takes the G = hq / hkv query
// heads that share the kv head, so each key and value row is read once for all of them, and
// every read is coalesced:
// - scores: subgroup s takes the chunk's keys s, s + NS, ... (NS = 256 / SG subgroups); its
//   lanes split the key's d values (lane l: values l, l + SG, ..., at most KPL of them, kept in
//   registers), each lane's partial products for the G heads are summed over the subgroup;
// - softmax: subgroup s takes heads s, s + NS, ...: the chunk's maximum score m, the weights
//   e^(score − m) and their sum l;
// - values: the threads split into 256 / CW groups of CW (the power of two ≥ dv / VW) as in
//   sdpa.wgsl; thread i of group g sums w · v[j, VW·i ..] over the keys j ≡ g for all G heads
//   at once (one load of each value per head group), then the groups' sums are added.
// With one chunk the result goes to O (divided by l); with several, (m, l, sum) go to
// PART[row, chunk, 0 .. dv + 2] for sdpa_merge.wgsl. Excluded keys (window, past lk) weigh
// nothing; a chunk of none has m = −inf and l = 0.
// Params: sdpa.wgsl's 0-12 (lq = 1), 13 the number of chunks, 14 CH. The host takes this kernel
// where the adapter has subgroups, d ≤ KPL·SG, G ≤ GMAX, G·d ≤ 1024 and G·CH ≤ 1024.

@group(0) @binding(1) var<storage, read> Q: array<f32>;
@group(0) @binding(2) var<storage, read> K: array<f32>;
@group(0) @binding(3) var<storage, read> V: array<VV>;
@group(0) @binding(4) var<storage, read_write> O: array<f32>;
@group(0) @binding(5) var<storage, read_write> PART: array<f32>;

const GMAX: u32 = 8u;
const KPL: u32 = 8u;

var<workgroup> qs: array<f32, 1024>;
var<workgroup> ws: array<f32, 1024>;
var<workgroup> stat: array<f32, 16>;
var<workgroup> redv: array<VV, 256>;

@compute @workgroup_size(256)
fn sdpa_dec(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
            @builtin(local_invocation_index) t: u32) {
    let chunks = pu(13u);
    let ch = pu(14u);
    let flat = flat_wg(wg, nw);
    let unit = flat / chunks;
    let chunk = flat % chunks;
    let hq = pu(1u);
    let d = pu(3u);
    let hkv = pu(4u);
    let lk = pu(5u);
    let dv = pu(6u);
    let gn = hq / hkv;
    let valid = unit < (pu(0u) / hq) * hkv;
    let row0 = (unit / hkv) * hq + (unit % hkv) * gn;
    let neg_inf = bitcast<f32>(0xff800000u);
    let win = i32(pu(9u));
    let cap = pf(10u);
    let pos = i32(lk) - 1;
    let ns = 256u / SGD;
    let sub = t / SGD;
    let l = t % SGD;
    for (var x = t; x < gn * d; x += 256u) {
        var v = 0.0;
        if (valid) { v = Q[row0 * d + x]; }
        qs[x] = v;
    }
    workgroupBarrier();
    let j0 = chunk * ch;
    // Scores: the loop bound is the same for every lane of a subgroup (subgroup sums need all).
    for (var base = 0u; base < ch; base += ns) {
        let jj = base + sub;
        let j = j0 + jj;
        let live = valid && jj < ch && j < lk && !(win > 0i && i32(j) <= pos - win);
        let kr = (unit * pu(11u) + j) * d;
        var kv: array<f32, 8>;
        for (var i = 0u; i < KPL; i++) {
            let c = l + i * SGD;
            var v = 0.0;
            if (live && c < d) { v = K[kr + c]; }
            kv[i] = v;
        }
        for (var g = 0u; g < gn; g++) {
            var p = 0.0;
            for (var i = 0u; i < KPL; i++) {
                let c = l + i * SGD;
                if (c < d) { p += qs[g * d + c] * kv[i]; }
            }
            var s = sg_add(p) * pf(7u);
            if (cap != 0.0) { s = cap * tanh(clamp(s / cap, -15.0, 15.0)); }
            if (l == 0u && jj < ch) { ws[g * ch + jj] = select(neg_inf, s, live); }
        }
    }
    workgroupBarrier();
    // Softmax per head, a subgroup each.
    for (var g0 = 0u; g0 < gn; g0 += ns) {
        let g = g0 + sub;
        let on = g < gn;
        var mx = neg_inf;
        if (on) {
            for (var i = l; i < ch; i += SGD) { mx = max(mx, ws[g * ch + i]); }
        }
        let m = sg_max(mx);
        var sum = 0.0;
        if (on) {
            for (var i = l; i < ch; i += SGD) {
                let s = ws[g * ch + i];
                var e = 0.0;
                if (s != neg_inf) { e = exp(s - m); }
                ws[g * ch + i] = e;
                sum += e;
            }
        }
        let total = sg_add(sum);
        if (on && l == 0u) {
            stat[2u * g] = m;
            stat[2u * g + 1u] = total;
        }
    }
    workgroupBarrier();
    var cw = 1u;
    while (cw * VW < dv && cw < 256u) { cw *= 2u; }
    let groups = 256u / cw;
    let kg = t / cw;
    let vrow = unit * pu(12u) + j0;
    let n = min(lk, j0 + ch) - min(lk, j0);
    for (var c0 = 0u; c0 < dv; c0 += cw * VW) {
        let c = c0 + (t % cw) * VW;
        var acc: array<VV, 8>;
        for (var g = 0u; g < GMAX; g++) { acc[g] = VV(0.0); }
        if (valid && c < dv) {
            for (var k = kg; k < n; k += groups) {
                let v = V[((vrow + k) * dv + c) / VW];
                for (var g = 0u; g < GMAX; g++) {
                    if (g < gn) { acc[g] += ws[g * ch + k] * v; }
                }
            }
        }
        for (var g = 0u; g < GMAX; g++) {
            if (g < gn) {
                redv[t] = acc[g];
                workgroupBarrier();
                let m = stat[2u * g];
                let lsum = stat[2u * g + 1u];
                if (t < cw && valid && c < dv) {
                    var o = VV(0.0);
                    for (var q = 0u; q < groups; q++) { o += redv[q * cw + t]; }
                    let row = row0 + g;
                    if (chunks == 1u) {
                        var inv = 0.0;
                        if (lsum > 0.0) { inv = 1.0 / lsum; }
                        store_o(row * dv + c, o * inv);
                    } else {
                        store_p((row * chunks + chunk) * (dv + 2u) + 2u + c, o);
                    }
                }
                workgroupBarrier();
            }
        }
    }
    if (valid && chunks > 1u && t < gn) {
        let base = ((row0 + t) * chunks + chunk) * (dv + 2u);
        PART[base] = stat[2u * t];
        PART[base + 1u] = stat[2u * t + 1u];
    }
}

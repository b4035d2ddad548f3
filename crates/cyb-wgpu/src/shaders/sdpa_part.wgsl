// Attention split over the keys (flash-decoding), part one: one workgroup of 256 threads per
// (query row, chunk of 256 keys). Thread t scores key 256·chunk + t; the workgroup takes the
// chunk's maximum score m, the weights e^(s − m) (kept in workgroup memory) and their sum l,
// and the weighted sum of the chunk's values. With one chunk the result goes to O (divided by
// l); with several, (m, l, sum) go to PART[row, chunk, 0 .. dv + 2] for sdpa_merge.wgsl.
// Params: sdpa.wgsl's 0-12, then 13 the number of chunks. Excluded keys (causal, window,
// past lk) weigh nothing; a chunk of none has m = −inf and l = 0.

@group(0) @binding(1) var<storage, read> Q: array<QK>;
@group(0) @binding(2) var<storage, read> K: array<QK>;
@group(0) @binding(3) var<storage, read> V: array<VV>;
@group(0) @binding(4) var<storage, read_write> O: array<f32>;
@group(0) @binding(5) var<storage, read_write> PART: array<f32>;

var<workgroup> red: array<f32, 256>;
var<workgroup> redv: array<VV, 256>;
var<workgroup> weight: array<f32, 256>;

@compute @workgroup_size(256)
fn sdpa_part(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
             @builtin(local_invocation_index) t: u32) {
    let chunks = pu(13u);
    let flat = flat_wg(wg, nw);
    let row = flat / chunks;
    let chunk = flat % chunks;
    let valid = row < pu(0u);
    let hq = pu(1u);
    let lq = pu(2u);
    let d = pu(3u);
    let hkv = pu(4u);
    let lk = pu(5u);
    let dv = pu(6u);
    let neg_inf = bitcast<f32>(0xff800000u);
    let i = row % lq;
    let h = (row / lq) % hq;
    let batch = row / (lq * hq);
    let kvh = batch * hkv + h / (hq / hkv);
    let pos = i32(lk) - i32(lq) + i32(i);
    let win = i32(pu(9u));
    let cap = pf(10u);
    let j0 = chunk * 256u;
    let j = j0 + t;
    let jj = i32(j);
    let hidden = (pu(8u) == 1u && jj > pos) || (win > 0i && jj <= pos - win);
    var s = neg_inf;
    if (valid && j < lk && !hidden) {
        let kr = (kvh * pu(11u) + j) * d;
        var qk = 0.0;
        for (var c = 0u; c < d; c += QW) { qk += qk_mul(Q[(row * d + c) / QW], K[(kr + c) / QW]); }
        s = qk * pf(7u);
        if (cap != 0.0) { s = cap * tanh(clamp(s / cap, -15.0, 15.0)); }
    }
    let m = wg_max(t, s);
    var e = 0.0;
    if (s != neg_inf) { e = exp(s - m); }
    weight[t] = e;
    // wg_sum's barriers make every thread's weight visible below.
    let l = wg_sum(t, e);
    var cw = 1u;
    while (cw * VW < dv && cw < 256u) { cw *= 2u; }
    let groups = 256u / cw;
    let g = t / cw;
    let vrow = kvh * pu(12u) + j0;
    let n = min(lk, j0 + 256u) - min(lk, j0);
    let base = (row * chunks + chunk) * (dv + 2u);
    for (var c0 = 0u; c0 < dv; c0 += cw * VW) {
        let c = c0 + (t % cw) * VW;
        var acc = VV(0.0);
        if (valid && l > 0.0 && c < dv) {
            for (var k = g; k < n; k += groups) { acc += weight[k] * V[((vrow + k) * dv + c) / VW]; }
        }
        redv[t] = acc;
        workgroupBarrier();
        if (t < cw && valid && c < dv) {
            var o = VV(0.0);
            for (var q = 0u; q < groups; q++) { o += redv[q * cw + t]; }
            if (chunks == 1u) {
                var inv = 0.0;
                if (l > 0.0) { inv = 1.0 / l; }
                store_o(row * dv + c, o * inv);
            } else {
                store_p(base + 2u + c, o);
            }
        }
        workgroupBarrier();
    }
    if (t == 0u && valid && chunks > 1u) {
        PART[base] = m;
        PART[base + 1u] = l;
    }
}

// Scaled dot-product attention, one workgroup of 256 threads per (batch, head, query row).
// Scores go to the scratch buffer S [rows, lk]; excluded keys are marked -inf there.
// Params: 0 rows, 1 hq, 2 lq, 3 d, 4 hkv, 5 lk, 6 dv, 7 scale, 8 causal, 9 window (0: none),
// 10 softcap (0: none), 11 and 12 rows per kv head in K and V (lk, or the KV cache's capacity
// when attention reads the cache in place).
// Thread t scores keys t, t + 256, ... (with d a multiple of 4, four values per load). For the
// output, V is read VW values at a time (four when dv is a multiple of 4) and the threads
// split into 256 / CW groups of CW (the power of two ≥ dv / VW, at most 256): thread i of
// group g sums p_j · v[j, VW·i .. VW·i + VW] over the keys j ≡ g (mod 256 / CW), loads of the
// next keys issued before the sum needs them; the groups' partial sums are then added in
// workgroup memory. With VW = 4 a decode row's 64-value heads take a quarter of the steps.

// Q and K are read QW values at a time as `QK` (kernels.rs defines both and `qk_mul`: four
// values as vec4<f32> when d is a multiple of 4, else one f32), V as `VV` of VW values
// (kernels.rs also defines `store_o`, which writes one `VV` of the output).
@group(0) @binding(1) var<storage, read> Q: array<QK>;
@group(0) @binding(2) var<storage, read> K: array<QK>;
@group(0) @binding(3) var<storage, read> V: array<VV>;
@group(0) @binding(4) var<storage, read_write> O: array<f32>;
@group(0) @binding(5) var<storage, read_write> S: array<f32>;

var<workgroup> red: array<f32, 256>;
var<workgroup> redv: array<VV, 256>;

fn hidden(j: u32, pos: i32, win: i32) -> bool {
    let jj = i32(j);
    return (pu(8u) == 1u && jj > pos) || (win > 0i && jj <= pos - win);
}

@compute @workgroup_size(256)
fn sdpa(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let row = flat_wg(wg, nw);
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
    var mx = neg_inf;
    if (valid) {
        for (var j = t; j < lk; j += 256u) {
            var s = neg_inf;
            if (!hidden(j, pos, win)) {
                let kr = (kvh * pu(11u) + j) * d;
                var qk = 0.0;
                for (var c = 0u; c < d; c += QW) { qk += qk_mul(Q[(row * d + c) / QW], K[(kr + c) / QW]); }
                s = qk * pf(7u);
                if (cap != 0.0) { s = cap * tanh(clamp(s / cap, -15.0, 15.0)); }
                mx = max(mx, s);
            }
            S[row * lk + j] = s;
        }
    }
    red[t] = mx;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if (t < k) { red[t] = max(red[t], red[t + k]); }
        workgroupBarrier();
    }
    let m = red[0];
    workgroupBarrier();
    var sum = 0.0;
    if (valid && m != neg_inf) {
        for (var j = t; j < lk; j += 256u) {
            let s = S[row * lk + j];
            var e = 0.0;
            if (s != neg_inf) { e = exp(s - m); }
            S[row * lk + j] = e;
            sum += e;
        }
    }
    red[t] = sum;
    storageBarrier();
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if (t < k) { red[t] += red[t + k]; }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    var cw = 1u;
    while (cw * VW < dv && cw < 256u) { cw *= 2u; }
    let groups = 256u / cw;
    let g = t / cw;
    let vrow = kvh * pu(12u);
    // Output columns c .. c + VW, then c + cw·VW, ... (one pass when dv ≤ 256·VW).
    for (var c0 = 0u; c0 < dv; c0 += cw * VW) {
        let c = c0 + (t % cw) * VW;
        var acc = VV(0.0);
        if (valid && m != neg_inf && c < dv) {
            var j = g;
            for (; j + 3u * groups < lk; j += 4u * groups) {
                let j1 = j + groups;
                let j2 = j1 + groups;
                let j3 = j2 + groups;
                let p = vec4<f32>(S[row * lk + j], S[row * lk + j1], S[row * lk + j2], S[row * lk + j3]);
                let x0 = V[((vrow + j) * dv + c) / VW];
                let x1 = V[((vrow + j1) * dv + c) / VW];
                let x2 = V[((vrow + j2) * dv + c) / VW];
                let x3 = V[((vrow + j3) * dv + c) / VW];
                acc += (p.x * x0 + p.y * x1) + (p.z * x2 + p.w * x3);
            }
            for (; j < lk; j += groups) { acc += S[row * lk + j] * V[((vrow + j) * dv + c) / VW]; }
        }
        redv[t] = acc;
        workgroupBarrier();
        if (t < cw && valid && c < dv) {
            var o = VV(0.0);
            for (var q = 0u; q < groups; q++) { o += redv[q * cw + t]; }
            store_o(row * dv + c, o / total);
        }
        workgroupBarrier();
    }
}

// Scaled dot-product attention, one workgroup of 64 threads per (batch, head, query row).
// Scores go to the scratch buffer S [rows, lk]; excluded keys are marked -inf there.
// Params: 0 rows, 1 hq, 2 lq, 3 d, 4 hkv, 5 lk, 6 dv, 7 scale, 8 causal, 9 window (0: none),
// 10 softcap (0: none), 11 and 12 rows per kv head in K and V (lk, or the KV cache's capacity
// when attention reads the cache in place).

@group(0) @binding(1) var<storage, read> Q: array<f32>;
@group(0) @binding(2) var<storage, read> K: array<f32>;
@group(0) @binding(3) var<storage, read> V: array<f32>;
@group(0) @binding(4) var<storage, read_write> O: array<f32>;
@group(0) @binding(5) var<storage, read_write> S: array<f32>;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
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
        for (var j = t; j < lk; j += 64u) {
            let jj = i32(j);
            let hidden = (pu(8u) == 1u && jj > pos) || (win > 0i && jj <= pos - win);
            var s = neg_inf;
            if (!hidden) {
                var dot = 0.0;
                for (var c = 0u; c < d; c++) { dot += Q[row * d + c] * K[(kvh * pu(11u) + j) * d + c]; }
                s = dot * pf(7u);
                if (cap != 0.0) { s = cap * tanh(clamp(s / cap, -15.0, 15.0)); }
                mx = max(mx, s);
            }
            S[row * lk + j] = s;
        }
    }
    red[t] = mx;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) { red[t] = max(red[t], red[t + k]); }
        workgroupBarrier();
    }
    let m = red[0];
    workgroupBarrier();
    var sum = 0.0;
    if (valid && m != neg_inf) {
        for (var j = t; j < lk; j += 64u) {
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
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) { red[t] += red[t + k]; }
        workgroupBarrier();
    }
    let total = red[0];
    if (valid) {
        for (var c = t; c < dv; c += 64u) {
            var acc = 0.0;
            if (m != neg_inf) {
                for (var j = 0u; j < lk; j++) {
                    let jj = i32(j);
                    let hidden = (pu(8u) == 1u && jj > pos) || (win > 0i && jj <= pos - win);
                    if (!hidden) { acc += (S[row * lk + j] / total) * V[(kvh * pu(12u) + j) * dv + c]; }
                }
            }
            O[row * dv + c] = acc;
        }
    }
}

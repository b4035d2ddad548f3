// The body of scaled dot-product attention (sdpa.wgsl's kernel and sdpa_rope.wgsl's merged one):
// `attend` computes one query row. Its parameters start at word SP of the block (kernels.rs
// defines SP: 0 for sdpa.wgsl, 16 for sdpa_rope.wgsl); the including file declares Q, K, V, O
// and S.

fn sp(i: u32) -> u32 { return pu(SP + i); }
fn spf(i: u32) -> f32 { return pf(SP + i); }

var<workgroup> red: array<f32, 256>;
var<workgroup> redv: array<VV, 256>;

fn hidden(j: u32, pos: i32, win: i32) -> bool {
    let jj = i32(j);
    return (sp(8u) == 1u && jj > pos) || (win > 0i && jj <= pos - win);
}

// Attention of query row `row` by the 256 threads of the calling workgroup (`t`: this thread).
fn attend(row: u32, t: u32) {
    let valid = row < sp(0u);
    let hq = sp(1u);
    let lq = sp(2u);
    let d = sp(3u);
    let hkv = sp(4u);
    let lk = sp(5u);
    let dv = sp(6u);
    let neg_inf = bitcast<f32>(0xff800000u);
    let i = row % lq;
    let h = (row / lq) % hq;
    let batch = row / (lq * hq);
    let kvh = batch * hkv + h / (hq / hkv);
    let pos = i32(lk) - i32(lq) + i32(i);
    let win = i32(sp(9u));
    let cap = spf(10u);
    var mx = neg_inf;
    if (valid) {
        for (var j = t; j < lk; j += 256u) {
            var s = neg_inf;
            if (!hidden(j, pos, win)) {
                let kr = (kvh * sp(11u) + j) * d;
                var qk = 0.0;
                for (var c = 0u; c < d; c += QW) { qk += qk_mul(Q[(row * d + c) / QW], K[(kr + c) / QW]); }
                s = qk * spf(7u);
                if (cap != 0.0) { s = cap * tanh(clamp(s / cap, -15.0, 15.0)); }
                mx = max(mx, s);
            }
            S[row * lk + j] = s;
        }
    }
    let m = wg_max(t, mx);
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
    // The weights written to S are read back by other threads below.
    storageBarrier();
    let total = wg_sum(t, sum);
    var cw = 1u;
    while (cw * VW < dv && cw < 256u) { cw *= 2u; }
    let groups = 256u / cw;
    let g = t / cw;
    let vrow = kvh * sp(12u);
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

// The body of the merged matvec kernels (matvec_multi.wgsl and matvec_norm.wgsl declare the
// bindings): `main` for a few activation rows, `mv` for one.

// Partial sums of the first product's rows, then (glu) of the second's.
var<workgroup> red: array<f32, 512>;
var<private> ROW_SCALE: f32 = 1.0;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let id = flat_wg(wg, nw);
    let valid = id < pu(8u);
    let blocks = pu(3u);
    let glu = pu(7u);
    // The products' workgroup ranges follow each other (with glu: one range for both).
    var which = 0u;
    var local = id;
    var n = pu(4u);
    if (glu == 0u && local >= pu(4u) * blocks) {
        local -= pu(4u) * blocks;
        which = 1u;
        n = pu(5u);
        if (local >= pu(5u) * blocks) {
            local -= pu(5u) * blocks;
            which = 2u;
            n = pu(6u);
        }
    }
    let j = local % max(n, 1u);
    let i0 = (local / max(n, 1u)) * MB;
    var a0: array<f32, MB>;
    var a1: array<f32, MB>;
    for (var r = 0u; r < MB; r++) { a0[r] = 0.0; a1[r] = 0.0; }
    if (valid) {
        if (glu != 0u) {
            a0 = dot0(j, i0, t);
            a1 = dot1(j, i0, t);
        } else if (which == 0u) {
            a0 = dot0(j, i0, t);
        } else if (which == 1u) {
            a0 = dot1(j, i0, t);
        } else {
            a0 = dot2(j, i0, t);
        }
    }
    for (var r = 0u; r < MB; r++) {
        red[r * 64u + t] = a0[r];
        red[256u + r * 64u + t] = a1[r];
    }
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (t < s) {
            for (var r = 0u; r < MB; r++) {
                red[r * 64u + t] += red[r * 64u + t + s];
                red[256u + r * 64u + t] += red[256u + r * 64u + t + s];
            }
        }
        workgroupBarrier();
    }
    if (t == 0u && valid) {
        let m = pu(0u);
        for (var r = 0u; r < MB; r++) {
            if (i0 + r >= m) { continue; }
            let o = (i0 + r) * n + j;
            let y = red[r * 64u];
            if (glu != 0u) {
                let u = red[256u + r * 64u];
                Y0[o] = y;
                Y1[o] = u;
                var act = silu_f(y);
                if (glu == 2u) { act = gelu_erf(y); }
                if (glu == 3u) { act = gelu_tanh(y); }
                G[o] = act * u;
            } else if (which == 0u) {
                Y0[o] = y;
            } else if (which == 1u) {
                Y1[o] = y;
            } else {
                Y2[o] = y;
            }
        }
    }
}

// One activation row: as matmul.wgsl's `mv`, 256 / LPR weight rows per workgroup, each
// product's workgroups ⌈n_r / (256 / LPR)⌉ (param 3 unused).
@compute @workgroup_size(256)
fn mv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
      @builtin(local_invocation_index) t: u32) {
    mv_rows(flat_wg(wg, nw), t);
}

// Workgroup `id`'s rows of `mv` (thread t; called by every thread of the workgroup). Each dot
// product is multiplied by ROW_SCALE (1, or the inverse RMS of matvec_norm.wgsl's row).
fn mv_rows(id: u32, t: u32) {
    let glu = pu(7u);
    let rpw = 256u / LPR;
    let g0 = (pu(4u) + rpw - 1u) / rpw;
    let g1 = (pu(5u) + rpw - 1u) / rpw;
    var which = 0u;
    var local = id;
    var n = pu(4u);
    if (glu == 0u && local >= g0) {
        local -= g0;
        which = 1u;
        n = pu(5u);
        if (local >= g1) {
            local -= g1;
            which = 2u;
            n = pu(6u);
        }
    }
    let j = local * rpw + t / LPR;
    let l = t % LPR;
    let ok = id < pu(8u) && j < n;
    let k = pu(1u);
    let rb = pu(2u);
    var s0 = 0.0;
    var s1 = 0.0;
    if (ok) {
        if (glu != 0u) {
            let s = vdot_pair(j, l, k, rb);
            s0 = s.x;
            s1 = s.y;
        } else if (which == 0u) {
            s0 = vdot0(j, l, k, rb);
        } else if (which == 1u) {
            s0 = vdot1(j, l, k, rb);
        } else {
            s0 = vdot2(j, l, k, rb);
        }
    }
    let r = lanes_sum2(t, vec2<f32>(s0, s1)) * ROW_SCALE;
    if (l == 0u && ok) {
        let y = r.x;
        if (glu != 0u) {
            let u = r.y;
            Y0[j] = y;
            Y1[j] = u;
            var act = silu_f(y);
            if (glu == 2u) { act = gelu_erf(y); }
            if (glu == 3u) { act = gelu_tanh(y); }
            G[j] = act * u;
        } else if (which == 0u) {
            Y0[j] = y;
        } else if (which == 1u) {
            Y1[j] = y;
        } else {
            Y2[j] = y;
        }
    }
}

// `lanes_sum` (matvec_fast_common.wgsl) of two values at once.
fn lanes_sum2(t: u32, s: vec2<f32>) -> vec2<f32> {
    if (SGR) {
        let r = vec2<f32>(sg_add(s.x), sg_add(s.y));
        if (LPR == SG) { return r; }
        if (t % SGD == 0u) {
            red[t / SGD] = r.x;
            red[256u + t / SGD] = r.y;
        }
        workgroupBarrier();
        var a = vec2<f32>(0.0);
        if (t % LPR == 0u) {
            for (var i = 0u; i < LPR / SGD; i++) { a += vec2<f32>(red[t / SGD + i], red[256u + t / SGD + i]); }
        }
        return a;
    }
    red[t] = s.x;
    red[256u + t] = s.y;
    workgroupBarrier();
    for (var h = LPR / 2u; h > 0u; h >>= 1u) {
        if (t % LPR < h) {
            red[t] += red[t + h];
            red[256u + t] += red[256u + t + h];
        }
        workgroupBarrier();
    }
    return vec2<f32>(red[t], red[256u + t]);
}

// Row j of the gate (W0) and the up (W1) product at once, as matvec_fast.wgsl's `vdot`: one
// loop, each activation load serving both rows.
fn vdot_pair(j: u32, l: u32, k: u32, rb: u32) -> vec2<f32> {
    if (KIND <= 1u) { return vdot_pair4(j, l, k, rb); }
    if (PAIRWALK) {
        if (pair_even_aligned(j, rb)) { return vdot_pairp(j, l, k, rb, true); }
        return vdot_pairp(j, l, k, rb, false);
    }
    if (KIND == 7u || KIND == 8u) { return vdot_pairk(j, l, k, rb); }
    let u = unit_walk(j, l, k, rb);
    var b = u.b;
    var o = u.o;
    var x = u.x;
    var a0 = vec2<f32>(0.0);
    var a1 = vec2<f32>(0.0);
    // Four steps per turn while they last (every load of a turn in flight at once: 2-5%
    // faster decode on the H200 than two per turn), then two, then one.
    {
        var a2 = vec2<f32>(0.0);
        var a3 = vec2<f32>(0.0);
        for (; b + 3u * u.bstep < u.nb; b += 4u * u.bstep) {
            let x0 = A4[x + u.cols.x];
            let x1 = A4[x + u.cols.y];
            let y0 = A4[x + u.xstep + u.cols.x];
            let y1 = A4[x + u.xstep + u.cols.y];
            let z0 = A4[x + 2u * u.xstep + u.cols.x];
            let z1 = A4[x + 2u * u.xstep + u.cols.y];
            let v0 = A4[x + 3u * u.xstep + u.cols.x];
            let v1 = A4[x + 3u * u.xstep + u.cols.y];
            a0 += vec2<f32>(udot0(o, u.w, x0, x1), udot1(o, u.w, x0, x1));
            a1 += vec2<f32>(udot0(o + u.ostep, u.w, y0, y1), udot1(o + u.ostep, u.w, y0, y1));
            a2 += vec2<f32>(udot0(o + 2u * u.ostep, u.w, z0, z1), udot1(o + 2u * u.ostep, u.w, z0, z1));
            a3 += vec2<f32>(udot0(o + 3u * u.ostep, u.w, v0, v1), udot1(o + 3u * u.ostep, u.w, v0, v1));
            o += 4u * u.ostep;
            x += 4u * u.xstep;
        }
        a0 += a2;
        a1 += a3;
    }
    for (; b + u.bstep < u.nb; b += 2u * u.bstep) {
        let x0 = A4[x + u.cols.x];
        let x1 = A4[x + u.cols.y];
        let y0 = A4[x + u.xstep + u.cols.x];
        let y1 = A4[x + u.xstep + u.cols.y];
        a0 += vec2<f32>(udot0(o, u.w, x0, x1), udot1(o, u.w, x0, x1));
        a1 += vec2<f32>(udot0(o + u.ostep, u.w, y0, y1), udot1(o + u.ostep, u.w, y0, y1));
        o += 2u * u.ostep;
        x += 2u * u.xstep;
    }
    for (; b < u.nb; b += u.bstep) {
        let x0 = A4[x + u.cols.x];
        let x1 = A4[x + u.cols.y];
        a0 += vec2<f32>(udot0(o, u.w, x0, x1), udot1(o, u.w, x0, x1));
        o += u.ostep;
        x += u.xstep;
    }
    return a0 + a1;
}

// vdot_pair for Q4_K / Q5_K (matvec_fast.wgsl's `vdotk`): each unit's activations loaded once
// for both rows.
fn vdot_pairk(j: u32, l: u32, k: u32, rb: u32) -> vec2<f32> {
    let u = unit_walk(j, l, k, rb);
    var b = u.b;
    var o = u.o;
    var x = u.x + u.cols.x;
    var a0 = vec2<f32>(0.0);
    var a1 = vec2<f32>(0.0);
    for (; b + u.bstep < u.nb; b += 2u * u.bstep) {
        let p = kacts0(x);
        let q = kacts0(x + u.xstep);
        a0 += vec2<f32>(kdot0(o, u.w, p), kdot1(o, u.w, p));
        a1 += vec2<f32>(kdot0(o + u.ostep, u.w, q), kdot1(o + u.ostep, u.w, q));
        o += 2u * u.ostep;
        x += 2u * u.xstep;
    }
    if (b < u.nb) {
        let p = kacts0(x);
        a0 += vec2<f32>(kdot0(o, u.w, p), kdot1(o, u.w, p));
    }
    return a0 + a1;
}

// vdot_pair on matvec_fast.wgsl's pair walk (`vdotp`; PAIRWALK): `ev`, the even blocks'
// levels are 4-aligned.
fn vdot_pairp(j: u32, l: u32, k: u32, rb: u32, ev: bool) -> vec2<f32> {
    let p = pair_walk(j, l, k, rb);
    var b = p.b;
    var o = p.o;
    var x = p.x;
    var a0 = vec2<f32>(0.0);
    var a1 = vec2<f32>(0.0);
    for (; b + 1u < p.nb; b += p.pstep) {
        let x0 = A4[x + p.cols.x];
        let x1 = A4[x + p.cols.y];
        let y0 = A4[x + p.xb + p.cols.x];
        let y1 = A4[x + p.xb + p.cols.y];
        a0 += vec2<f32>(udp0(o, p.w, x0, x1, ev), udp1(o, p.w, x0, x1, ev));
        a1 += vec2<f32>(udp0(o + BYTES, p.w, y0, y1, !ev), udp1(o + BYTES, p.w, y0, y1, !ev));
        o += p.pstep * BYTES;
        x += p.pstep * p.xb;
    }
    if (b < p.nb) {
        let x0 = A4[x + p.cols.x];
        let x1 = A4[x + p.cols.y];
        a0 += vec2<f32>(udp0(o, p.w, x0, x1, ev), udp1(o, p.w, x0, x1, ev));
    }
    return a0 + a1;
}

// vdot_pair for F32 and F16 weights (matvec_fast.wgsl's `vdot4`).
fn vdot_pair4(j: u32, l: u32, k: u32, rb: u32) -> vec2<f32> {
    let step = 4u * LPR;
    let g = (l * 4u) % BLOCK;
    let ostep = (step / BLOCK) * BYTES;
    var o = j * rb + ((l * 4u) / BLOCK) * BYTES;
    var a0 = vec2<f32>(0.0);
    var a1 = vec2<f32>(0.0);
    var c = l * 4u;
    for (; c + step < k; c += 2u * step) {
        let x0 = A4[c / 4u];
        let x1 = A4[c / 4u + LPR];
        a0 += vec2<f32>(dot(w40(o, g), x0), dot(w41(o, g), x0));
        a1 += vec2<f32>(dot(w40(o + ostep, g), x1), dot(w41(o + ostep, g), x1));
        o += 2u * ostep;
    }
    for (; c < k; c += step) {
        let x = A4[c / 4u];
        a0 += vec2<f32>(dot(w40(o, g), x), dot(w41(o, g), x));
        o += ostep;
    }
    return a0 + a1;
}

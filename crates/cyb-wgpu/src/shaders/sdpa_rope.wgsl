// Decode attention with the rope of its q and k and the KV cache appends of k and v before it,
// in one launch (launch.rs `Pending::Attend`): one workgroup of 256 threads per query head of
// one token. The workgroup of head h first writes h's rotated q (the rope's output, which it
// then reads as Q), and the rotated k and the v of its kv head into the caches' row lk - 1,
// where the appends would have put them; the rotated k output is written by the first head of
// each kv head's group. Every head of a group writes the same cache values, so a workgroup
// reads its own writes after the barrier and never waits for another's. Then sdpa_body.wgsl's
// `attend`. Params: 0-5 the q rope's (rope.wgsl: n, heads, seq, head_dim, half, layout), 6 the
// k rope's n, 7 its heads (hkv); 16-28 sdpa.wgsl's 0-12. d and dv are multiples of 4 (QK and
// VV are vec4s).

@group(0) @binding(1) var<storage, read> X0: array<f32>;
@group(0) @binding(2) var<storage, read> X1: array<f32>;
@group(0) @binding(3) var<storage, read> T: array<f32>;
@group(0) @binding(4) var<storage, read> VS: array<f32>;
@group(0) @binding(5) var<storage, read_write> Q: array<QK>;
@group(0) @binding(6) var<storage, read_write> O1: array<f32>;
@group(0) @binding(7) var<storage, read_write> K: array<QK>;
@group(0) @binding(8) var<storage, read_write> V: array<VV>;
@group(0) @binding(9) var<storage, read_write> O: array<f32>;
@group(0) @binding(10) var<storage, read_write> S: array<f32>;

// Element `idx` of a tensor with `heads` heads after the rope (X: its input).
fn roped(idx: u32, heads: u32, first: bool) -> f32 {
    let r = rope_at(idx, heads);
    var a: f32;
    var b: f32;
    if (first) {
        if (!r.rotated) { return X0[idx]; }
        a = X0[r.a];
        b = X0[r.b];
    } else {
        if (!r.rotated) { return X1[idx]; }
        a = X1[r.a];
        b = X1[r.b];
    }
    return rotate(a, b, T[r.tab], T[r.tab + 1u], r.side);
}

@compute @workgroup_size(256)
fn sdpa_rope(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let h = flat_wg(wg, nw);
    let hq = pu(1u);
    let hkv = pu(7u);
    let d = sp(3u);
    let dv = sp(6u);
    let last = sp(5u) - 1u;
    let group = hq / hkv;
    let kvh = h / group;
    if (h < hq) {
        for (var c = t; c < d; c += 256u) {
            let i = h * d + c;
            Q[i / 4u][i % 4u] = roped(i, hq, true);
            let ki = kvh * d + c;
            let k = roped(ki, hkv, false);
            if (h % group == 0u) { O1[ki] = k; }
            let at = (kvh * sp(11u) + last) * d + c;
            K[at / 4u][at % 4u] = k;
        }
        for (var c = t; c < dv; c += 256u) {
            let at = (kvh * sp(12u) + last) * dv + c;
            V[at / 4u][at % 4u] = VS[kvh * dv + c];
        }
    }
    storageBarrier();
    workgroupBarrier();
    attend(h, t);
}

// Decode matvec on integer dot products (`mvq` in matmul.wgsl) for Q8_0, Q4_0 and Q6_K weights.
//
// The activation row is first quantized by `qact` (matmul.wgsl) as the CPU backend quantizes
// it (cyb-cpu quant_act.rs `quantize_block16`): per block of the weight format (32 or 256
// values) a scale d = amax / 32639 and levels L = round(x / d) in -32639 ..= 32639. Each level
// is stored as two signed bytes, L = 256·hi + lo (hi = (L + 128) >> 8, lo in -128 ..= 127), so
// four values are one word of low bytes and one of high bytes: `AQ[i]` holds values 4i .. 4i + 3
// as (lo, hi); the blocks' scales follow the levels as f32 words (`ascale`).
//
// A unit of eight weight values (matvec_fast.wgsl's `udot`, same lanes and walk) becomes two
// words of signed bytes, the levels minus their offset, and meets the activations in four
// `dot4I8Packed` (one instruction each where the device has 8-bit dot products, a few integer
// operations elsewhere). The sum is exact in i32 (Q6_K's worst unit: 2 · 127 · 4 · 32 · 32639
// < 2^31), then scaled once by the weight block's and the activation block's d.

// Σ over four values of the signed bytes of `w` times the 16-bit levels whose low and high bytes
// are q.x and q.y.
fn dq(w: u32, q: vec2<u32>) -> i32 {
    return dot4I8Packed(w, q.x) + 256 * dot4I8Packed(w, q.y);
}

// The bytes of `x` (each below 128 + off) minus `off`, as signed bytes: or-ing in the top bit
// keeps the subtraction from borrowing across bytes, the xor takes it out again.
fn sub_bytes(x: u32, off: u32) -> u32 {
    return ((x | 0x80808080u) - off * 0x01010101u) ^ 0x80808080u;
}

// Signed byte `i` of the weight buffer.
fn rsi(i: u32) -> i32 {
    return bitcast<i32>(rb(i) << 24u) >> 24u;
}

// Unit w of the block at byte `o` against its activation levels q0 and q1 (`ucols(w)`), before
// the blocks' scales; layouts as matvec_fast.wgsl's `udot`.
fn uqdot(o: u32, w: u32, q0: vec2<u32>, q1: vec2<u32>) -> i32 {
    switch KIND {
        case 2u: {
            return dq(u32w(o + 2u + 8u * w), q0) + dq(u32w(o + 6u + 8u * w), q1);
        }
        case 3u: {
            let q = u32w(o + 2u + 4u * w);
            return dq(sub_bytes(q & 0x0f0f0f0fu, 8u), q0)
                + dq(sub_bytes((q >> 4u) & 0x0f0f0f0fu, 8u), q1);
        }
        default: {
            let h = w / 16u;
            let s = (w / 8u) % 2u;
            let e = (w % 8u) * 4u;
            let ql = u32w(o + 64u * h + 32u * s + e);
            let qh = u32w(o + 128u + 32u * h + e);
            let lo = (ql & 0x0f0f0f0fu) | (((qh >> (2u * s)) & 0x03030303u) << 4u);
            let hi = ((ql >> 4u) & 0x0f0f0f0fu) | (((qh >> (2u * s + 4u)) & 0x03030303u) << 4u);
            let sc = o + 192u + 8u * h + 2u * s + e / 16u;
            return rsi(sc) * dq(sub_bytes(lo, 32u), q0) + rsi(sc + 4u) * dq(sub_bytes(hi, 32u), q1);
        }
    }
}

// The scale of the activations' block b (k / 2 words of levels before the scales).
fn ascale(k: u32, b: u32) -> f32 {
    return bitcast<f32>(AQ[k / 4u + b / 2u][b % 2u]);
}

// The weight block's scale d.
fn wscale(o: u32) -> f32 {
    if (KIND == 9u) { return rh(o + 208u); }
    return rh(o);
}

// Unit u.w of the block at byte `o` (block b of the row, activations from vec4 index x), scaled.
fn uqterm(u: UnitWalk, k: u32, o: u32, b: u32, x: u32) -> f32 {
    return f32(uqdot(o, u.w, AQ[x + u.cols.x], AQ[x + u.cols.y])) * (wscale(o) * ascale(k, b));
}

// Lane l's part of row j (k values, rb bytes) against the quantized activations.
fn vdotq(j: u32, l: u32, k: u32, rb: u32) -> f32 {
    let u = unit_walk(j, l, k, rb);
    var b = u.b;
    var o = u.o;
    var x = u.x;
    var a0 = 0.0;
    var a1 = 0.0;
    var a2 = 0.0;
    var a3 = 0.0;
    for (; b + 3u * u.bstep < u.nb; b += 4u * u.bstep) {
        a0 += uqterm(u, k, o, b, x);
        a1 += uqterm(u, k, o + u.ostep, b + u.bstep, x + u.xstep);
        a2 += uqterm(u, k, o + 2u * u.ostep, b + 2u * u.bstep, x + 2u * u.xstep);
        a3 += uqterm(u, k, o + 3u * u.ostep, b + 3u * u.bstep, x + 3u * u.xstep);
        o += 4u * u.ostep;
        x += 4u * u.xstep;
    }
    for (; b < u.nb; b += u.bstep) {
        a0 += uqterm(u, k, o, b, x);
        o += u.ostep;
        x += u.xstep;
    }
    return (a0 + a1) + (a2 + a3);
}

// The 16-bit level of `v` (already divided by the block's d), split into (lo, hi) bytes.
fn level16(v: f32) -> vec2<i32> {
    let l = clamp(i32(round(v)), -32639, 32639);
    let hi = (l + 128) >> 8u;
    return vec2<i32>(l - 256 * hi, hi);
}

// Four levels' low and high bytes packed as words.
fn pack_levels(v: vec4<f32>) -> vec2<u32> {
    let a = level16(v.x);
    let b = level16(v.y);
    let c = level16(v.z);
    let d = level16(v.w);
    let x = bitcast<vec4<u32>>(vec4<i32>(a.x, b.x, c.x, d.x)) & vec4<u32>(0xffu);
    let y = bitcast<vec4<u32>>(vec4<i32>(a.y, b.y, c.y, d.y)) & vec4<u32>(0xffu);
    return vec2<u32>(x.x | (x.y << 8u) | (x.z << 16u) | (x.w << 24u),
                     y.x | (y.y << 8u) | (y.z << 16u) | (y.w << 24u));
}

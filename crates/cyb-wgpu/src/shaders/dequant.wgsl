// Weight element readers: the weight buffer W is the tensor's packed bytes (GGUF block layouts,
// little-endian), read as u32 words through `wu` and 16-byte words through `wq` (kernels.rs
// defines both for the binding's element type, `WT`). `o` is a block's byte offset, `e` the element in it.
// The host prepends `const BLOCK`, `const BYTES` and `const KIND` (0 F32, 1 F16, 2 Q8_0, 3 Q4_0,
// 4 Q4_1, 5 Q5_0, 6 Q5_1, 7 Q4_K, 8 Q5_K, 9 Q6_K).

fn rb(i: u32) -> u32 { return (wu(i >> 2u) >> ((i & 3u) * 8u)) & 0xffu; }
fn rsb(i: u32) -> f32 { return f32(bitcast<i32>(rb(i) << 24u) >> 24u); }
fn rh(o: u32) -> f32 { return unpack2x16float((wu(o >> 2u) >> ((o & 2u) * 8u)) & 0xffffu).x; }
fn rw(o: u32) -> u32 { return rb(o) | (rb(o + 1u) << 8u) | (rb(o + 2u) << 16u) | (rb(o + 3u) << 24u); }

fn kscale_min(o: u32, j: u32) -> vec2<f32> {
    // o: byte offset of the 12 packed scale bytes
    if (j < 4u) {
        return vec2<f32>(f32(rb(o + j) & 63u), f32(rb(o + j + 4u) & 63u));
    }
    let sc = (rb(o + j + 4u) & 0x0fu) | ((rb(o + j - 4u) >> 6u) << 4u);
    let m = (rb(o + j + 4u) >> 4u) | ((rb(o + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}

fn deq(o: u32, e: u32) -> f32 {
    switch KIND {
        case 0u: { return bitcast<f32>(wu(o >> 2u)); }
        case 1u: { return rh(o); }
        case 2u: { return rsb(o + 2u + e) * rh(o); }
        case 3u: {
            let q = rb(o + 2u + (e & 15u));
            let l = select(q & 15u, q >> 4u, e >= 16u);
            return (f32(l) - 8.0) * rh(o);
        }
        case 4u: {
            let q = rb(o + 4u + (e & 15u));
            let l = select(q & 15u, q >> 4u, e >= 16u);
            return rh(o) * f32(l) + rh(o + 2u);
        }
        case 5u: {
            let q = rb(o + 6u + (e & 15u));
            let l = select(q & 15u, q >> 4u, e >= 16u) | (((rw(o + 2u) >> e) & 1u) << 4u);
            return (f32(l) - 16.0) * rh(o);
        }
        case 6u: {
            let q = rb(o + 8u + (e & 15u));
            let l = select(q & 15u, q >> 4u, e >= 16u) | (((rw(o + 4u) >> e) & 1u) << 4u);
            return rh(o) * f32(l) + rh(o + 2u);
        }
        case 7u, 8u: {
            let sm = kscale_min(o + 4u, e / 32u);
            let qs = select(o + 16u, o + 48u, KIND == 8u);
            let byte = 32u * (e / 64u) + (e % 32u);
            let shift = select(4u, 0u, (e % 64u) < 32u);
            var q = (rb(qs + byte) >> shift) & 15u;
            if (KIND == 8u) {
                q = q | (((rb(o + 16u + (e % 32u)) >> (e / 32u)) & 1u) << 4u);
            }
            return rh(o) * sm.x * f32(q) - rh(o + 2u) * sm.y;
        }
        default: {
            let half = e / 128u;
            let s = (e % 128u) / 32u;
            let l = e % 32u;
            let lo = (rb(o + 64u * half + 32u * (s % 2u) + l) >> select(4u, 0u, s < 2u)) & 15u;
            let hi = (rb(o + 128u + 32u * half + l) >> (2u * s)) & 3u;
            let q = lo | (hi << 4u);
            return rh(o + 208u) * rsb(o + 192u + e / 16u) * f32(i32(q) - 32);
        }
    }
}

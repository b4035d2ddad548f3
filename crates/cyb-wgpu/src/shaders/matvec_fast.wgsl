// Decode matvec (one activation row): lane `l` of the LPR that share weight row `j` returns its
// part of Σ_p a[p] · w[j, p]. LPR is a power of two from 32 to 256, at least 64 for 256-value
// blocks, so that a step holds whole blocks. The lanes walk the row in steps of 4·LPR values,
// lane `l` taking the four values 4l .. 4l + 3 of each step: the activations of one step are
// neighbouring bytes (read as `A4`, four values per load, one cache line per eight lanes), and
// so are the weights' packed words. Each lane dequantizes its four weights (`w4`). The loop
// is unrolled four times so that every lane has several loads in flight; the host picks LPR
// so that short rows still give every lane work and few rows still fill the GPU.
// A template: `@` is replaced by the weight binding's number (or by nothing for matmul.wgsl's
// `W`); the scale readers `rh`, `rsb` and `kscale_min` are dequant.wgsl's, numbered the same
// way. Blocks of 18, 22, 34 and 210 bytes start at even, not always 4-aligned, byte offsets:
// words are read around them and shifted into place (`u32w`).

// The u32 at the even byte offset `o`.
fn u32w@(o: u32) -> u32 {
    let w = o >> 2u;
    if ((o & 2u) == 0u) { return W@[w]; }
    return (W@[w] >> 16u) | (W@[w + 1u] << 16u);
}

// Weights g .. g + 3 (g a multiple of 4) of the block at byte `o` (for F32 and F16 a
// "block" is one value: `o` is the first value's byte, g is 0). A lane's g stays the same
// from step to step (the step is a multiple of the block), so what depends on it alone is
// worked out once per lane, not once per step.
fn w4@(o: u32, g: u32) -> vec4<f32> {
    switch KIND {
        case 0u: {
            let w = o >> 2u;
            return bitcast<vec4<f32>>(vec4<u32>(W@[w], W@[w + 1u], W@[w + 2u], W@[w + 3u]));
        }
        case 1u: {
            let w = o >> 2u;
            return vec4<f32>(unpack2x16float(W@[w]), unpack2x16float(W@[w + 1u]));
        }
        // Q8_0: d, 32 signed bytes.
        case 2u: {
            return rh@(o) * sbytes(u32w@(o + 2u + g));
        }
        // Q4_0 / Q4_1 / Q5_0 / Q5_1: 16 bytes of nibbles end each block (value i in byte i's
        // low nibble, value 16 + i in its high one); Q5 blocks hold 32 fifth bits after the
        // scale(s); Q4_1 / Q5_1 add a minimum.
        case 3u, 4u, 5u, 6u: {
            var q = (u32w@(o + BYTES - 16u + (g & 15u)) >> ((g >> 4u) * 4u)) & 0x0f0f0f0fu;
            if (KIND == 5u || KIND == 6u) {
                var hb = 0u;
                if (KIND == 5u) { hb = u32w@(o + 2u); } else { hb = u32w@(o + 4u); }
                q |= spread4(hb >> g) << 4u;
            }
            let v = ubytes(q);
            if (KIND == 3u) { return rh@(o) * (v - 8.0); }
            if (KIND == 5u) { return rh@(o) * (v - 16.0); }
            return rh@(o) * v + rh@(o + 2u);
        }
        // Q4_K / Q5_K: value 64i + 32h + e (e < 32) is the low (h = 0) or high nibble of
        // byte 32i + e of the 128 that end the block, with scale and minimum 2i + h; Q5_K's
        // fifth bit is bit 2i + h of byte e of the 32 after the scales.
        case 7u, 8u: {
            let sub = g / 32u;
            let e = g % 32u;
            var q = (W@[(o + BYTES - 128u + 32u * (g / 64u) + e) >> 2u] >> ((sub & 1u) * 4u))
                    & 0x0f0f0f0fu;
            if (KIND == 8u) { q |= ((W@[(o + 16u + e) >> 2u] >> sub) & 0x01010101u) << 4u; }
            let sm = kscale_min@(o + 4u, sub);
            return (rh@(o) * sm.x) * ubytes(q) - rh@(o + 2u) * sm.y;
        }
        // Q6_K: value 128h + 32s + e (e < 32): low 4 bits from the low (s < 2) or high nibble
        // of byte 64h + 32(s & 1) + e, high 2 bits from bits 2s of byte 128 + 32h + e; signed
        // scale byte 192 + 8h + 2s + e / 16; d at 208.
        default: {
            let h = g / 128u;
            let s = (g / 32u) % 4u;
            let e = g % 32u;
            let ql = u32w@(o + 64u * h + 32u * (s & 1u) + e);
            let qh = u32w@(o + 128u + 32u * h + e);
            let q = ((ql >> ((s >> 1u) * 4u)) & 0x0f0f0f0fu) | (((qh >> (2u * s)) & 0x03030303u) << 4u);
            let sc = rsb@(o + 192u + 8u * h + 2u * s + e / 16u);
            return (rh@(o + 208u) * sc) * (ubytes(q) - 32.0);
        }
    }
}

// k: values per row (a multiple of 4); rb: bytes per row. Lane l's values 4l + step·i sit at
// block offset o0 + ostep·i, in-block index g.
fn vdot@(j: u32, l: u32, k: u32, rb: u32) -> f32 {
    let step = 4u * LPR;
    let g = (l * 4u) % BLOCK;
    let ostep = (step / BLOCK) * BYTES;
    var o = j * rb + ((l * 4u) / BLOCK) * BYTES;
    var a0 = 0.0;
    var a1 = 0.0;
    var a2 = 0.0;
    var a3 = 0.0;
    var c = l * 4u;
    for (; c + 3u * step < k; c += 4u * step) {
        a0 += dot(w4@(o, g), A4[c / 4u]);
        a1 += dot(w4@(o + ostep, g), A4[c / 4u + LPR]);
        a2 += dot(w4@(o + 2u * ostep, g), A4[c / 4u + 2u * LPR]);
        a3 += dot(w4@(o + 3u * ostep, g), A4[c / 4u + 3u * LPR]);
        o += 4u * ostep;
    }
    for (; c < k; c += step) {
        a0 += dot(w4@(o, g), A4[c / 4u]);
        o += ostep;
    }
    return (a0 + a1) + (a2 + a3);
}

// Decode matvec (one activation row): lane `l` of the LPR that share weight row `j` returns its
// part of Σ_p a[p] · w[j, p]. LPR is a power of two from 32 to 256 (a 256-value block's 32
// units then have a lane each). The host picks LPR so that short rows still give every lane
// work and few rows still fill the GPU.
//
// F32 and F16: the lanes walk the row in steps of 4·LPR values, lane `l` taking the four values
// 4l .. 4l + 3 of each step (`w4`): neighbouring lanes read neighbouring activations (`A4`,
// four values per load) and weights.
//
// Quantized formats: a block is cut into UPB units of 8 values, each held by one 32-bit word of
// its packed levels (Q8_0: two words), and lane `l` takes unit l % UPB of blocks l / UPB,
// l / UPB + LPR / UPB, ... (`udot`). A unit's 8 values are two runs of four (`ucols`: the low
// and high nibbles of one word of levels are values 32 or 64 apart, 16 apart within Q4_0's
// 32), so a lane reads one word of levels and two `vec4`s of activations per step; the lanes of
// one block read neighbouring words. Two units per lane-step would need wider loads than the
// blocks' 2-byte alignment allows. Q4_K and Q5_K take wider units of 32 values (`kdot`): their
// blocks start at multiples of 16 bytes and are read as 16-byte words, and a lane decodes a
// block's packed scales once per 32 values.
//
// Loops are unrolled four times so that every lane has several loads in flight.
// A template: `@` is replaced by the weight binding's number (or by nothing for matmul.wgsl's
// `W`); the scale readers `rh`, `rsb` and `kscale_min` are dequant.wgsl's, numbered the same
// way. Blocks of 18, 22, 34 and 210 bytes start at even, not always 4-aligned, byte offsets:
// words are read around them and shifted into place (`u32w`).

// The u32 at the even byte offset `o`: both words around it are read and the right one picked
// or spliced, without a branch (the lanes of one warp read blocks of both alignments, and a
// branch would run both ways one after the other). At an aligned `o` in the tensor's last word
// the second read is one word past the tensor: weight buffers are one word longer than their
// bytes (backend.rs), and what is read there is never used.
fn u32w@(o: u32) -> u32 {
    let w = o >> 2u;
    let a = wu@(w);
    let b = wu@(w + 1u);
    return select((a >> 16u) | (b << 16u), a, (o & 2u) == 0u);
}

// Weights g .. g + 3 (g a multiple of 4) of the block at byte `o` (for F32 and F16 a
// "block" is one value: `o` is the first value's byte, g is 0). A lane's g stays the same
// from step to step (the step is a multiple of the block), so what depends on it alone is
// worked out once per lane, not once per step.
fn w4@(o: u32, g: u32) -> vec4<f32> {
    switch KIND {
        case 0u: {
            let w = o >> 2u;
            return bitcast<vec4<f32>>(vec4<u32>(wu@(w), wu@(w + 1u), wu@(w + 2u), wu@(w + 3u)));
        }
        case 1u: {
            let w = o >> 2u;
            return vec4<f32>(unpack2x16float(wu@(w)), unpack2x16float(wu@(w + 1u)));
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
            var q = (wu@((o + BYTES - 128u + 32u * (g / 64u) + e) >> 2u) >> ((sub & 1u) * 4u))
                    & 0x0f0f0f0fu;
            if (KIND == 8u) { q |= ((wu@((o + 16u + e) >> 2u) >> sub) & 0x01010101u) << 4u; }
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

// Unit w (< UPB) of the block at byte `o` times its activations x0 (values ucols(w).x · 4 ..)
// and x1 (ucols(w).y · 4 ..), for the quantized formats. Levels become floats as 2^23 + level
// (`mbytes`), the offset taken off with the format's own in one subtraction, and the block's
// scales multiply the two dot products, not every value.
fn udot@(o: u32, w: u32, x0: vec4<f32>, x1: vec4<f32>) -> f32 {
    switch KIND {
        // Q8_0: d, 32 signed bytes; unit w is values 8w .. 8w + 7 (a signed byte b is read as
        // the unsigned b + 128).
        case 2u: {
            let lo = u32w@(o + 2u + 8u * w) ^ 0x80808080u;
            let hi = u32w@(o + 6u + 8u * w) ^ 0x80808080u;
            return rh@(o) * (dot(mbytes(lo) - (M23 + 128.0), x0) + dot(mbytes(hi) - (M23 + 128.0), x1));
        }
        // Q4_0 / Q4_1 / Q5_0 / Q5_1: word w of the 16 bytes of nibbles that end the block holds
        // values 4w .. 4w + 3 (low nibbles) and 16 + 4w .. (high); Q5 fifth bits after the
        // scale(s).
        case 3u, 4u, 5u, 6u: {
            let q = u32w@(o + BYTES - 16u + 4u * w);
            var lo = q & 0x0f0f0f0fu;
            var hi = (q >> 4u) & 0x0f0f0f0fu;
            if (KIND == 5u || KIND == 6u) {
                var hb = 0u;
                if (KIND == 5u) { hb = u32w@(o + 2u); } else { hb = u32w@(o + 4u); }
                lo |= spread4(hb >> (4u * w)) << 4u;
                hi |= spread4(hb >> (16u + 4u * w)) << 4u;
            }
            let d = rh@(o);
            if (KIND == 3u) { return d * (dot(mbytes(lo) - (M23 + 8.0), x0) + dot(mbytes(hi) - (M23 + 8.0), x1)); }
            if (KIND == 5u) { return d * (dot(mbytes(lo) - (M23 + 16.0), x0) + dot(mbytes(hi) - (M23 + 16.0), x1)); }
            let one = vec4<f32>(1.0);
            return d * (dot(mbytes(lo) - M23, x0) + dot(mbytes(hi) - M23, x1))
                + rh@(o + 2u) * (dot(x0, one) + dot(x1, one));
        }
        // Q6_K: w = 16h + 8s + e/4 (s < 2): the word of low bits at byte 64h + 32s + e holds
        // values 128h + 32s + e .. (low nibbles) and 128h + 32(s + 2) + e .. (high); their top
        // two bits are bits 2s and 2(s + 2) of the word at byte 128 + 32h + e; signed scale bytes
        // 192 + 8h + 2s + e/16 and 4 further; d at 208.
        default: {
            let h = w / 16u;
            let s = (w / 8u) % 2u;
            let e = (w % 8u) * 4u;
            let ql = u32w@(o + 64u * h + 32u * s + e);
            let qh = u32w@(o + 128u + 32u * h + e);
            let lo = (ql & 0x0f0f0f0fu) | (((qh >> (2u * s)) & 0x03030303u) << 4u);
            let hi = ((ql >> 4u) & 0x0f0f0f0fu) | (((qh >> (2u * s + 4u)) & 0x03030303u) << 4u);
            let d = rh@(o + 208u);
            let sc = o + 192u + 8u * h + 2u * s + e / 16u;
            return d * (rsb@(sc) * dot(mbytes(lo) - (M23 + 32.0), x0)
                + rsb@(sc + 4u) * dot(mbytes(hi) - (M23 + 32.0), x1));
        }
    }
}

// The activations of a wide Q4_K / Q5_K unit (`kdot`): four `vec4`s from A4[x] (the low
// nibbles' values) and four from A4[x + 8] (the high nibbles', 32 values on).
fn kacts@(x: u32) -> KActs {
    return KActs(mat4x4<f32>(A4[x], A4[x + 1u], A4[x + 2u], A4[x + 3u]),
                 mat4x4<f32>(A4[x + 8u], A4[x + 9u], A4[x + 10u], A4[x + 11u]));
}

// Unit w (< 8) of the Q4_K / Q5_K block at byte `o` times its activations `a` (`kacts`). The
// unit is 32 values: w = 2i + h takes the four words of levels at byte 32i + 16h of the 128
// that end the block, whose low nibbles are values 64i + 16h .. + 15 (scale and minimum 2i) and
// high nibbles the 16 values 32 further on (2i + 1); Q5_K's fifth bits are bits 2i and 2i + 1 of
// the bytes 16h .. 16h + 15 of the 32 after the scales. Blocks of 144 and 176 bytes start at
// multiples of 16 bytes (rows are whole blocks), and these kernels bind the weights as 16-byte
// words (`wq`, kernels.rs): the unit's levels are one load, its fifth bits another, and d, the
// minimum's scale and the 12 scale bytes a third, which all lanes of the block share. Both
// sub-blocks' 6-bit scales and minimums come out of those words without a branch.
fn kdot@(o: u32, w: u32, a: KActs) -> f32 {
    let i = w / 2u;
    // d and the minimum's scale, then the 12 scale bytes: the block's first 16 bytes.
    let head = wq@(o >> 4u);
    let dm = unpack2x16float(head.x);
    let sh = 16u * (i & 1u);
    let p0 = (head.y >> sh) & 0xffffu;
    let p1 = (head.z >> sh) & 0xffffu;
    let p2 = (head.w >> sh) & 0xffffu;
    let hi_sub = i >= 2u;
    let sc = select(p0 & 0x3f3fu, (p2 & 0x0f0fu) | ((p0 >> 2u) & 0x3030u), hi_sub);
    let mn = select(p1 & 0x3f3fu, ((p2 >> 4u) & 0x0f0fu) | ((p1 >> 2u) & 0x3030u), hi_sub);
    let q = wq@((o + BYTES - 128u + 16u * w) >> 4u);
    var lo = q & vec4<u32>(0x0f0f0f0fu);
    var hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu);
    if (KIND == 8u) {
        let h = wq@((o + 16u + 16u * (w & 1u)) >> 4u);
        lo |= ((h >> vec4<u32>(2u * i)) & vec4<u32>(0x01010101u)) << vec4<u32>(4u);
        hi |= ((h >> vec4<u32>(2u * i + 1u)) & vec4<u32>(0x01010101u)) << vec4<u32>(4u);
    }
    var slo = 0.0;
    var shi = 0.0;
    for (var c = 0u; c < 4u; c++) {
        slo += dot(mbytes(lo[c]) - M23, a.lo[c]);
        shi += dot(mbytes(hi[c]) - M23, a.hi[c]);
    }
    let one = vec4<f32>(1.0);
    let xlo = dot((a.lo[0] + a.lo[1]) + (a.lo[2] + a.lo[3]), one);
    let xhi = dot((a.hi[0] + a.hi[1]) + (a.hi[2] + a.hi[3]), one);
    return dm.x * (f32(sc & 0xffu) * slo + f32(sc >> 8u) * shi)
        - dm.y * (f32(mn & 0xffu) * xlo + f32(mn >> 8u) * xhi);
}

// `vdot` for Q4_K / Q5_K: lane l takes wide unit l % 8 (`kdot`) of its blocks, two blocks per
// turn.
fn vdotk@(j: u32, l: u32, k: u32, rb: u32) -> f32 {
    let u = unit_walk(j, l, k, rb);
    var b = u.b;
    var o = u.o;
    var x = u.x + u.cols.x;
    var a0 = 0.0;
    var a1 = 0.0;
    for (; b + u.bstep < u.nb; b += 2u * u.bstep) {
        a0 += kdot@(o, u.w, kacts@(x));
        a1 += kdot@(o + u.ostep, u.w, kacts@(x + u.xstep));
        o += 2u * u.ostep;
        x += 2u * u.xstep;
    }
    if (b < u.nb) { a0 += kdot@(o, u.w, kacts@(x)); }
    return a0 + a1;
}

// The word at the even byte offset `o`, known to be 4-aligned (`al`) or not: callers pass a
// constant, so an aligned word is one load where `u32w` takes two.
fn wd@(o: u32, al: bool) -> u32 {
    if (al) { return wu@(o >> 2u); }
    return u32w@(o);
}

// `udot` for Q4_0 (PAIRWALK) with the alignment of the block's levels given: they start 2
// bytes into the block, so they are 4-aligned where the block is not.
fn udp@(o: u32, w: u32, x0: vec4<f32>, x1: vec4<f32>, al: bool) -> f32 {
    let q = wd@(o + 2u + 4u * w, al);
    let lo = q & 0x0f0f0f0fu;
    let hi = (q >> 4u) & 0x0f0f0f0fu;
    return rh@(o) * (dot(mbytes(lo) - (M23 + 8.0), x0) + dot(mbytes(hi) - (M23 + 8.0), x1));
}

// `vdot` for Q4_0 (PAIRWALK, kernels.rs): its 18-byte blocks alternate between 4-aligned and
// 2-aligned levels, so lane group g (the UPB lanes of one block) takes the block pairs
// (2g, 2g + 1), (2g + 2G, 2g + 2G + 1), ... (G groups per row): at every step the lanes of a
// row read blocks of one alignment, known from the row's first byte, and an aligned word
// costs one load instead of two (`vdotp_al`'s `ev`: the even blocks' levels are aligned).
fn vdotp@(j: u32, l: u32, k: u32, rb: u32) -> f32 {
    if (pair_even_aligned(j, rb)) { return vdotp_al@(j, l, k, rb, true); }
    return vdotp_al@(j, l, k, rb, false);
}

fn vdotp_al@(j: u32, l: u32, k: u32, rb: u32, ev: bool) -> f32 {
    let p = pair_walk(j, l, k, rb);
    var b = p.b;
    var o = p.o;
    var x = p.x;
    var a0 = 0.0;
    var a1 = 0.0;
    var a2 = 0.0;
    var a3 = 0.0;
    for (; b + p.pstep + 1u < p.nb; b += 2u * p.pstep) {
        let o2 = o + p.pstep * BYTES;
        let x2 = x + p.pstep * p.xb;
        a0 += udp@(o, p.w, A4[x + p.cols.x], A4[x + p.cols.y], ev);
        a1 += udp@(o + BYTES, p.w, A4[x + p.xb + p.cols.x], A4[x + p.xb + p.cols.y], !ev);
        a2 += udp@(o2, p.w, A4[x2 + p.cols.x], A4[x2 + p.cols.y], ev);
        a3 += udp@(o2 + BYTES, p.w, A4[x2 + p.xb + p.cols.x], A4[x2 + p.xb + p.cols.y], !ev);
        o += 2u * p.pstep * BYTES;
        x += 2u * p.pstep * p.xb;
    }
    for (; b + 1u < p.nb; b += p.pstep) {
        a0 += udp@(o, p.w, A4[x + p.cols.x], A4[x + p.cols.y], ev);
        a1 += udp@(o + BYTES, p.w, A4[x + p.xb + p.cols.x], A4[x + p.xb + p.cols.y], !ev);
        o += p.pstep * BYTES;
        x += p.pstep * p.xb;
    }
    if (b < p.nb) { a0 += udp@(o, p.w, A4[x + p.cols.x], A4[x + p.cols.y], ev); }
    return (a0 + a1) + (a2 + a3);
}

// k: values per row (a multiple of 4; of BLOCK for the quantized formats); rb: bytes per row.
fn vdot@(j: u32, l: u32, k: u32, rb: u32) -> f32 {
    if (KIND <= 1u) { return vdot4@(j, l, k, rb); }
    if (PAIRWALK) { return vdotp@(j, l, k, rb); }
    if (KIND == 7u || KIND == 8u) { return vdotk@(j, l, k, rb); }
    let u = unit_walk(j, l, k, rb);
    var b = u.b;
    var o = u.o;
    var x = u.x;
    var a0 = 0.0;
    var a1 = 0.0;
    var a2 = 0.0;
    var a3 = 0.0;
    for (; b + 3u * u.bstep < u.nb; b += 4u * u.bstep) {
        a0 += udot@(o, u.w, A4[x + u.cols.x], A4[x + u.cols.y]);
        a1 += udot@(o + u.ostep, u.w, A4[x + u.xstep + u.cols.x], A4[x + u.xstep + u.cols.y]);
        a2 += udot@(o + 2u * u.ostep, u.w, A4[x + 2u * u.xstep + u.cols.x], A4[x + 2u * u.xstep + u.cols.y]);
        a3 += udot@(o + 3u * u.ostep, u.w, A4[x + 3u * u.xstep + u.cols.x], A4[x + 3u * u.xstep + u.cols.y]);
        o += 4u * u.ostep;
        x += 4u * u.xstep;
    }
    for (; b < u.nb; b += u.bstep) {
        a0 += udot@(o, u.w, A4[x + u.cols.x], A4[x + u.cols.y]);
        o += u.ostep;
        x += u.xstep;
    }
    return (a0 + a1) + (a2 + a3);
}

// F32 / F16: lane l's values 4l + step·i sit at block offset o0 + ostep·i, in-block index g.
fn vdot4@(j: u32, l: u32, k: u32, rb: u32) -> f32 {
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

// Rows j .. j + MR - 1 of `vdot` at once (MR ≤ 4; rows from n on repeat row n - 1, whose
// results the caller drops): each activation load serves every row. One row (always for F32
// and F16: ops::matmul::mv_rows_per_lane) is `vdot` itself.
fn vdotm@(j: u32, n: u32, l: u32, k: u32, rb: u32) -> vec4<f32> {
    if (MR == 1u || KIND <= 1u) { return vec4<f32>(vdot@(j, l, k, rb), 0.0, 0.0, 0.0); }
    var ro: array<u32, 4>;
    for (var r = 0u; r < MR; r++) { ro[r] = (min(j + r, n - 1u) - j) * rb; }
    let u = unit_walk(j, l, k, rb);
    var b = u.b;
    var o = u.o;
    var x = u.x;
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    for (; b + u.bstep < u.nb; b += 2u * u.bstep) {
        let x0 = A4[x + u.cols.x];
        let x1 = A4[x + u.cols.y];
        let y0 = A4[x + u.xstep + u.cols.x];
        let y1 = A4[x + u.xstep + u.cols.y];
        for (var r = 0u; r < MR; r++) {
            a0[r] += udot@(o + ro[r], u.w, x0, x1);
            a1[r] += udot@(o + u.ostep + ro[r], u.w, y0, y1);
        }
        o += 2u * u.ostep;
        x += 2u * u.xstep;
    }
    for (; b < u.nb; b += u.bstep) {
        let x0 = A4[x + u.cols.x];
        let x1 = A4[x + u.cols.y];
        for (var r = 0u; r < MR; r++) { a0[r] += udot@(o + ro[r], u.w, x0, x1); }
        o += u.ostep;
        x += u.xstep;
    }
    return a0 + a1;
}

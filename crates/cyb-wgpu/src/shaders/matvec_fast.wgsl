// Decode matvec (one activation row): lane `l` (0..31) of the 32 that share weight row `j`
// returns its part of Σ_p a[p] · w[j, p]. Unlike `dot` (matvec_dot.wgsl), a lane takes whole
// blocks (a quarter of a 256-value K-quant block), so it reads a block's scale once and its
// packed values as whole words, and neighbouring lanes read neighbouring blocks. A template:
// `@` is replaced by the weight binding's number (or by nothing for matmul.wgsl's `W`).
// Blocks of 18, 22, 34 and 210 bytes start at even, not always 4-aligned, byte offsets: words
// are read around them and shifted into place (`ldq@`).

// Four words (16 bytes) from the even byte offset `o`.
fn ldq@(o: u32) -> vec4<u32> {
    let w = o >> 2u;
    let x0 = W@[w];
    let x1 = W@[w + 1u];
    let x2 = W@[w + 2u];
    let x3 = W@[w + 3u];
    if ((o & 2u) == 0u) {
        return vec4<u32>(x0, x1, x2, x3);
    }
    let x4 = W@[w + 4u];
    return vec4<u32>((x0 >> 16u) | (x1 << 16u), (x1 >> 16u) | (x2 << 16u),
                     (x2 >> 16u) | (x3 << 16u), (x3 >> 16u) | (x4 << 16u));
}

// The f16 at the even byte offset `o`.
fn hw@(o: u32) -> f32 {
    return unpack2x16float(W@[o >> 2u] >> ((o & 2u) * 8u)).x;
}

// The byte at offset `o`.
fn byte@(o: u32) -> u32 {
    return (W@[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu;
}

// The u32 at the even byte offset `o`.
fn u32w@(o: u32) -> u32 {
    let w = o >> 2u;
    if ((o & 2u) == 0u) { return W@[w]; }
    return (W@[w] >> 16u) | (W@[w + 1u] << 16u);
}

// k: values per row; rb: bytes per row.
fn vdot@(j: u32, l: u32, k: u32, rb: u32) -> f32 {
    let row = j * rb;
    var acc = 0.0;
    switch KIND {
        // F32 and F16: eight values per lane and step.
        case 0u: {
            for (var c = l * 4u; c < k; c += 128u) {
                let o = row + c * 4u;
                let w = vec4<f32>(bitcast<f32>(W@[o >> 2u]), bitcast<f32>(W@[(o >> 2u) + 1u]),
                                  bitcast<f32>(W@[(o >> 2u) + 2u]), bitcast<f32>(W@[(o >> 2u) + 3u]));
                acc += dot(w, vec4<f32>(A[c], A[c + 1u], A[c + 2u], A[c + 3u]));
            }
        }
        case 1u: {
            for (var c = l * 8u; c < k; c += 256u) {
                let q = ldq@(row + c * 2u);
                let w0 = vec4<f32>(unpack2x16float(q.x), unpack2x16float(q.y));
                let w1 = vec4<f32>(unpack2x16float(q.z), unpack2x16float(q.w));
                acc += dot(w0, vec4<f32>(A[c], A[c + 1u], A[c + 2u], A[c + 3u]))
                     + dot(w1, vec4<f32>(A[c + 4u], A[c + 5u], A[c + 6u], A[c + 7u]));
            }
        }
        // Q8_0: d, 32 signed bytes.
        case 2u: {
            for (var b = l; b < k / 32u; b += 32u) {
                let o = row + b * BYTES;
                let q0 = ldq@(o + 2u);
                let q1 = ldq@(o + 18u);
                let p = b * 32u;
                let s = dots(q0.x, p) + dots(q0.y, p + 4u) + dots(q0.z, p + 8u) + dots(q0.w, p + 12u)
                      + dots(q1.x, p + 16u) + dots(q1.y, p + 20u) + dots(q1.z, p + 24u)
                      + dots(q1.w, p + 28u);
                acc += hw@(o) * s;
            }
        }
        // Q4_0 / Q4_1 / Q5_0 / Q5_1: 16 bytes of nibbles (value i low, i + 16 high), Q5 with
        // 32 fifth bits; Q4_1/Q5_1 add a minimum.
        case 3u, 4u, 5u, 6u: {
            // The 16 bytes of nibbles end each block.
            for (var b = l; b < k / 32u; b += 32u) {
                let o = row + b * BYTES;
                let q = ldq@(o + BYTES - 16u);
                var hb = 0u;
                if (KIND == 5u) { hb = u32w@(o + 2u); }
                if (KIND == 6u) { hb = u32w@(o + 4u); }
                var bias = 8.0;
                if (KIND == 5u) { bias = 16.0; }
                if (KIND == 4u || KIND == 6u) { bias = 0.0; }
                let p = b * 32u;
                var s = 0.0;
                for (var i = 0u; i < 4u; i++) {
                    var lo = q[i] & 0x0f0f0f0fu;
                    var hi = (q[i] >> 4u) & 0x0f0f0f0fu;
                    if (KIND == 5u || KIND == 6u) {
                        // Bit 4i + e of qh is value 4i + e's fifth bit, 16 + 4i + e's for hi.
                        let bl = (hb >> (4u * i)) & 15u;
                        let bh = (hb >> (16u + 4u * i)) & 15u;
                        lo |= ((bl & 1u) | ((bl & 2u) << 7u) | ((bl & 4u) << 14u) | ((bl & 8u) << 21u)) << 4u;
                        hi |= ((bh & 1u) | ((bh & 2u) << 7u) | ((bh & 4u) << 14u) | ((bh & 8u) << 21u)) << 4u;
                    }
                    s += dotu(lo, p + 4u * i, bias) + dotu(hi, p + 16u + 4u * i, bias);
                }
                if (KIND == 4u || KIND == 6u) {
                    var sa = 0.0;
                    for (var i = 0u; i < 8u; i++) { sa += asum4(p + 4u * i); }
                    acc += hw@(o) * s + hw@(o + 2u) * sa;
                } else {
                    acc += hw@(o) * s;
                }
            }
        }
        // Q4_K / Q5_K: a lane takes one 64-value quarter c of a block (32 bytes of nibbles:
        // low → values 64c..64c+31 with scale 2c, high → 64c+32.. with scale 2c+1).
        case 7u, 8u: {
            let c = l & 3u;
            // The 128 bytes of nibbles end each block.
            let qs = BYTES - 128u;
            for (var b = l >> 2u; b < k / 256u; b += 8u) {
                let o = row + b * BYTES;
                let d = hw@(o);
                let dmin = hw@(o + 2u);
                let sm0 = kscale_min_at@(o + 4u, 2u * c);
                let sm1 = kscale_min_at@(o + 4u, 2u * c + 1u);
                let p = b * 256u + 64u * c;
                var s0 = 0.0;
                var s1 = 0.0;
                var a0 = 0.0;
                var a1 = 0.0;
                for (var h = 0u; h < 2u; h++) {
                    let q = ldq@(o + qs + 32u * c + 16u * h);
                    var qh = vec4<u32>(0u);
                    if (KIND == 8u) { qh = ldq@(o + 16u + 16u * h); }
                    for (var i = 0u; i < 4u; i++) {
                        var lo = q[i] & 0x0f0f0f0fu;
                        var hi = (q[i] >> 4u) & 0x0f0f0f0fu;
                        if (KIND == 8u) {
                            lo |= ((qh[i] >> (2u * c)) & 0x01010101u) << 4u;
                            hi |= ((qh[i] >> (2u * c + 1u)) & 0x01010101u) << 4u;
                        }
                        let e = p + 16u * h + 4u * i;
                        s0 += dotu(lo, e, 0.0);
                        s1 += dotu(hi, e + 32u, 0.0);
                        a0 += asum4(e);
                        a1 += asum4(e + 32u);
                    }
                }
                acc += d * (sm0.x * s0 + sm1.x * s1) - dmin * (sm0.y * a0 + sm1.y * a1);
            }
        }
        // Q6_K: a lane takes half h of a block and 16 positions l0.. of it, i.e. for each of
        // the four 32-value groups s the values 128h + 32s + l0 .. + 16.
        default: {
            let h = (l >> 1u) & 1u;
            let l0 = (l & 1u) * 16u;
            for (var b = l >> 2u; b < k / 256u; b += 8u) {
                let o = row + b * BYTES;
                let qa = ldq@(o + 64u * h + l0);
                let qb = ldq@(o + 64u * h + 32u + l0);
                let qh = ldq@(o + 128u + 32u * h + l0);
                let so = o + 192u + 8u * h + l0 / 16u;
                let p = b * 256u + 128u * h + l0;
                var t = 0.0;
                for (var s = 0u; s < 4u; s++) {
                    var sum = 0.0;
                    for (var i = 0u; i < 4u; i++) {
                        var nib = qa[i];
                        if (s == 1u || s == 3u) { nib = qb[i]; }
                        if (s >= 2u) { nib = nib >> 4u; }
                        let q = (nib & 0x0f0f0f0fu) | (((qh[i] >> (2u * s)) & 0x03030303u) << 4u);
                        sum += dotu(q, p + 32u * s + 4u * i, 32.0);
                    }
                    let sc = f32(bitcast<i32>(byte@(so + 2u * s) << 24u) >> 24u);
                    t += sc * sum;
                }
                acc += hw@(o + 208u) * t;
            }
        }
    }
    return acc;
}

// A K-quant block's 6-bit scale and minimum number `j` (0..7) from the 12 bytes at `o`.
fn kscale_min_at@(o: u32, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(byte@(o + j) & 63u), f32(byte@(o + j + 4u) & 63u));
    }
    let sc = (byte@(o + j + 4u) & 0x0fu) | ((byte@(o + j - 4u) >> 6u) << 4u);
    let m = (byte@(o + j + 4u) >> 4u) | ((byte@(o + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}

// Helpers of matvec_fast.wgsl (one copy per kernel, whatever its weight bindings).

// The four bytes of `x` (low to high) as unsigned values.
fn ubytes(x: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(x) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu));
}

// The four bytes of `x` (low to high) as signed values.
fn sbytes(x: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(x) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}

// 2^23 + each byte of `x` (low to high): exact floats made with integer operations alone
// (a float whose exponent field is 150 holds its 23 mantissa bits as an integer), cheaper than
// converting each byte; subtract M23 (with any offset of the levels folded in) to get the
// bytes.
fn mbytes(x: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(((vec4<u32>(x) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu))
                              | vec4<u32>(0x4b000000u));
}
const M23: f32 = 8388608.0;

// The low four bits of `b`, bit e moved to bit 8e (one bit per byte).
fn spread4(b: u32) -> u32 {
    return (b & 1u) | ((b & 2u) << 7u) | ((b & 4u) << 14u) | ((b & 8u) << 21u);
}

// Where unit w of a quantized block (matvec_fast.wgsl's `udot`) finds its two runs of four
// activations: `vec4` indices from the block's first value.
fn ucols(w: u32) -> vec2<u32> {
    switch KIND {
        case 2u: { return vec2<u32>(2u * w, 2u * w + 1u); }
        case 7u, 8u: {
            let c = 16u * (w / 2u) + 4u * (w % 2u);
            return vec2<u32>(c, c + 8u);
        }
        case 9u: {
            let c = 32u * (w / 16u) + 8u * ((w / 8u) % 2u) + w % 8u;
            return vec2<u32>(c, c + 16u);
        }
        default: { return vec2<u32>(w, w + 4u); }
    }
}

// A wide Q4_K / Q5_K unit's activations (matvec_fast.wgsl's `kacts`): the four `vec4`s its low
// nibbles multiply, and the four its high nibbles do.
struct KActs { lo: mat4x4<f32>, hi: mat4x4<f32> }

// How lane l walks weight row j (k values, rb bytes) of a quantized format in `udot` units: unit
// w of blocks b, b + bstep, ... (< nb), the first at byte o with its activations from A4[x];
// each step moves ostep bytes and xstep vec4s on.
struct UnitWalk {
    w: u32, cols: vec2<u32>, bstep: u32, ostep: u32, xstep: u32, nb: u32, b: u32, o: u32, x: u32,
}

fn unit_walk(j: u32, l: u32, k: u32, rb: u32) -> UnitWalk {
    let w = l % UPB;
    let bstep = LPR / UPB;
    let b = l / UPB;
    return UnitWalk(w, ucols(w), bstep, bstep * BYTES, bstep * (BLOCK / 4u), k / BLOCK, b,
                    j * rb + b * BYTES, b * (BLOCK / 4u));
}

// How lane l walks weight row j in block pairs (matvec_fast.wgsl's `vdotp`, PAIRWALK): unit w
// of blocks b and b + 1, then b + pstep and b + pstep + 1, ... (< nb), the first at byte o with
// its activations from A4[x]; xb vec4s of activations per block.
struct PairWalk {
    w: u32, cols: vec2<u32>, pstep: u32, nb: u32, xb: u32, b: u32, o: u32, x: u32,
}

// Whether the even blocks of row j (rb bytes per row) have 4-aligned levels: a block pair
// starts where the row does (modulo 4), and the levels start 2 bytes into a block.
fn pair_even_aligned(j: u32, rb: u32) -> bool {
    return ((j * rb) & 2u) != 0u;
}

fn pair_walk(j: u32, l: u32, k: u32, rb: u32) -> PairWalk {
    let w = l % UPB;
    let b = 2u * (l / UPB);
    return PairWalk(w, ucols(w), 2u * (LPR / UPB), k / BLOCK, BLOCK / 4u, b, j * rb + b * BYTES,
                    b * (BLOCK / 4u));
}

// Σ of `s` over the LPR lanes of thread t's row (lanes t - t % LPR ..), valid in the row's
// lane 0. Every thread of the workgroup calls it (it may hold barriers); it uses `red` (≥ 256
// values), whose earlier contents every thread must be done with.
fn lanes_sum(t: u32, s: f32) -> f32 {
    if (SGR) {
        let r = sg_add(s);
        if (LPR == SG) { return r; }
        if (t % SGD == 0u) { red[t / SGD] = r; }
        workgroupBarrier();
        var a = 0.0;
        if (t % LPR == 0u) {
            for (var i = 0u; i < LPR / SGD; i++) { a += red[t / SGD + i]; }
        }
        return a;
    }
    red[t] = s;
    workgroupBarrier();
    for (var h = LPR / 2u; h > 0u; h >>= 1u) {
        if (t % LPR < h) { red[t] += red[t + h]; }
        workgroupBarrier();
    }
    return red[t];
}

// `lanes_sum` of the first MR values of `s` (one per row of `vdotm`).
fn lanes_summ(t: u32, s: vec4<f32>) -> vec4<f32> {
    var r = vec4<f32>(lanes_sum(t, s.x), 0.0, 0.0, 0.0);
    for (var i = 1u; i < MR; i++) {
        // The previous sum's readers of `red` must be done before it is written again.
        if (!SGR || LPR != SG) { workgroupBarrier(); }
        r[i] = lanes_sum(t, s[i]);
    }
    return r;
}

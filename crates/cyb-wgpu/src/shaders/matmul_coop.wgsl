// Prefill on cooperative matrices (tensor cores): y[i, j] = Σ_p a[i, p] · w[j, p] with the
// products of f16 values summed in f32. One workgroup of 256 threads (eight subgroups of 32)
// computes a 64 × 64 tile of Y (64 activation rows × 64 weight rows). Per step of 32 along k
// the threads stage 64 × 32 activations and 64 × 32 dequantized weights in workgroup memory as
// f16 (each lane one value of a row of 32: a subgroup reads 128 contiguous bytes of activations
// and one block's worth of weights per load); subgroup s then multiplies the 16 activation
// rows 16 (s / 2) .. and the 32 weight rows 32 (s % 2) .. as two 16 × 16 × 16 products. Each
// thread loads its eight activations and eight weights of the next step into registers before
// the products of this one, so that their loads are in flight while the tensor cores work.
// Activations and weights are rounded to f16 (clamped to its range); sums stay f32.
// Params as matmul.wgsl's `main`: 0 m, 1 n, 2 k, 4 bytes per weight row, 5 tiles.

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<WT>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

const CT: u32 = 64u;
const CK: u32 = 32u;
// Row stride of the staged tiles in f16 values: 80 bytes, a multiple of 16 (the loads of a
// fragment's rows stay aligned) that spreads eight rows over the banks.
const CS: u32 = 40u;
var<workgroup> As: array<f16, 2560>;
var<workgroup> Ws: array<f16, 2560>;
// Each subgroup's 16 × 16 result on its way to Y (masked at the edges of the product).
var<workgroup> Cs: array<f32, 2048>;

fn h(x: f32) -> f16 { return f16(clamp(x, -65504.0, 65504.0)); }

// Activation (i, c), 0 outside the product.
fn xa(i: u32, c: u32, m: u32, k: u32) -> f32 {
    if (i < m && c < k) { return X[i * k + c]; }
    return 0.0;
}

// Weight (j, c) dequantized, 0 outside the product.
fn wa(j: u32, c: u32, n: u32, k: u32, row_bytes: u32) -> f32 {
    if (j < n && c < k) { return deq(j * row_bytes + (c / BLOCK) * BYTES, c % BLOCK); }
    return 0.0;
}

// Rows i, i + 8, .., i + 24 (x) and i + 32, .., i + 56 (y) of activations at column c.
struct Eight { x: vec4<f32>, y: vec4<f32> }

fn xa8(i: u32, c: u32, m: u32, k: u32) -> Eight {
    return Eight(vec4<f32>(xa(i, c, m, k), xa(i + 8u, c, m, k), xa(i + 16u, c, m, k),
                           xa(i + 24u, c, m, k)),
                 vec4<f32>(xa(i + 32u, c, m, k), xa(i + 40u, c, m, k), xa(i + 48u, c, m, k),
                           xa(i + 56u, c, m, k)));
}

fn wa8(j: u32, c: u32, n: u32, k: u32, rb: u32) -> Eight {
    return Eight(vec4<f32>(wa(j, c, n, k, rb), wa(j + 8u, c, n, k, rb), wa(j + 16u, c, n, k, rb),
                           wa(j + 24u, c, n, k, rb)),
                 vec4<f32>(wa(j + 32u, c, n, k, rb), wa(j + 40u, c, n, k, rb),
                           wa(j + 48u, c, n, k, rb), wa(j + 56u, c, n, k, rb)));
}

// Rows r, r + 8, .. of a staged tile at column `lane` as f16.
fn stage_a(r: u32, lane: u32, v: Eight) {
    for (var q = 0u; q < 4u; q++) {
        As[(r + 8u * q) * CS + lane] = h(v.x[q]);
        As[(r + 32u + 8u * q) * CS + lane] = h(v.y[q]);
    }
}

fn stage_w(r: u32, lane: u32, v: Eight) {
    for (var q = 0u; q < 4u; q++) {
        Ws[(r + 8u * q) * CS + lane] = h(v.x[q]);
        Ws[(r + 32u + 8u * q) * CS + lane] = h(v.y[q]);
    }
}

@compute @workgroup_size(256)
fn coop(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let m = pu(0u);
    let n = pu(1u);
    let k = pu(2u);
    let row_bytes = pu(4u);
    // Out-of-range workgroups (a folded grid's tail) compute a clamped tile and store nothing;
    // every thread stays for the barriers.
    let id = min(flat_wg(wg, nw), pu(5u) - 1u);
    let live = flat_wg(wg, nw) < pu(5u);
    let tiles_n = (n + CT - 1u) / CT;
    let i0 = (id / tiles_n) * CT;
    let j0 = (id % tiles_n) * CT;
    let s = t / 32u;
    let lane = t % 32u;
    let ri = (s / 2u) * 16u;
    let rj = (s % 2u) * 32u;
    var c0 = coop_mat16x16<f32, C>();
    var c1 = coop_mat16x16<f32, C>();
    var av = xa8(i0 + s, lane, m, k);
    var wv = wa8(j0 + s, lane, n, k, row_bytes);
    for (var k0 = 0u; k0 < k; k0 += CK) {
        stage_a(s, lane, av);
        stage_w(s, lane, wv);
        workgroupBarrier();
        // The next step's values (zeros past the row's end).
        av = xa8(i0 + s, k0 + CK + lane, m, k);
        wv = wa8(j0 + s, k0 + CK + lane, n, k, row_bytes);
        for (var kk = 0u; kk < CK; kk += 16u) {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&As[ri * CS + kk], CS);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&Ws[rj * CS + kk], CS);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&Ws[(rj + 16u) * CS + kk], CS);
            c0 = coopMultiplyAdd(a, b0, c0);
            c1 = coopMultiplyAdd(a, b1, c1);
        }
        workgroupBarrier();
    }
    coopStoreT(c0, &Cs[s * 256u], 16u);
    workgroupBarrier();
    coop_out(s, lane, i0 + ri, j0 + rj, m, n, live);
    workgroupBarrier();
    coopStoreT(c1, &Cs[s * 256u], 16u);
    workgroupBarrier();
    coop_out(s, lane, i0 + ri, j0 + rj + 16u, m, n, live);
}

// Subgroup s's staged 16 × 16 result into Y at (i, j), the rows and columns inside the product.
fn coop_out(s: u32, lane: u32, i: u32, j: u32, m: u32, n: u32, live: bool) {
    for (var e = lane; e < 256u; e += 32u) {
        let r = i + e / 16u;
        let c = j + e % 16u;
        if (live && r < m && c < n) { Y[r * n + c] = Cs[s * 256u + e]; }
    }
}

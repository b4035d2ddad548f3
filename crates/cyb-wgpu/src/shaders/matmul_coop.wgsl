// Prefill on cooperative matrices (tensor cores): y[i, j] = Σ_p a[i, p] · w[j, p] with the
// products of f16 values summed in f32. One workgroup of 256 threads (eight subgroups of 32)
// computes an MB × 64 tile of Y (MB = 32, 64 or 128 activation rows × 64 weight rows). Per step
// of 32 along k the threads stage MB × 32 activations and 64 × 32 dequantized weights in
// workgroup memory as f16 (each lane one value of a row of 32: a subgroup reads 128 contiguous
// bytes of activations and one block's worth of weights per load); the subgroups then split the
// tile into MB / 16 rows of 16 × (16 · TN) products, 16 × 16 × 16 each (TN = MB / 32 per
// subgroup).
// Activations and weights are rounded to f16 (clamped to its range); sums stay f32.
// Params as matmul.wgsl's `main`: 0 m, 1 n, 2 k, 4 bytes per weight row, 5 tiles.

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

const CT: u32 = 64u;
const CK: u32 = 32u;
// Subgroups per row of the tile's 16-row strips, and 16-column products per subgroup.
const SPR: u32 = 8u / (MB / 16u);
const TN: u32 = MB / 32u;
// Row stride of the staged tiles in f16 values: 80 bytes, a multiple of 16 (the loads of a
// fragment's rows stay aligned) that spreads eight rows over the banks.
const CS: u32 = 40u;
var<workgroup> As: array<f16, 5120>;
var<workgroup> Ws: array<f16, 2560>;
// With SPLIT, what rounding to f16 left of each value (an f32 is within ~2^-22 of the sum).
var<workgroup> Al: array<f16, 5120>;
var<workgroup> Wl: array<f16, 2560>;
// Each subgroup's 16 × 16 result on its way to Y (masked at the edges of the product).
var<workgroup> Cs: array<f32, 2048>;

fn h(x: f32) -> f16 { return f16(clamp(x, -65504.0, 65504.0)); }
fn lo(x: f32, hi: f16) -> f16 { return f16(clamp(x, -65504.0, 65504.0) - f32(hi)); }

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
    let i0 = (id / tiles_n) * MB;
    let j0 = (id % tiles_n) * CT;
    let s = t / 32u;
    let lane = t % 32u;
    let ri = (s / SPR) * 16u;
    let rj = (s % SPR) * 16u * TN;
    var c0 = coop_mat16x16<f32, C>();
    var c1 = coop_mat16x16<f32, C>();
    var c2 = coop_mat16x16<f32, C>();
    var c3 = coop_mat16x16<f32, C>();
    for (var k0 = 0u; k0 < k; k0 += CK) {
        let col = k0 + lane;
        for (var q = 0u; q < MB / 8u; q++) {
            let r = s + 8u * q;
            var av = 0.0;
            if (i0 + r < m && col < k) { av = X[(i0 + r) * k + col]; }
            let ah = h(av);
            As[r * CS + lane] = ah;
            if (SPLIT) { Al[r * CS + lane] = lo(av, ah); }
        }
        for (var q = 0u; q < 8u; q++) {
            let r = s + 8u * q;
            var wv = 0.0;
            if (j0 + r < n && col < k) {
                wv = deq((j0 + r) * row_bytes + (col / BLOCK) * BYTES, col % BLOCK);
            }
            let wh = h(wv);
            Ws[r * CS + lane] = wh;
            if (SPLIT) { Wl[r * CS + lane] = lo(wv, wh); }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < CK; kk += 16u) {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&As[ri * CS + kk], CS);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&Ws[rj * CS + kk], CS);
            c0 = coopMultiplyAdd(a, b0, c0);
            var b1 = b0;
            if (TN > 1u) {
                b1 = coopLoad<coop_mat16x16<f16, B>>(&Ws[(rj + 16u) * CS + kk], CS);
                c1 = coopMultiplyAdd(a, b1, c1);
            }
            var b2 = b0;
            var b3 = b0;
            if (TN > 2u) {
                b2 = coopLoad<coop_mat16x16<f16, B>>(&Ws[(rj + 32u) * CS + kk], CS);
                b3 = coopLoad<coop_mat16x16<f16, B>>(&Ws[(rj + 48u) * CS + kk], CS);
                c2 = coopMultiplyAdd(a, b2, c2);
                c3 = coopMultiplyAdd(a, b3, c3);
            }
            if (SPLIT) {
                // a_lo · w_hi + a_hi · w_lo: the products rounding to f16 dropped, but for
                // a_lo · w_lo (~2^-22 of a · w).
                let al = coopLoadT<coop_mat16x16<f16, A>>(&Al[ri * CS + kk], CS);
                let l0 = coopLoad<coop_mat16x16<f16, B>>(&Wl[rj * CS + kk], CS);
                c0 = coopMultiplyAdd(a, l0, coopMultiplyAdd(al, b0, c0));
                if (TN > 1u) {
                    let l1 = coopLoad<coop_mat16x16<f16, B>>(&Wl[(rj + 16u) * CS + kk], CS);
                    c1 = coopMultiplyAdd(a, l1, coopMultiplyAdd(al, b1, c1));
                }
                if (TN > 2u) {
                    let l2 = coopLoad<coop_mat16x16<f16, B>>(&Wl[(rj + 32u) * CS + kk], CS);
                    let l3 = coopLoad<coop_mat16x16<f16, B>>(&Wl[(rj + 48u) * CS + kk], CS);
                    c2 = coopMultiplyAdd(a, l2, coopMultiplyAdd(al, b2, c2));
                    c3 = coopMultiplyAdd(a, l3, coopMultiplyAdd(al, b3, c3));
                }
            }
        }
        workgroupBarrier();
    }
    coop_out(c0, s, lane, i0 + ri, j0 + rj, m, n, live);
    if (TN > 1u) { coop_out(c1, s, lane, i0 + ri, j0 + rj + 16u, m, n, live); }
    if (TN > 2u) {
        coop_out(c2, s, lane, i0 + ri, j0 + rj + 32u, m, n, live);
        coop_out(c3, s, lane, i0 + ri, j0 + rj + 48u, m, n, live);
    }
}

// Subgroup s's 16 × 16 result c into Y at (i, j), the rows and columns inside the product
// (through its part of workgroup memory; called by all threads alike, for the barriers).
fn coop_out(c: coop_mat16x16<f32, C>, s: u32, lane: u32, i: u32, j: u32, m: u32, n: u32,
            live: bool) {
    workgroupBarrier();
    coopStoreT(c, &Cs[s * 256u], 16u);
    workgroupBarrier();
    for (var e = lane; e < 256u; e += 32u) {
        let r = i + e / 16u;
        let col = j + e % 16u;
        if (live && r < m && col < n) { Y[r * n + col] = Cs[s * 256u + e]; }
    }
}

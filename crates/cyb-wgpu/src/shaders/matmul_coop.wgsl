// Prefill on cooperative matrices (tensor cores): y[i, j] = Σ_p a[i, p] · w[j, p] with the
// products of f16 values summed in f32. One workgroup of 256 threads (eight subgroups of 32)
// computes a 64 × 64 tile of Y (64 activation rows × 64 weight rows). Per step of 32 along k
// the threads stage 64 × 32 activations and 64 × 32 dequantized weights in workgroup memory as
// f16 (each lane one value of a row of 32: a subgroup reads 128 contiguous bytes of activations
// and one block's worth of weights per load); subgroup s then multiplies the 16 activation
// rows 16 (s / 2) .. and the 32 weight rows 32 (s % 2) .. as 16 × 16 × 16 products.
// Activations and weights are rounded to f16 (clamped to its range); sums stay f32.
// Params as matmul.wgsl's `main`: 0 m, 1 n, 2 k, 4 bytes per weight row, 5 tiles.

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
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
    for (var k0 = 0u; k0 < k; k0 += CK) {
        let col = k0 + lane;
        for (var q = 0u; q < 8u; q++) {
            let r = s + 8u * q;
            var av = 0.0;
            if (i0 + r < m && col < k) { av = X[(i0 + r) * k + col]; }
            As[r * CS + lane] = h(av);
            var wv = 0.0;
            if (j0 + r < n && col < k) {
                wv = deq((j0 + r) * row_bytes + (col / BLOCK) * BYTES, col % BLOCK);
            }
            Ws[r * CS + lane] = h(wv);
        }
        workgroupBarrier();
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

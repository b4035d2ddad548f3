// Scaled dot-product attention, one workgroup of 256 threads per (batch, head, query row).
// Scores go to the scratch buffer S [rows, lk]; excluded keys are marked -inf there.
// Params: 0 rows, 1 hq, 2 lq, 3 d, 4 hkv, 5 lk, 6 dv, 7 scale, 8 causal, 9 window (0: none),
// 10 softcap (0: none), 11 and 12 rows per kv head in K and V (lk, or the KV cache's capacity
// when attention reads the cache in place).
// Thread t scores keys t, t + 256, ... (with d a multiple of 4, four values per load). For the
// output, V is read VW values at a time (four when dv is a multiple of 4) and the threads
// split into 256 / CW groups of CW (the power of two ≥ dv / VW, at most 256): thread i of
// group g sums p_j · v[j, VW·i .. VW·i + VW] over the keys j ≡ g (mod 256 / CW), loads of the
// next keys issued before the sum needs them; the groups' partial sums are then added in
// workgroup memory. With VW = 4 a decode row's 64-value heads take a quarter of the steps.

// Q and K are read QW values at a time as `QK` (kernels.rs defines both and `qk_mul`: four
// values as vec4<f32> when d is a multiple of 4, else one f32), V as `VV` of VW values
// (kernels.rs also defines `store_o`, which writes one `VV` of the output). The body is
// sdpa_body.wgsl's `attend`.
@group(0) @binding(1) var<storage, read> Q: array<QK>;
@group(0) @binding(2) var<storage, read> K: array<QK>;
@group(0) @binding(3) var<storage, read> V: array<VV>;
@group(0) @binding(4) var<storage, read_write> O: array<f32>;
@group(0) @binding(5) var<storage, read_write> S: array<f32>;

@compute @workgroup_size(256)
fn sdpa(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    attend(flat_wg(wg, nw), t);
}

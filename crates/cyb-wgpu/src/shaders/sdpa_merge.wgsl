// Attention split over the keys, part two: one workgroup of 64 threads per query row merges
// the chunks sdpa_part.wgsl wrote to PART[row, chunk] = (m, l, weighted sum of dv values):
// with M the largest m, out = Σ sum · e^(m − M) / Σ l · e^(m − M), chunks in order. Chunks of
// no keys (l = 0) add nothing; a row with none gets zeros. Params: 0 rows, 1 dv, 2 chunks.

@group(0) @binding(1) var<storage, read> PART: array<f32>;
@group(0) @binding(2) var<storage, read_write> O: array<f32>;

@compute @workgroup_size(64)
fn sdpa_merge(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
              @builtin(local_invocation_index) t: u32) {
    let row = flat_wg(wg, nw);
    if (row >= pu(0u)) { return; }
    let dv = pu(1u);
    let chunks = pu(2u);
    let stride = dv + 2u;
    let base = row * chunks * stride;
    var mx = bitcast<f32>(0xff800000u);
    for (var c = 0u; c < chunks; c++) {
        if (PART[base + c * stride + 1u] > 0.0) { mx = max(mx, PART[base + c * stride]); }
    }
    var total = 0.0;
    for (var c = 0u; c < chunks; c++) {
        let l = PART[base + c * stride + 1u];
        if (l > 0.0) { total += l * exp(PART[base + c * stride] - mx); }
    }
    var inv = 0.0;
    if (total > 0.0) { inv = 1.0 / total; }
    for (var x = t; x < dv; x += 64u) {
        var o = 0.0;
        for (var c = 0u; c < chunks; c++) {
            let at = base + c * stride;
            let l = PART[at + 1u];
            if (l > 0.0) { o += PART[at + 2u + x] * exp(PART[at] - mx); }
        }
        O[row * dv + x] = o * inv;
    }
}

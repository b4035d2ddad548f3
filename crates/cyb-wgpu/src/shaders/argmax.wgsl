// Index of the largest value of each row of length d (the last axis), as I64 (two u32 words).
// The first index wins ties and a NaN counts as the largest value (Op::ArgMax); NaN is tested
// on the bits, since WGSL lets compilers assume floats are never NaN. One workgroup per row.
// Params: 0 rows, 1 d.

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> O: array<u32>;

var<workgroup> best_v: array<f32, 64>;
var<workgroup> best_i: array<u32, 64>;

const NONE: u32 = 0xffffffffu;

fn is_nan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }

// True when (v, i) beats the current best (bv, bi).
fn beats(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    if (i == NONE) { return false; }
    if (bi == NONE) { return true; }
    let vn = is_nan(v);
    let bn = is_nan(bv);
    if (vn != bn) { return vn; }
    if (vn || v == bv) { return i < bi; }
    return v > bv;
}

@compute @workgroup_size(64)
fn argmax(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
          @builtin(local_invocation_index) t: u32) {
    let row = flat_wg(wg, nw);
    let valid = row < pu(0u);
    let d = pu(1u);
    var bv = 0.0;
    var bi = NONE;
    if (valid) {
        for (var c = t; c < d; c += 64u) {
            let v = X[row * d + c];
            if (beats(v, c, bv, bi)) { bv = v; bi = c; }
        }
    }
    best_v[t] = bv;
    best_i[t] = bi;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k && beats(best_v[t + k], best_i[t + k], best_v[t], best_i[t])) {
            best_v[t] = best_v[t + k];
            best_i[t] = best_i[t + k];
        }
        workgroupBarrier();
    }
    if (t == 0u && valid) {
        O[2u * row] = best_i[0];
        O[2u * row + 1u] = 0u;
    }
}

// Pointwise ops on one input. Params: 0 n (output elements), 1 factor (scale), 2 half width (fused
// gated units: input rows are [gate | up], each `half` wide).

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> O: array<f32>;

fn index(wg: vec3<u32>, nw: vec3<u32>, t: u32) -> u32 { return flat_wg(wg, nw) * 64u + t; }

@compute @workgroup_size(64)
fn silu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = index(wg, nw, t);
    if (i < pu(0u)) { O[i] = silu_f(X[i]); }
}

@compute @workgroup_size(64)
fn gelu_erf_op(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = index(wg, nw, t);
    if (i < pu(0u)) { O[i] = gelu_erf(X[i]); }
}

@compute @workgroup_size(64)
fn gelu_tanh_op(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = index(wg, nw, t);
    if (i < pu(0u)) { O[i] = gelu_tanh(X[i]); }
}

@compute @workgroup_size(64)
fn relu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = index(wg, nw, t);
    if (i < pu(0u)) { O[i] = max(X[i], 0.0); }
}

@compute @workgroup_size(64)
fn tanh_op(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = index(wg, nw, t);
    if (i < pu(0u)) { O[i] = tanh_f(X[i]); }
}

@compute @workgroup_size(64)
fn scale(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = index(wg, nw, t);
    if (i < pu(0u)) { O[i] = pf(1u) * X[i]; }
}

@compute @workgroup_size(64)
fn swiglu_fused(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = index(wg, nw, t);
    let h = pu(2u);
    if (i < pu(0u)) {
        let base = (i / h) * 2u * h + (i % h);
        O[i] = silu_f(X[base]) * X[base + h];
    }
}

@compute @workgroup_size(64)
fn geglu_fused(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = index(wg, nw, t);
    let h = pu(2u);
    if (i < pu(0u)) {
        let base = (i / h) * 2u * h + (i % h);
        let g = X[base];
        O[i] = select(gelu_erf(g), gelu_tanh(g), pu(3u) == 1u) * X[base + h];
    }
}

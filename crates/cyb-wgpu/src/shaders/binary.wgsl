// Two-input pointwise ops with numpy broadcasting (rank ≤ 4, left-padded with 1s).
// Params: 0 n, 1..4 output dims, 5..8 strides of A, 9..12 strides of B (0 where broadcast),
// 13 GELU form for geglu (0 erf, 1 tanh).

@group(0) @binding(1) var<storage, read> A: array<f32>;
@group(0) @binding(2) var<storage, read> B: array<f32>;
@group(0) @binding(3) var<storage, read_write> O: array<f32>;

fn offsets(i: u32) -> vec2<u32> { return offsets_at(i, 0u); }

fn index(wg: vec3<u32>, nw: vec3<u32>, t: u32) -> u32 { return flat_wg(wg, nw) * 64u + t; }

@compute @workgroup_size(64)
fn add(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = index(wg, nw, t);
    if (i < pu(0u)) { let o = offsets(i); O[i] = A[o.x] + B[o.y]; }
}

@compute @workgroup_size(64)
fn sub(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = index(wg, nw, t);
    if (i < pu(0u)) { let o = offsets(i); O[i] = A[o.x] - B[o.y]; }
}

@compute @workgroup_size(64)
fn mul(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = index(wg, nw, t);
    if (i < pu(0u)) { let o = offsets(i); O[i] = A[o.x] * B[o.y]; }
}

@compute @workgroup_size(64)
fn div(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = index(wg, nw, t);
    if (i < pu(0u)) { let o = offsets(i); O[i] = A[o.x] / B[o.y]; }
}

@compute @workgroup_size(64)
fn swiglu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = index(wg, nw, t);
    if (i < pu(0u)) { O[i] = silu_f(A[i]) * B[i]; }
}

@compute @workgroup_size(64)
fn geglu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = index(wg, nw, t);
    if (i < pu(0u)) {
        let g = A[i];
        O[i] = select(gelu_erf(g), gelu_tanh(g), pu(13u) == 1u) * B[i];
    }
}

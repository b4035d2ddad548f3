// matmul.wgsl's decode `mv` that also adds the residual: Y = W · a as `mv` writes it,
// S = Y + R, the sum the next RMS norm reads, and SW = S · (WN + offset), that sum times the
// norm's weights (launch.rs merges that norm into the matvecs after it, matvec_norm.wgsl, whose
// dot products then read SW: one load per activation instead of two). Params as `mv`, then 6
// the norm's weight offset.

@group(0) @binding(3) var<storage, read> R: array<f32>;
@group(0) @binding(4) var<storage, read> WN: array<f32>;
@group(0) @binding(5) var<storage, read_write> YR: array<f32>;
@group(0) @binding(6) var<storage, read_write> S: array<f32>;
@group(0) @binding(7) var<storage, read_write> SW: array<f32>;

@compute @workgroup_size(256)
fn mv_res(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
          @builtin(local_invocation_index) t: u32) {
    let id = flat_wg(wg, nw);
    let y = mv_sum(id, t);
    let j = mv_row(id, t);
    if (t % LPR == 0u && id < pu(5u)) {
        for (var r = 0u; r < MR; r++) {
            if (j + r < pu(1u)) {
                let s = y[r] + R[j + r];
                YR[j + r] = y[r];
                S[j + r] = s;
                SW[j + r] = s * (WN[j + r] + pf(6u));
            }
        }
    }
}

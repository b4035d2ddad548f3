// Rotary embedding with a host-made cos/sin table T [seq, rot_dims/2, 2] (the reference's f64
// frequencies, rounded once). One thread per output element.
// Params: 0 n, 1 heads, 2 seq, 3 head_dim, 4 half (= rot_dims/2), 5 layout (0 normal, 1 neox).

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> T: array<f32>;
@group(0) @binding(3) var<storage, read_write> O: array<f32>;

@compute @workgroup_size(64)
fn rope(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let idx = flat_wg(wg, nw) * 64u + t;
    if (idx >= pu(0u)) { return; }
    let hd = pu(3u);
    let half = pu(4u);
    let row = idx / hd;
    let c = idx % hd;
    if (c >= 2u * half) { O[idx] = X[idx]; return; }
    let s = (row / pu(1u)) % pu(2u);
    var i: u32;
    var side: u32;
    var a: u32;
    var b: u32;
    if (pu(5u) == 0u) {
        i = c / 2u; side = c % 2u; a = 2u * i; b = a + 1u;
    } else {
        i = c % half; side = c / half; a = i; b = i + half;
    }
    let cs = T[(s * half + i) * 2u];
    let sn = T[(s * half + i) * 2u + 1u];
    let x0 = X[row * hd + a];
    let x1 = X[row * hd + b];
    O[idx] = select(x0 * cs - x1 * sn, x0 * sn + x1 * cs, side == 1u);
}

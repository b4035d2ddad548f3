// Reductions over a workgroup of 256 threads (attention, the norm merged into the matvecs);
// the including kernel declares `red: array<f32, N>` with N ≥ 256.

// The maximum and the sum of one value per thread over the workgroup's 256 threads, returned
// to every thread (`red` reused: every thread is done with it on return).
fn wg_max(t: u32, x: f32) -> f32 {
    if (SGR) {
        let r = sg_max(x);
        if (t % SGD == 0u) { red[t / SGD] = r; }
        workgroupBarrier();
        var m = red[0];
        for (var i = 1u; i < 256u / SGD; i++) { m = max(m, red[i]); }
        workgroupBarrier();
        return m;
    }
    red[t] = x;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if (t < k) { red[t] = max(red[t], red[t + k]); }
        workgroupBarrier();
    }
    let m = red[0];
    workgroupBarrier();
    return m;
}

fn wg_sum(t: u32, x: f32) -> f32 {
    if (SGR) {
        let r = sg_add(x);
        if (t % SGD == 0u) { red[t / SGD] = r; }
        workgroupBarrier();
        var a = 0.0;
        for (var i = 0u; i < 256u / SGD; i++) { a += red[i]; }
        workgroupBarrier();
        return a;
    }
    red[t] = x;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if (t < k) { red[t] += red[t + k]; }
        workgroupBarrier();
    }
    let a = red[0];
    workgroupBarrier();
    return a;
}

// Shared by every kernel: the parameter block and workgroup indexing.
// Binding 0 of every kernel is 32 u32 parameters (floats are bitcast).

struct Params { v: array<vec4<u32>, 8> }
@group(0) @binding(0) var<uniform> P: Params;

fn pu(i: u32) -> u32 { return P.v[i >> 2u][i & 3u]; }
fn pf(i: u32) -> f32 { return bitcast<f32>(pu(i)); }

// Grids wider than 65535 workgroups are folded into y; this undoes the fold.
fn flat_wg(wg: vec3<u32>, nw: vec3<u32>) -> u32 { return wg.x + wg.y * nw.x; }

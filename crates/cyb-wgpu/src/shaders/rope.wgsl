// Rotary embedding with a host-made cos/sin table T [seq, rot_dims/2, 2] (the reference's f64
// frequencies, rounded once). One thread per output element.
// Params: 0 n, 1 heads, 2 seq, 3 head_dim, 4 half (= rot_dims/2), 5 layout (0 normal, 1 neox);
// `rope_pair` (two inputs sharing the table, such as q and k) adds 6 n, 7 heads of the second
// and 8 the first one's workgroups.

// Where output element `idx` of a tensor with `heads` heads reads: the pair's two elements
// (a, b), its table row, which side of the pair it is, and whether it passes through.
struct RopeAt { a: u32, b: u32, tab: u32, side: u32, rotated: bool }

fn rope_at(idx: u32, heads: u32) -> RopeAt {
    let hd = pu(3u);
    let half = pu(4u);
    let row = idx / hd;
    let c = idx % hd;
    let s = (row / heads) % pu(2u);
    var i: u32;
    var side: u32;
    var a: u32;
    var b: u32;
    if (pu(5u) == 0u) {
        i = c / 2u; side = c % 2u; a = 2u * i; b = a + 1u;
    } else {
        i = c % half; side = c / half; a = i; b = i + half;
    }
    return RopeAt(row * hd + a, row * hd + b, (s * half + i) * 2u, side, c < 2u * half);
}

fn rotate(x0: f32, x1: f32, cs: f32, sn: f32, side: u32) -> f32 {
    return select(x0 * cs - x1 * sn, x0 * sn + x1 * cs, side == 1u);
}

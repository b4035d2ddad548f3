// Strided copy of 4-byte elements: permute, transpose, slice, concat and split are all this.
// Params (from word `p`): p+0 n, p+1..4 iteration dims (rank ≤ 4, left-padded with 1s), p+5..8
// source strides, p+9..12 destination strides, p+13 source base, p+14 destination base
// (elements). `copy` reads them from word 0; `copy_pair` (two copies in one launch) from words
// 0 and 15.

// (source, destination) element of iteration index `i`.
fn copy_offsets(i: u32, p: u32) -> vec2<u32> {
    var rem = i;
    var src = pu(p + 13u);
    var dst = pu(p + 14u);
    for (var d = 3i; d >= 0i; d--) {
        let u = u32(d);
        let dim = pu(p + 1u + u);
        let c = rem % dim;
        rem = rem / dim;
        src += c * pu(p + 5u + u);
        dst += c * pu(p + 9u + u);
    }
    return vec2<u32>(src, dst);
}

// Destination of element `i` of a copy from a contiguous source: iteration dims at words
// `dims..dims+3`, destination strides at `strides..strides+3`, plus `base`.
fn scatter_offset(i: u32, dims: u32, strides: u32, base: u32) -> u32 {
    var rem = i;
    var dst = base;
    for (var d = 3i; d >= 0i; d--) {
        let u = u32(d);
        let dim = pu(dims + u);
        dst += (rem % dim) * pu(strides + u);
        rem = rem / dim;
    }
    return dst;
}

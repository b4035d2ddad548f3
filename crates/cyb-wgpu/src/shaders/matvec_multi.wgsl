// Two or three matrix-vector products of one activation in one launch (q, k and v; gate and
// up): y_r[i, j] = Σ_p a[i, p] · w_r[j, p], the weights of one dtype, each workgroup one weight
// row of one product as in matmul.wgsl's `main`. With a gated unit (glu ≠ 0) a workgroup
// computes row j of both the gate (W0) and up (W1) products, writes both and also
// G = act(gate) · up, the unit's output.
// Params: 0 m, 1 k, 2 bytes per weight row, 3 row blocks (⌈m / MB⌉), 4 n0, 5 n1, 6 n2 (0: two
// products), 7 glu (0 none, 1 swiglu, 2 geglu erf, 3 geglu tanh), 8 workgroups in the grid.
// This file declares the bindings; the kernels are in matvec_multi_body.wgsl.

@group(0) @binding(1) var<storage, read> A: array<f32>;
// The same activations four at a time, for `mv` (matvec_fast.wgsl; k is a multiple of 4 there).
@group(0) @binding(1) var<storage, read> A4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> W0: array<WT>;
@group(0) @binding(3) var<storage, read> W1: array<WT>;
@group(0) @binding(4) var<storage, read> W2: array<WT>;
@group(0) @binding(5) var<storage, read_write> Y0: array<f32>;
@group(0) @binding(6) var<storage, read_write> Y1: array<f32>;
@group(0) @binding(7) var<storage, read_write> Y2: array<f32>;
@group(0) @binding(8) var<storage, read_write> G: array<f32>;

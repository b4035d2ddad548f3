//! One conformance case: an op, its inputs, what it is called in the tables, and its tolerance.

use cyb_ops::Op;
use cyb_tensor::{DType, Tensor};

/// An op applied to fixed inputs, compared with the reference at `tol`.
pub struct Case {
    pub op: Op,
    pub inputs: Vec<Tensor>,
    /// The dtype column of `docs/ops.md`: the weight dtype for matmuls and lookups, else the
    /// first input's.
    pub dtype: DType,
    /// The shape class: "odd", "one row", "long rows", "broadcast", "mask", ...
    pub shape: &'static str,
    /// Largest relative error `max|got - want| / max|want|` per output (0: exact).
    pub tol: f32,
}

impl Case {
    /// A case whose dtype column is the first input's and whose tolerance follows the spec:
    /// F32 1e-5, F16/BF16 1e-3, block formats 1e-2, integer and boolean outputs exact.
    pub fn new(op: Op, inputs: Vec<Tensor>, shape: &'static str) -> Case {
        let dtype = inputs.first().map_or(DType::F32, Tensor::dtype);
        let tol = inputs
            .iter()
            .map(|t| spec_tolerance(t.dtype()))
            .fold(1e-5, f32::max);
        Case {
            op,
            inputs,
            dtype,
            shape,
            tol,
        }
    }

    /// The same case listed under `dtype` (e.g. a matmul under its weight's dtype).
    pub fn listed_as(mut self, dtype: DType) -> Case {
        self.dtype = dtype;
        self
    }

    /// The same case with tolerance `tol`, for ops whose math goes through `exp`, `tanh`,
    /// `sin`/`cos` or `sqrt`: a GPU's versions differ from Rust's libm in the last bits, which
    /// sums and softmax normalization amplify to ~1e-5..1e-4 relative error.
    pub fn tol(mut self, tol: f32) -> Case {
        self.tol = tol;
        self
    }

    /// `op(dtype) [shape]`, for messages.
    pub fn label(&self) -> String {
        format!("{} {} [{}]", self.op.name(), self.dtype, self.shape)
    }
}

/// The spec's tolerance for values of `dtype` (spec/execution-contract, "Correctness").
pub fn spec_tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F16 | DType::BF16 => 1e-3,
        d if d.block_elems() > 1 => 1e-2,
        _ => 1e-5,
    }
}

/// Tolerance of ops built on transcendental functions (see [`Case::tol`]).
pub const TRANSCENDENTAL: f32 = 1e-4;

/// xorshift64*: reproducible inputs without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.uniform()).collect()
    }

    /// An F32 tensor of uniform values in [-scale, scale).
    pub fn f32(&mut self, dims: &[usize], scale: f32) -> Tensor {
        let v: Vec<f32> = self
            .vec(dims.iter().product())
            .iter()
            .map(|x| x * scale)
            .collect();
        Tensor::from_f32(dims, &v).expect("conformance inputs have valid shapes")
    }

    /// Uniform values in [-1, 1) stored as `dtype` (rounded, or quantized by the reference
    /// quantizer).
    pub fn values(&mut self, dims: &[usize], dtype: DType) -> Tensor {
        let v = self.vec(dims.iter().product());
        Tensor::from_f32_as(dims, &v, dtype).expect("conformance inputs have valid shapes")
    }

    /// Integers in `0..n` as I64 (or I32).
    pub fn ids(&mut self, dims: &[usize], n: usize, dtype: DType) -> Tensor {
        let v: Vec<i64> = (0..dims.iter().product::<usize>())
            .map(|_| (self.next_u64() % n as u64) as i64)
            .collect();
        Tensor::from_i64_as(dims, &v, dtype).expect("conformance inputs have valid shapes")
    }
}

//! Inputs shared by the cpu examples.

use cyb_tensor::{Result, Tensor};

/// A tensor of `dims` filled with reproducible values in [-0.5, 0.5] (a hash of the index and
/// `seed`).
pub fn filled(dims: &[usize], seed: u32) -> Result<Tensor> {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
        .collect();
    Tensor::from_f32(dims, &v)
}

//! ONNX RandomNormalLike / RandomUniformLike on the host. The values come from a fixed
//! generator (splitmix64, Box–Muller for the normal), seeded by the node's `seed` attribute or
//! 0: a run is reproducible, and equal to another runtime's only where the model scales the
//! noise by zero (e.g. Piper's VITS with `noise_scale = noise_w = 0`).

use crate::host_op::{cast_to, HostRun};
use cyb_tensor::{DType, Result, Tensor};

/// Which distribution [`crate::HostOp::RandomLike`] samples.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum RandomDist {
    /// `mean + scale · N(0, 1)`.
    Normal { mean: f32, scale: f32 },
    /// Uniform on `[low, high)`.
    Uniform { low: f32, high: f32 },
}

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform on `[0, 1)` with 53 random bits.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A tensor shaped like `x` (as `dtype`, else `x`'s dtype) of samples from `dist`.
pub(crate) fn random_like(
    r: &mut HostRun,
    x: &Tensor,
    dist: RandomDist,
    seed: Option<f32>,
    dtype: Option<DType>,
) -> Result<Vec<Tensor>> {
    let n: usize = x.dims().iter().product();
    let mut g = SplitMix(u64::from(seed.unwrap_or(0.0).to_bits()));
    let v: Vec<f32> = match dist {
        RandomDist::Uniform { low, high } => (0..n)
            .map(|_| (low as f64 + (high as f64 - low as f64) * g.unit()) as f32)
            .collect(),
        RandomDist::Normal { mean, scale } => (0..n)
            .map(|_| {
                // Box–Muller; 1 - u keeps the logarithm's argument in (0, 1].
                let (u, w) = (1.0 - g.unit(), g.unit());
                let z = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * w).cos();
                (mean as f64 + scale as f64 * z) as f32
            })
            .collect(),
    };
    let t = Tensor::from_f32(x.dims(), &v)?;
    Ok(vec![cast_to(r, t, dtype.unwrap_or(x.dtype()))?])
}

//! Elementwise arithmetic with numpy broadcasting, and `scale`.

use super::{broadcast_offset, broadcast_strides, f32_out, floats};
use crate::Op;
use cyb_tensor::{Result, Tensor, TensorInfo};
use rayon::prelude::*;

/// `add`, `sub`, `mul`, `div` of two broadcast float tensors.
pub(super) fn elementwise(op: &Op, inputs: &[Tensor], out: &TensorInfo) -> Result<Tensor> {
    let f: fn(f32, f32) -> f32 = match op {
        Op::Add => |a, b| a + b,
        Op::Sub => |a, b| a - b,
        Op::Mul => |a, b| a * b,
        _ => |a, b| a / b,
    };
    let (a, b) = (floats(&inputs[0])?, floats(&inputs[1])?);
    let dims = out.shape.dims();
    let sa = broadcast_strides(inputs[0].dims(), dims);
    let sb = broadcast_strides(inputs[1].dims(), dims);
    let row = out.shape.last().max(1);
    let mut y = vec![0f32; out.shape.numel()];
    y.par_chunks_mut(row).enumerate().for_each(|(r, ys)| {
        for (i, v) in ys.iter_mut().enumerate() {
            let flat = r * row + i;
            *v = f(
                a[broadcast_offset(flat, dims, &sa)],
                b[broadcast_offset(flat, dims, &sb)],
            );
        }
    });
    f32_out(out, &y)
}

/// `y = factor · x`.
pub(super) fn scale(factor: f32, x: &Tensor) -> Result<Tensor> {
    let y: Vec<f32> = floats(x)?.iter().map(|v| v * factor).collect();
    Tensor::from_f32(x.dims(), &y)
}

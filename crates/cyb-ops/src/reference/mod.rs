//! The CPU reference: one file per op family.
//!
//! Every op first goes through [`output_infos`](crate::output_infos), so the family code may
//! rely on shapes, dtypes and axes being valid. Inputs are read as f32 (F16/BF16 converted,
//! integers cast), math is done in f32 with reductions in index order, and rayon only splits
//! independent outputs, so results are bit-identical for any thread count.

mod activation;
mod attention;
mod binary;
mod conv;
mod elementwise;
mod embedding;
mod fused;
mod index;
mod layout;
mod matmul;
mod norm;
mod quant_linear;
mod real;
mod reduce;
mod reduce_nd;
mod rope;
mod scatter;
mod values;

pub use attention::alibi_slopes;
/// The scalar math of `Op::Unary` and `Op::Binary` on f32 values, for backends that run those
/// ops with the reference's exact results.
pub use real::{binary_f32, unary_f32};
pub use rope::frequencies as rope_frequencies;

use crate::{check_outputs_fit, output_infos, Op};
use cyb_tensor::{DType, Error, Result, Tensor, TensorInfo};
use std::borrow::Cow;

/// Runs `op` on host tensors and returns its outputs.
pub fn execute(op: &Op, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let infos: Vec<TensorInfo> = inputs.iter().map(Tensor::info).collect();
    let outs = output_infos(op, &infos)?;
    check_outputs_fit(op, &outs)?;
    let one = |t: Result<Tensor>| t.map(|t| vec![t]);
    match op {
        Op::MatMul { rhs_transposed } => one(matmul::matmul(*rhs_transposed, inputs, &outs[0])),
        Op::Linear {
            rhs_transposed,
            act,
        } => one(fused::linear(*rhs_transposed, *act, inputs)),
        Op::AddRmsNorm { .. } | Op::AddLayerNorm { .. } => fused::add_norm(op, inputs),
        Op::Add | Op::Sub | Op::Mul | Op::Div => one(binary::elementwise(op, inputs, &outs[0])),
        Op::Scale { factor } => one(binary::scale(*factor, &inputs[0])),
        Op::RmsNorm { eps, weight_offset } => one(norm::rms_norm(*eps, *weight_offset, inputs)),
        Op::LayerNorm { eps } => one(norm::layer_norm(*eps, inputs)),
        Op::GroupNorm { groups, eps } => one(norm::group_norm(*groups, *eps, inputs)),
        Op::Rope {
            layout,
            rot_dims,
            base,
            scaling,
        } => one(rope::rope(*layout, *rot_dims, *base, scaling, inputs)),
        Op::Sdpa {
            layout,
            scale,
            causal,
            sliding_window,
            softcap,
            alibi_max_bias,
        } => {
            let params = attention::SdpaParams {
                layout: *layout,
                scale: *scale,
                causal: *causal,
                sliding_window: *sliding_window,
                softcap: *softcap,
                alibi_max_bias: *alibi_max_bias,
            };
            one(attention::sdpa(&params, inputs, &outs[0]))
        }
        Op::Softmax { axis } => one(activation::softmax(*axis, &inputs[0])),
        Op::Silu | Op::Gelu { .. } | Op::Relu | Op::Tanh => one(activation::unary(op, &inputs[0])),
        Op::SwiGlu | Op::GeGlu { .. } => one(activation::glu(op, inputs)),
        Op::Embedding => one(embedding::embedding(&inputs[0], &inputs[1])),
        Op::Concat { axis } => one(layout::concat(*axis, inputs, &outs[0])),
        Op::Split { axis, .. } => layout::split(*axis, &inputs[0], &outs),
        Op::Reshape { .. } => one(layout::reshape(&inputs[0], &outs[0])),
        Op::Permute { perm } => one(layout::permute(perm, &inputs[0], &outs[0])),
        Op::Transpose { a, b } => {
            let rank = inputs[0].shape().rank();
            let mut perm: Vec<usize> = (0..rank).collect();
            let a = crate::shape_rule::resolve_axis("transpose", rank, *a)?;
            let b = crate::shape_rule::resolve_axis("transpose", rank, *b)?;
            perm.swap(a, b);
            one(layout::permute(&perm, &inputs[0], &outs[0]))
        }
        Op::Slice {
            axis, start, step, ..
        } => one(layout::slice(*axis, *start, *step, &inputs[0], &outs[0])),
        Op::ArgMax { axis } => one(reduce::argmax(*axis, &inputs[0])),
        Op::TopK { k, axis, largest } => reduce::top_k(*k, *axis, *largest, &inputs[0]),
        Op::CumSum {
            axis,
            exclusive,
            reverse,
        } => one(reduce::cumsum(*axis, *exclusive, *reverse, &inputs[0])),
        Op::Cast { to } => one(layout::cast(*to, &inputs[0])),
        Op::Unary { f } => one(elementwise::unary(*f, &inputs[0], &outs[0])),
        Op::Binary { f } => one(elementwise::binary(*f, &inputs[0], &inputs[1], &outs[0])),
        Op::Where => one(elementwise::where_(
            &inputs[0], &inputs[1], &inputs[2], &outs[0],
        )),
        Op::Reduce { f, axes, .. } => one(reduce_nd::reduce(*f, axes, &inputs[0], &outs[0])),
        Op::ArgReduce {
            axis,
            max,
            select_last,
            ..
        } => one(reduce_nd::arg_reduce(
            *axis,
            *max,
            *select_last,
            &inputs[0],
            &outs[0],
        )),
        Op::Gather { axis } => one(index::gather(*axis, &inputs[0], &inputs[1], &outs[0])),
        Op::GatherElements { axis } => one(index::gather_elements(
            *axis, &inputs[0], &inputs[1], &outs[0],
        )),
        Op::Expand { .. } => one(index::expand(&inputs[0], &outs[0])),
        Op::Tile { .. } => one(index::tile(&inputs[0], &outs[0])),
        Op::SliceNd {
            starts,
            ends,
            axes,
            steps,
        } => one(index::slice_nd(
            starts, ends, axes, steps, &inputs[0], &outs[0],
        )),
        Op::Pad { pads, mode } => one(index::pad(pads, *mode, &inputs[0], &outs[0])),
        Op::Trilu { upper, k } => one(index::trilu(*upper, *k, &inputs[0], &outs[0])),
        Op::Conv {
            strides,
            dilations,
            pads,
            group,
            act,
        } => {
            let y = conv::conv(strides, dilations, pads, *group, inputs, &outs[0])?;
            match act.op() {
                Some(act) => execute(&act, &[y]),
                None => Ok(vec![y]),
            }
        }
        Op::ConvTranspose {
            strides,
            dilations,
            pads,
            group,
            ..
        } => one(conv::conv_transpose(
            strides, dilations, pads, *group, inputs, &outs[0],
        )),
        Op::Pool {
            kind,
            kernel,
            strides,
            dilations,
            pads,
            ceil_mode,
        } => one(conv::pool(
            *kind, kernel, strides, dilations, pads, *ceil_mode, &inputs[0], &outs[0],
        )),
        Op::LogSoftmax { axis } => one(reduce_nd::log_softmax(*axis, &inputs[0])),
        Op::BatchNorm { eps } => one(reduce_nd::batch_norm(*eps, inputs)),
        Op::LayerNormNd { axis, eps } => reduce_nd::layer_norm_nd(*axis, *eps, inputs),
        Op::QuantizeLinear { axis } => one(quant_linear::quantize(*axis, inputs, &outs[0])),
        Op::DequantizeLinear { axis } => one(quant_linear::dequantize(*axis, inputs)),
        Op::MatMulInteger => one(quant_linear::matmul_integer(inputs, &outs[0])),
        Op::ScatterElements { axis, reduction } => {
            one(scatter::scatter_elements(*axis, *reduction, inputs))
        }
        Op::ScatterNd { reduction } => one(scatter::scatter_nd(*reduction, inputs)),
        Op::GatherNd { batch_dims } => one(scatter::gather_nd(*batch_dims, inputs, &outs[0])),
        Op::KvAppend { start } => one(layout::kv_append(*start, &inputs[0], &inputs[1])),
    }
}

/// The values of a tensor as f32: borrowed for aligned F32, converted otherwise.
pub fn floats(t: &Tensor) -> Result<Cow<'_, [f32]>> {
    if t.dtype() == DType::F32 {
        t.as_f32()
    } else {
        t.to_f32_vec().map(Cow::Owned)
    }
}

/// An F32 output tensor.
fn f32_out(info: &TensorInfo, data: &[f32]) -> Result<Tensor> {
    Tensor::from_f32(info.shape.dims(), data)
}

/// A tensor seen as `outer × len × inner` around one axis: lane `(o, n)` holds the `len`
/// elements `o·len·inner + i·inner + n`.
#[derive(Clone, Copy, Debug)]
struct Lanes {
    outer: usize,
    len: usize,
    inner: usize,
}

impl Lanes {
    /// Splits `dims` around `axis` (already resolved).
    fn new(dims: &[usize], axis: usize) -> Lanes {
        Lanes {
            outer: dims[..axis].iter().product(),
            len: dims[axis],
            inner: dims[axis + 1..].iter().product(),
        }
    }

    fn count(&self) -> usize {
        self.outer * self.inner
    }

    /// Flat index of element `i` of lane `lane`.
    fn index(&self, lane: usize, i: usize) -> usize {
        let (o, n) = (lane / self.inner.max(1), lane % self.inner.max(1));
        (o * self.len + i) * self.inner + n
    }
}

/// Resolves an axis of `t` (the shape rule has already accepted it).
fn axis_of(op: &str, t: &Tensor, axis: isize) -> Result<usize> {
    crate::shape_rule::resolve_axis(op, t.shape().rank(), axis)
}

/// Strides into a tensor of dims `src` when it is broadcast to `out` (0 on stretched dims).
fn broadcast_strides(src: &[usize], out: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; out.len()];
    let mut s = 1;
    let skip = out.len() - src.len();
    for i in (0..src.len()).rev() {
        if src[i] != 1 {
            strides[skip + i] = s;
        }
        s *= src[i];
    }
    strides
}

/// Flat offset of output element `flat` (row-major over `out`) under `strides`.
fn broadcast_offset(flat: usize, out: &[usize], strides: &[usize]) -> usize {
    let mut rem = flat;
    let mut off = 0;
    for (d, s) in out.iter().zip(strides).rev() {
        off += (rem % d) * s;
        rem /= d;
    }
    off
}

/// The error for a reference path that cannot run on these inputs.
fn unsupported(op: &str, dtype: DType) -> Error {
    Error::UnsupportedOp {
        op: op.into(),
        backend: "reference".into(),
        input_dtype: dtype,
    }
}

/// Decodes one row of `dtype` (a float type or whole blocks of a block format) into `out`.
/// Weights are read a row at a time so a quantized matrix is never expanded whole.
fn decode_row(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    use half::{bf16, f16};
    match dtype {
        DType::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        DType::F16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        DType::BF16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        d if d.is_quantized() => cyb_tensor::quant::dequantize(d, bytes, out)?,
        d => return Err(unsupported("decode_row", d)),
    }
    Ok(())
}

/// The host bytes of a tensor, or an error naming the op when it lives on a device.
fn host<'a>(op: &str, t: &'a Tensor) -> Result<&'a [u8]> {
    t.host_bytes().ok_or_else(|| {
        Error::invalid(
            op,
            format!("input is on {}, download it first", t.storage().location()),
        )
    })
}

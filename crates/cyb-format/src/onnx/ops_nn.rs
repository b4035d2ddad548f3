//! ONNX neural-network operators → graph nodes: matmul/gemm, conv, pooling, normalisation,
//! the softmax family, clip and pad.

use super::attrs::Attrs;
use super::builder::{Builder, Mapped};
use super::ops::unsupported;
use super::proto::NodeProto;
use cyb_graph::{
    ConvTransposeSpec, HostOp, LossReduction, NodeOp, ResizeSpec, SoftmaxKind, ValueId, WindowKind,
};
use cyb_graph::{
    CoordMode, GridMode, GridPadding, NearestMode, ResizeMode, RnnActivation, RnnCell, RnnSpec,
};
use cyb_ops::{LinearAct, Op, PadMode, PadSpec, PoolKind};
use cyb_tensor::Result;

fn to_usizes(name: &str, t: &str, v: Option<Vec<i64>>) -> Result<Vec<usize>> {
    v.unwrap_or_default()
        .into_iter()
        .map(|x| {
            usize::try_from(x).map_err(|_| unsupported(name, t, &format!("negative value {x}")))
        })
        .collect()
}

fn pad_spec(name: &str, t: &str, a: &Attrs) -> Result<PadSpec> {
    match a.s("auto_pad").as_deref().unwrap_or("NOTSET") {
        "NOTSET" | "" => Ok(PadSpec::Explicit(to_usizes(name, t, a.ints("pads"))?)),
        "VALID" => Ok(PadSpec::Explicit(Vec::new())),
        "SAME_UPPER" => Ok(PadSpec::SameUpper),
        "SAME_LOWER" => Ok(PadSpec::SameLower),
        p => Err(unsupported(name, t, &format!("auto_pad {p}"))),
    }
}

pub(crate) fn map(
    b: &mut Builder,
    n: &NodeProto,
    name: &str,
    a: &Attrs,
    mut ins: Vec<Option<ValueId>>,
) -> Result<Mapped> {
    let t = n.op_type.as_str();
    let opset = b.opset;
    let nout = n.output.iter().filter(|o| !o.is_empty()).count();
    let op = NodeOp::Op;
    let host = NodeOp::Host;
    match t {
        "MatMul" => Ok((host(HostOp::MatMul), ins)),
        "Gemm" => Ok((
            host(HostOp::Gemm {
                alpha: a.f("alpha", 1.0),
                beta: a.f("beta", 1.0),
                trans_a: a.i("transA", 0) != 0,
                trans_b: a.i("transB", 0) != 0,
            }),
            ins,
        )),
        "Softmax" | "LogSoftmax" | "Hardmax" => {
            let kind = match t {
                "Softmax" => SoftmaxKind::Softmax,
                "LogSoftmax" => SoftmaxKind::LogSoftmax,
                _ => SoftmaxKind::Hardmax,
            };
            let legacy = opset < 13;
            Ok((
                host(HostOp::Softmax {
                    axis: a.i("axis", if legacy { 1 } else { -1 }),
                    coerce_2d: legacy,
                    kind,
                }),
                ins,
            ))
        }
        "Clip" => {
            if opset < 11 {
                ins.truncate(1);
                for (attr, default) in [("min", f32::NEG_INFINITY), ("max", f32::INFINITY)] {
                    let v = a.f(attr, default);
                    ins.push(if a.has(attr) {
                        Some(b.scalar_f32(name, v)?)
                    } else {
                        None
                    });
                }
            }
            Ok((host(HostOp::Clip), ins))
        }
        "Pad" => {
            let mode = match a.s("mode").as_deref().unwrap_or("constant") {
                "constant" => PadMode::Constant { value: 0.0 },
                "reflect" => PadMode::Reflect,
                "edge" => PadMode::Edge,
                m => return Err(unsupported(name, t, &format!("mode {m}"))),
            };
            let (pads, value) = if opset < 11 {
                (Some(a.ints("pads").unwrap_or_default()), a.f("value", 0.0))
            } else {
                (None, 0.0)
            };
            Ok((host(HostOp::Pad { mode, pads, value }), ins))
        }
        "Conv" | "ConvInteger" | "QLinearConv" => {
            let conv = Op::Conv {
                strides: to_usizes(name, t, a.ints("strides"))?,
                dilations: to_usizes(name, t, a.ints("dilations"))?,
                pads: pad_spec(name, t, a)?,
                group: a.i("group", 1).max(0) as usize,
                act: LinearAct::None,
            };
            Ok(match t {
                "Conv" => (op(conv), ins),
                "ConvInteger" => (host(HostOp::ConvInteger { conv }), ins),
                _ => (host(HostOp::QLinearConv { conv }), ins),
            })
        }
        "QuantizeLinear" => Ok((
            op(Op::QuantizeLinear {
                axis: a.i("axis", 1) as isize,
            }),
            ins,
        )),
        "DequantizeLinear" => Ok((
            op(Op::DequantizeLinear {
                axis: a.i("axis", 1) as isize,
            }),
            ins,
        )),
        "DynamicQuantizeLinear" => Ok((host(HostOp::DynamicQuantizeLinear), ins)),
        "MatMulInteger" => Ok((op(Op::MatMulInteger), ins)),
        "QLinearMatMul" => Ok((host(HostOp::QLinearMatMul), ins)),
        "ConvTranspose" => {
            let auto = a.s("auto_pad").unwrap_or_default();
            if a.has("output_shape") || auto.starts_with("SAME") {
                let spec = ConvTransposeSpec {
                    strides: to_usizes(name, t, a.ints("strides"))?,
                    dilations: to_usizes(name, t, a.ints("dilations"))?,
                    output_padding: to_usizes(name, t, a.ints("output_padding"))?,
                    output_shape: a.ints("output_shape"),
                    same_lower: auto == "SAME_LOWER",
                    group: a.i("group", 1).max(0) as usize,
                };
                return Ok((host(HostOp::ConvTransposeSized(spec)), ins));
            }
            let k = a
                .ints("kernel_shape")
                .map(|v| v.len())
                .or_else(|| {
                    b.rank(ins.get(1).copied().flatten())
                        .map(|r| r.saturating_sub(2))
                })
                .ok_or_else(|| unsupported(name, t, "spatial rank unknown"))?;
            let or =
                |v: Vec<usize>, len: usize, d: usize| if v.is_empty() { vec![d; len] } else { v };
            Ok((
                op(Op::ConvTranspose {
                    strides: or(to_usizes(name, t, a.ints("strides"))?, k, 1),
                    dilations: or(to_usizes(name, t, a.ints("dilations"))?, k, 1),
                    pads: or(to_usizes(name, t, a.ints("pads"))?, 2 * k, 0),
                    output_padding: or(to_usizes(name, t, a.ints("output_padding"))?, k, 0),
                    group: a.i("group", 1).max(0) as usize,
                }),
                ins,
            ))
        }
        "MaxPool" | "AveragePool" | "LpPool" => {
            if nout > 1 && t != "MaxPool" {
                return Err(unsupported(name, t, "a second output"));
            }
            let kind = match t {
                "MaxPool" => PoolKind::Max,
                "AveragePool" => PoolKind::Avg {
                    count_include_pad: a.i("count_include_pad", 0) != 0,
                },
                _ => PoolKind::Lp {
                    p: a.i("p", 2) as f32,
                },
            };
            let kernel = to_usizes(name, t, a.ints("kernel_shape"))?;
            let pool = Op::Pool {
                kind,
                strides: to_usizes(name, t, a.ints("strides"))?,
                dilations: to_usizes(name, t, a.ints("dilations"))?,
                pads: pad_spec(name, t, a)?,
                ceil_mode: a.i("ceil_mode", 0) != 0,
                kernel,
            };
            if nout > 1 {
                let column_major = a.i("storage_order", 0) != 0;
                return Ok((host(HostOp::MaxPoolWithIndices { pool, column_major }), ins));
            }
            Ok((op(pool), ins))
        }
        "GlobalAveragePool" | "GlobalMaxPool" => Ok((
            host(HostOp::GlobalPool {
                max: t == "GlobalMaxPool",
            }),
            ins,
        )),
        "BatchNormalization" => {
            if a.i("training_mode", 0) != 0 {
                let momentum = a.f("momentum", 0.9);
                let h = HostOp::BatchNormTraining {
                    eps: a.f("epsilon", 1e-5),
                    momentum,
                };
                return Ok((host(h), ins));
            }
            if nout > 1 {
                return Err(unsupported(
                    name,
                    t,
                    "running statistics outputs without training_mode",
                ));
            }
            Ok((
                op(Op::BatchNorm {
                    eps: a.f("epsilon", 1e-5),
                }),
                ins,
            ))
        }
        "InstanceNormalization" => Ok((
            host(HostOp::InstanceNorm {
                eps: a.f("epsilon", 1e-5),
            }),
            ins,
        )),
        "LayerNormalization" => Ok((
            op(Op::LayerNormNd {
                axis: a.i("axis", -1) as isize,
                eps: a.f("epsilon", 1e-5),
            }),
            ins,
        )),
        "NegativeLogLikelihoodLoss" | "SoftmaxCrossEntropyLoss" => {
            let reduction = match a.s("reduction").as_deref().unwrap_or("mean") {
                "none" => LossReduction::None,
                "sum" => LossReduction::Sum,
                "mean" => LossReduction::Mean,
                r => return Err(unsupported(name, t, &format!("reduction {r}"))),
            };
            let ignore_index = a.has("ignore_index").then(|| a.i("ignore_index", 0));
            let h = if t == "NegativeLogLikelihoodLoss" {
                HostOp::NllLoss {
                    reduction,
                    ignore_index,
                }
            } else {
                HostOp::SoftmaxCrossEntropy {
                    reduction,
                    ignore_index,
                }
            };
            Ok((host(h), ins))
        }
        "Resize" | "Upsample" => resize(name, t, opset, a, ins),
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => {
            let kind = match t {
                "HannWindow" => WindowKind::Hann,
                "HammingWindow" => WindowKind::Hamming,
                _ => WindowKind::Blackman,
            };
            let dtype = super::tensor::dtype_of(a.i("output_datatype", 1) as i32, name)?;
            Ok((
                host(HostOp::Window {
                    kind,
                    periodic: a.i("periodic", 1) != 0,
                    dtype,
                }),
                ins,
            ))
        }
        "Compress" => Ok((
            host(HostOp::Compress {
                axis: a.has("axis").then(|| a.i("axis", 0)),
            }),
            ins,
        )),
        "EyeLike" => {
            let dtype = match a.has("dtype") {
                true => Some(
                    super::tensor::dtype_of(a.i("dtype", 1) as i32, name)?
                        .name()
                        .to_string(),
                ),
                false => None,
            };
            Ok((
                host(HostOp::EyeLike {
                    k: a.i("k", 0),
                    dtype,
                }),
                ins,
            ))
        }
        "RandomNormalLike" | "RandomUniformLike" => {
            let dtype = match a.has("dtype") {
                true => Some(
                    super::tensor::dtype_of(a.i("dtype", 1) as i32, name)?
                        .name()
                        .to_string(),
                ),
                false => None,
            };
            let dist = match t {
                "RandomNormalLike" => cyb_graph::RandomDist::Normal {
                    mean: a.f("mean", 0.0),
                    scale: a.f("scale", 1.0),
                },
                _ => cyb_graph::RandomDist::Uniform {
                    low: a.f("low", 0.0),
                    high: a.f("high", 1.0),
                },
            };
            let seed = a.has("seed").then(|| a.f("seed", 0.0));
            Ok((host(HostOp::RandomLike { dist, seed, dtype }), ins))
        }
        "LRN" => Ok((
            host(HostOp::Lrn {
                alpha: a.f("alpha", 1e-4),
                beta: a.f("beta", 0.75),
                bias: a.f("bias", 1.0),
                size: a.i("size", 1).max(0) as usize,
            }),
            ins,
        )),
        "MeanVarianceNormalization" => Ok((
            host(HostOp::MeanVarianceNormalization {
                axes: a.ints("axes").unwrap_or_else(|| vec![0, 2, 3]),
            }),
            ins,
        )),
        "ReverseSequence" => Ok((
            host(HostOp::ReverseSequence {
                batch_axis: a.i("batch_axis", 1),
                time_axis: a.i("time_axis", 0),
            }),
            ins,
        )),
        "Det" => Ok((host(HostOp::Det), ins)),
        "DFT" => Ok((
            host(HostOp::Dft {
                axis: a.i("axis", 1),
                inverse: a.i("inverse", 0) != 0,
                onesided: a.i("onesided", 0) != 0,
            }),
            ins,
        )),
        "STFT" => Ok((
            host(HostOp::Stft {
                onesided: a.i("onesided", 1) != 0,
            }),
            ins,
        )),
        "MaxUnpool" => Ok((
            host(HostOp::MaxUnpool {
                kernel: to_usizes(name, t, a.ints("kernel_shape"))?,
                strides: to_usizes(name, t, a.ints("strides"))?,
                pads: to_usizes(name, t, a.ints("pads"))?,
            }),
            ins,
        )),
        "GridSample" => {
            let mode = match a.s("mode").as_deref().unwrap_or("bilinear") {
                "bilinear" | "linear" => GridMode::Bilinear,
                "nearest" => GridMode::Nearest,
                "bicubic" | "cubic" => GridMode::Bicubic,
                m => return Err(unsupported(name, t, &format!("mode {m}"))),
            };
            let padding = match a.s("padding_mode").as_deref().unwrap_or("zeros") {
                "zeros" => GridPadding::Zeros,
                "border" => GridPadding::Border,
                "reflection" => GridPadding::Reflection,
                p => return Err(unsupported(name, t, &format!("padding_mode {p}"))),
            };
            let align_corners = a.i("align_corners", 0) != 0;
            Ok((
                host(HostOp::GridSample {
                    mode,
                    padding,
                    align_corners,
                }),
                ins,
            ))
        }
        "RNN" | "GRU" | "LSTM" => rnn(name, t, a, ins),
        "NonMaxSuppression" => Ok((
            host(HostOp::NonMaxSuppression {
                center_point_box: a.i("center_point_box", 0) != 0,
            }),
            ins,
        )),
        _ => Err(unsupported(name, t, "operator not supported")),
    }
}

fn resize(name: &str, t: &str, opset: i64, a: &Attrs, ins: Vec<Option<ValueId>>) -> Result<Mapped> {
    let mode = match a.s("mode").as_deref().unwrap_or("nearest") {
        "nearest" => ResizeMode::Nearest,
        "linear" | "bilinear" | "trilinear" => ResizeMode::Linear,
        "cubic" => ResizeMode::Cubic,
        m => return Err(unsupported(name, t, &format!("mode {m}"))),
    };
    if a.i("antialias", 0) != 0 {
        return Err(unsupported(name, t, "antialias"));
    }
    if a.s("keep_aspect_ratio_policy")
        .is_some_and(|p| p != "stretch")
    {
        return Err(unsupported(
            name,
            t,
            "keep_aspect_ratio_policy other than stretch",
        ));
    }
    // Upsample and opset-10 Resize: asymmetric coordinates, nearest rounds down.
    let legacy = t == "Upsample" || opset < 11;
    let coord = if legacy {
        CoordMode::Asymmetric
    } else {
        match a
            .s("coordinate_transformation_mode")
            .as_deref()
            .unwrap_or("half_pixel")
        {
            "half_pixel" => CoordMode::HalfPixel,
            "pytorch_half_pixel" => CoordMode::PytorchHalfPixel,
            "align_corners" => CoordMode::AlignCorners,
            "asymmetric" => CoordMode::Asymmetric,
            "tf_crop_and_resize" => CoordMode::TfCropAndResize,
            "tf_half_pixel_for_nn" => CoordMode::TfHalfPixelForNn,
            m => {
                return Err(unsupported(
                    name,
                    t,
                    &format!("coordinate_transformation_mode {m}"),
                ))
            }
        }
    };
    let nearest = if legacy {
        NearestMode::Floor
    } else {
        match a
            .s("nearest_mode")
            .as_deref()
            .unwrap_or("round_prefer_floor")
        {
            "round_prefer_floor" => NearestMode::RoundPreferFloor,
            "round_prefer_ceil" => NearestMode::RoundPreferCeil,
            "floor" => NearestMode::Floor,
            "ceil" => NearestMode::Ceil,
            m => return Err(unsupported(name, t, &format!("nearest_mode {m}"))),
        }
    };
    let (roi_at, scales_at, sizes_at) = if legacy {
        (None, (t == "Resize" || opset >= 9).then_some(1), None)
    } else {
        (Some(1), Some(2), Some(3))
    };
    let spec = ResizeSpec {
        mode,
        coord,
        nearest,
        cubic_a: a.f("cubic_coeff_a", -0.75),
        exclude_outside: a.i("exclude_outside", 0) != 0,
        extrapolation_value: a.f("extrapolation_value", 0.0),
        axes: a.ints("axes"),
        scales: a.floats("scales"),
        roi_at,
        scales_at,
        sizes_at,
    };
    Ok((NodeOp::Host(HostOp::Resize(spec)), ins))
}

fn rnn(name: &str, t: &str, a: &Attrs, ins: Vec<Option<ValueId>>) -> Result<Mapped> {
    let cell = match t {
        "RNN" => RnnCell::Rnn,
        "GRU" => RnnCell::Gru {
            linear_before_reset: a.i("linear_before_reset", 0) != 0,
        },
        _ => RnnCell::Lstm {
            input_forget: a.i("input_forget", 0) != 0,
        },
    };
    let direction = match a.s("direction").as_deref().unwrap_or("forward") {
        "forward" => 1,
        "reverse" => -1,
        "bidirectional" => 0,
        d => return Err(unsupported(name, t, &format!("direction {d}"))),
    };
    let nd = if direction == 0 { 2 } else { 1 };
    let defaults: &[&str] = match t {
        "RNN" => &["Tanh"],
        "GRU" => &["Sigmoid", "Tanh"],
        _ => &["Sigmoid", "Tanh", "Tanh"],
    };
    let names: Vec<String> = match a.strings("activations") {
        Some(v) if !v.is_empty() => v,
        _ => (0..nd)
            .flat_map(|_| defaults.iter().map(|s| s.to_string()))
            .collect(),
    };
    let (alphas, betas) = (
        a.floats("activation_alpha").unwrap_or_default(),
        a.floats("activation_beta").unwrap_or_default(),
    );
    let activations = names
        .into_iter()
        .enumerate()
        .map(|(i, n)| RnnActivation {
            name: n,
            alpha: alphas.get(i).copied(),
            beta: betas.get(i).copied(),
        })
        .collect();
    let spec = RnnSpec {
        cell,
        hidden: a.i("hidden_size", 0).max(0) as usize,
        direction,
        activations,
        clip: a.has("clip").then(|| a.f("clip", 0.0)),
        batch_first: a.i("layout", 0) != 0,
    };
    Ok((NodeOp::Host(HostOp::Rnn(spec)), ins))
}

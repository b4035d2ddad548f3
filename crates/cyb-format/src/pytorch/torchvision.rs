//! torchvision's classifiers as graph templates filled from a state dict: ResNet (18, 34, 50,
//! 101, 152), MobileNetV2, MobileNetV3 (small, large) and EfficientNet (B0 to B7). The architecture's layout comes
//! from its name and the checkpoint's tensor names and shapes (blocks per stage, widths,
//! classes); batch norms are folded into the convolutions before them. The template is built
//! as an ONNX graph in memory and imported like an ONNX file, so it runs on the graph path with
//! the same fusions.

use crate::onnx::proto::{
    AttributeProto, Dimension, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, TypeProtoTensor, ValueInfoProto,
};
use cyb_graph::Graph;
use cyb_tensor::{Error, Result, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// The architectures built from a state dict.
pub const ARCHITECTURES: &[&str] = &[
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "mobilenet_v3_large",
    "efficientnet_b0",
    "efficientnet_b1",
    "efficientnet_b2",
    "efficientnet_b3",
    "efficientnet_b4",
    "efficientnet_b5",
    "efficientnet_b6",
    "efficientnet_b7",
];

/// torchvision's batch-norm epsilon (MobileNetV3's is its own).
const BN_EPS: f64 = 1e-5;
const BN_EPS_V3: f64 = 1e-3;

fn err(path: &Path, reason: impl Into<String>) -> Error {
    Error::Format {
        file: path.to_path_buf(),
        offset: 0,
        reason: reason.into(),
    }
}

/// The graph of `arch` with the weights of `state` for `[1, 3, height, width]` images; its
/// output is the logits `[1, classes]`.
pub fn graph(
    state: &[(String, Tensor)],
    arch: &str,
    height: usize,
    width: usize,
    path: &Path,
) -> Result<Graph> {
    let mut b = Builder {
        sd: state.iter().map(|(k, v)| (k.as_str(), v)).collect(),
        nodes: Vec::new(),
        inits: Vec::new(),
        next: 0,
        path,
    };
    let x = "pixel_values".to_string();
    let logits = match arch {
        "resnet18" | "resnet34" | "resnet50" | "resnet101" | "resnet152" => {
            resnet(&mut b, &x, arch)?
        }
        "mobilenet_v2" => mobilenet_v2(&mut b, &x)?,
        "mobilenet_v3_small" | "mobilenet_v3_large" => {
            mobilenet_v3(&mut b, &x, arch == "mobilenet_v3_large")?
        }
        a if a.starts_with("efficientnet_b") && ARCHITECTURES.contains(&a) => {
            efficientnet(&mut b, &x)?
        }
        other => {
            return Err(err(
                path,
                format!(
                    "architecture {other} is not built (known: {})",
                    ARCHITECTURES.join(", ")
                ),
            ))
        }
    };
    let dims = |d: &[usize]| TypeProto {
        tensor_type: Some(TypeProtoTensor {
            elem_type: 1,
            shape: Some(TensorShapeProto {
                dim: d
                    .iter()
                    .map(|&v| Dimension {
                        dim_value: Some(v as i64),
                        dim_param: None,
                    })
                    .collect(),
            }),
        }),
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 14,
        }],
        graph: Some(GraphProto {
            node: b.nodes,
            name: arch.to_string(),
            initializer: b.inits,
            input: vec![ValueInfoProto {
                name: x,
                r#type: Some(dims(&[1, 3, height, width])),
            }],
            output: vec![ValueInfoProto {
                name: logits,
                r#type: None,
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    crate::onnx::graph_from_model(&model, path)
}

struct Builder<'a> {
    sd: HashMap<&'a str, &'a Tensor>,
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    next: usize,
    path: &'a Path,
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 7,
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 2,
        i: v,
        ..Default::default()
    }
}

impl Builder<'_> {
    fn get(&self, name: &str) -> Result<Vec<f32>> {
        let t = self
            .sd
            .get(name)
            .ok_or_else(|| err(self.path, format!("the checkpoint has no tensor {name}")))?;
        t.to_f32_vec()
    }

    fn dims(&self, name: &str) -> Result<Vec<usize>> {
        Ok(self
            .sd
            .get(name)
            .ok_or_else(|| err(self.path, format!("the checkpoint has no tensor {name}")))?
            .dims()
            .to_vec())
    }

    fn has(&self, name: &str) -> bool {
        self.sd.contains_key(name)
    }

    fn fresh(&mut self, what: &str) -> String {
        self.next += 1;
        format!("{what}_{}", self.next)
    }

    fn init(&mut self, name: &str, dims: &[usize], data: &[f32]) -> String {
        let raw: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.inits.push(TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: 1,
            name: name.into(),
            raw_data: raw.into(),
            ..Default::default()
        });
        name.to_string()
    }

    fn node(&mut self, op: &str, inputs: Vec<String>, attrs: Vec<AttributeProto>) -> String {
        let out = self.fresh(op);
        self.nodes.push(NodeProto {
            input: inputs,
            output: vec![out.clone()],
            name: out.clone(),
            op_type: op.into(),
            attribute: attrs,
            ..Default::default()
        });
        out
    }

    /// `conv` (weight `{conv}.weight`, no bias) then batch norm `{bn}`, folded into one
    /// convolution with a bias.
    fn conv_bn(
        &mut self,
        x: &str,
        conv: &str,
        bn: &str,
        stride: usize,
        group: usize,
    ) -> Result<String> {
        self.conv_bn_eps(x, conv, bn, stride, group, BN_EPS)
    }

    /// [`Builder::conv_bn`] with the batch norm's epsilon.
    fn conv_bn_eps(
        &mut self,
        x: &str,
        conv: &str,
        bn: &str,
        stride: usize,
        group: usize,
        eps: f64,
    ) -> Result<String> {
        let wname = format!("{conv}.weight");
        let d = self.dims(&wname)?;
        let [o, _, kh, kw] = d[..] else {
            return Err(err(
                self.path,
                format!("{wname} is {d:?}, not a 2-D convolution weight"),
            ));
        };
        let w = self.get(&wname)?;
        let (gamma, beta) = (
            self.get(&format!("{bn}.weight"))?,
            self.get(&format!("{bn}.bias"))?,
        );
        let (mean, var) = (
            self.get(&format!("{bn}.running_mean"))?,
            self.get(&format!("{bn}.running_var"))?,
        );
        if [gamma.len(), beta.len(), mean.len(), var.len()] != [o; 4] {
            return Err(err(
                self.path,
                format!("batch norm {bn} does not have {o} channels"),
            ));
        }
        let per = w.len() / o;
        let mut wf = vec![0f32; w.len()];
        let mut bf = vec![0f32; o];
        for c in 0..o {
            let s = f64::from(gamma[c]) / (f64::from(var[c]) + eps).sqrt();
            for i in 0..per {
                wf[c * per + i] = (f64::from(w[c * per + i]) * s) as f32;
            }
            bf[c] = (f64::from(beta[c]) - f64::from(mean[c]) * s) as f32;
        }
        let wi = self.init(&format!("{conv}.weight_folded"), &d, &wf);
        let bi = self.init(&format!("{conv}.bias_folded"), &[o], &bf);
        let (ph, pw) = ((kh - 1) / 2, (kw - 1) / 2);
        Ok(self.node(
            "Conv",
            vec![x.into(), wi, bi],
            vec![
                ints("kernel_shape", &[kh as i64, kw as i64]),
                ints("strides", &[stride as i64, stride as i64]),
                ints("pads", &[ph as i64, pw as i64, ph as i64, pw as i64]),
                int("group", group as i64),
            ],
        ))
    }

    /// A 1×1 convolution `{conv}` with its own bias (no batch norm).
    fn conv_bias(&mut self, x: &str, conv: &str) -> Result<String> {
        let d = self.dims(&format!("{conv}.weight"))?;
        let w = self.get(&format!("{conv}.weight"))?;
        let bias = self.get(&format!("{conv}.bias"))?;
        let wi = self.init(&format!("{conv}.weight"), &d, &w);
        let bi = self.init(&format!("{conv}.bias"), &[bias.len()], &bias);
        Ok(self.node(
            "Conv",
            vec![x.into(), wi, bi],
            vec![ints("kernel_shape", &[1, 1])],
        ))
    }

    fn silu(&mut self, x: &str) -> String {
        let s = self.node("Sigmoid", vec![x.into()], vec![]);
        self.node("Mul", vec![x.into(), s], vec![])
    }

    fn hardswish(&mut self, x: &str) -> String {
        self.node("HardSwish", vec![x.into()], vec![])
    }

    fn relu(&mut self, x: &str) -> String {
        self.node("Relu", vec![x.into()], vec![])
    }

    fn relu6(&mut self, x: &str) -> String {
        let lo = self.fresh("zero");
        let lo = self.init(&lo, &[], &[0.0]);
        let hi = self.fresh("six");
        let hi = self.init(&hi, &[], &[6.0]);
        self.node("Clip", vec![x.into(), lo, hi], vec![])
    }

    fn add(&mut self, a: &str, b: &str) -> String {
        self.node("Add", vec![a.into(), b.into()], vec![])
    }

    /// Global average pool, flatten, then the linear layer `{fc}`.
    fn head(&mut self, x: &str, fc: &str) -> Result<String> {
        let p = self.node("GlobalAveragePool", vec![x.into()], vec![]);
        let f = self.node("Flatten", vec![p], vec![int("axis", 1)]);
        self.linear(&f, fc)
    }

    fn linear(&mut self, f: &str, fc: &str) -> Result<String> {
        let f = f.to_string();
        let wd = self.dims(&format!("{fc}.weight"))?;
        let w = self.get(&format!("{fc}.weight"))?;
        let bias = self.get(&format!("{fc}.bias"))?;
        let wi = self.init(&format!("{fc}.weight"), &wd, &w);
        let bi = self.init(&format!("{fc}.bias"), &[bias.len()], &bias);
        Ok(self.node("Gemm", vec![f, wi, bi], vec![int("transB", 1)]))
    }
}

/// torchvision's ResNet: stem, four stages of basic (18, 34) or bottleneck (50+) blocks, each
/// stage's first block striding (except the first stage's) with a projection shortcut.
fn resnet(b: &mut Builder<'_>, x: &str, arch: &str) -> Result<String> {
    let bottleneck = b.has("layer1.0.conv3.weight");
    let want_bottleneck = !matches!(arch, "resnet18" | "resnet34");
    if bottleneck != want_bottleneck {
        return Err(err(
            b.path,
            format!(
                "the checkpoint has {} blocks; {arch} has {}",
                if bottleneck { "bottleneck" } else { "basic" },
                if want_bottleneck {
                    "bottleneck"
                } else {
                    "basic"
                }
            ),
        ));
    }
    let depth: Vec<usize> = (1..=4)
        .map(|s| {
            (0..)
                .take_while(|i| b.has(&format!("layer{s}.{i}.conv1.weight")))
                .count()
        })
        .collect();
    let expected: &[usize] = match arch {
        "resnet18" => &[2, 2, 2, 2],
        "resnet34" | "resnet50" => &[3, 4, 6, 3],
        "resnet101" => &[3, 4, 23, 3],
        _ => &[3, 8, 36, 3],
    };
    if depth != expected {
        return Err(err(
            b.path,
            format!("the checkpoint's stages have {depth:?} blocks; {arch} has {expected:?}"),
        ));
    }
    let mut h = b.conv_bn(x, "conv1", "bn1", 2, 1)?;
    h = b.relu(&h);
    h = b.node(
        "MaxPool",
        vec![h],
        vec![
            ints("kernel_shape", &[3, 3]),
            ints("strides", &[2, 2]),
            ints("pads", &[1, 1, 1, 1]),
        ],
    );
    for (s, &n) in depth.iter().enumerate() {
        for i in 0..n {
            let p = format!("layer{}.{i}", s + 1);
            let stride = if i == 0 && s > 0 { 2 } else { 1 };
            let shortcut = if b.has(&format!("{p}.downsample.0.weight")) {
                b.conv_bn(
                    &h,
                    &format!("{p}.downsample.0"),
                    &format!("{p}.downsample.1"),
                    stride,
                    1,
                )?
            } else {
                h.clone()
            };
            let mut y;
            if bottleneck {
                y = b.conv_bn(&h, &format!("{p}.conv1"), &format!("{p}.bn1"), 1, 1)?;
                y = b.relu(&y);
                y = b.conv_bn(&y, &format!("{p}.conv2"), &format!("{p}.bn2"), stride, 1)?;
                y = b.relu(&y);
                y = b.conv_bn(&y, &format!("{p}.conv3"), &format!("{p}.bn3"), 1, 1)?;
            } else {
                y = b.conv_bn(&h, &format!("{p}.conv1"), &format!("{p}.bn1"), stride, 1)?;
                y = b.relu(&y);
                y = b.conv_bn(&y, &format!("{p}.conv2"), &format!("{p}.bn2"), 1, 1)?;
            }
            let sum = b.add(&y, &shortcut);
            h = b.relu(&sum);
        }
    }
    b.head(&h, "fc")
}

/// torchvision's MobileNetV2: a strided 3×3 stem, 17 inverted residual blocks (expand 1×1,
/// depthwise 3×3, project 1×1; ReLU6 after the first two; a residual where the block keeps
/// size and width), a 1×1 convolution to the last width, then the classifier. Blocks start a
/// new stage where their width changes; stages 2, 3, 4 and 6 of torchvision's seven start
/// with stride 2.
fn mobilenet_v2(b: &mut Builder<'_>, x: &str) -> Result<String> {
    const STAGE_STRIDES: [usize; 7] = [1, 2, 2, 2, 1, 2, 1];
    let mut h = b.conv_bn(x, "features.0.0", "features.0.1", 2, 1)?;
    h = b.relu6(&h);
    let mut width = b.dims("features.0.0.weight")?[0];
    let mut stage = 0usize;
    let mut i = 1;
    while b.has(&format!("features.{i}.conv.0.0.weight")) {
        let p = format!("features.{i}.conv");
        let expands = b.has(&format!("{p}.3.weight"));
        let project = if expands {
            format!("{p}.2")
        } else {
            format!("{p}.1")
        };
        let project_bn = if expands {
            format!("{p}.3")
        } else {
            format!("{p}.2")
        };
        let out = b.dims(&format!("{project}.weight"))?[0];
        let first_of_stage = i == 1 || out != width;
        if i > 1 && first_of_stage {
            stage += 1;
        }
        let stride = if first_of_stage {
            *STAGE_STRIDES
                .get(stage)
                .ok_or_else(|| err(b.path, "more than seven MobileNetV2 stages"))?
        } else {
            1
        };
        let mut y = h.clone();
        let dw = if expands {
            y = b.conv_bn(&y, &format!("{p}.0.0"), &format!("{p}.0.1"), 1, 1)?;
            y = b.relu6(&y);
            format!("{p}.1")
        } else {
            format!("{p}.0")
        };
        let channels = b.dims(&format!("{dw}.0.weight"))?[0];
        y = b.conv_bn(&y, &format!("{dw}.0"), &format!("{dw}.1"), stride, channels)?;
        y = b.relu6(&y);
        y = b.conv_bn(&y, &project, &project_bn, 1, 1)?;
        h = if stride == 1 && out == width {
            b.add(&h, &y)
        } else {
            y
        };
        width = out;
        i += 1;
    }
    if i == 1 {
        return Err(err(
            b.path,
            "the checkpoint has no MobileNetV2 blocks (features.1.conv...)",
        ));
    }
    h = b.conv_bn(
        &h,
        &format!("features.{i}.0"),
        &format!("features.{i}.1"),
        1,
        1,
    )?;
    h = b.relu6(&h);
    b.head(&h, "classifier.1")
}

/// One row of torchvision's MobileNetV3 table: kernel, expanded width, output width,
/// squeeze-and-excitation, hard-swish (else ReLU), stride.
type V3Block = (usize, usize, usize, bool, bool, usize);

const V3_LARGE: [V3Block; 15] = [
    (3, 16, 16, false, false, 1),
    (3, 64, 24, false, false, 2),
    (3, 72, 24, false, false, 1),
    (5, 72, 40, true, false, 2),
    (5, 120, 40, true, false, 1),
    (5, 120, 40, true, false, 1),
    (3, 240, 80, false, true, 2),
    (3, 200, 80, false, true, 1),
    (3, 184, 80, false, true, 1),
    (3, 184, 80, false, true, 1),
    (3, 480, 112, true, true, 1),
    (3, 672, 112, true, true, 1),
    (5, 672, 160, true, true, 2),
    (5, 960, 160, true, true, 1),
    (5, 960, 160, true, true, 1),
];

const V3_SMALL: [V3Block; 11] = [
    (3, 16, 16, true, false, 2),
    (3, 72, 24, false, false, 2),
    (3, 88, 24, false, false, 1),
    (5, 96, 40, true, true, 2),
    (5, 240, 40, true, true, 1),
    (5, 240, 40, true, true, 1),
    (5, 120, 48, true, true, 1),
    (5, 144, 48, true, true, 1),
    (5, 288, 96, true, true, 2),
    (5, 576, 96, true, true, 1),
    (5, 576, 96, true, true, 1),
];

/// torchvision's MobileNetV3 (small or large): a strided 3×3 hard-swish stem, the table's
/// inverted residual blocks (expand 1×1 where the width grows, depthwise k×k, squeeze and
/// excitation — average pool, 1×1 with ReLU, 1×1 with hard sigmoid, scale — then project 1×1;
/// a residual where the block keeps size and width), a 1×1 to six times the last width, then
/// a linear layer with hard swish and the classifier. Batch norms use eps 0.001.
fn mobilenet_v3(b: &mut Builder<'_>, x: &str, large: bool) -> Result<String> {
    let table: &[V3Block] = if large { &V3_LARGE } else { &V3_SMALL };
    let act = |b: &mut Builder<'_>, y: &str, hs: bool| if hs { b.hardswish(y) } else { b.relu(y) };
    let mut h = b.conv_bn_eps(x, "features.0.0", "features.0.1", 2, 1, BN_EPS_V3)?;
    h = b.hardswish(&h);
    let mut width = b.dims("features.0.0.weight")?[0];
    for (i, &(k, exp, out, se, hs, stride)) in table.iter().enumerate() {
        let p = format!("features.{}.block", i + 1);
        let mut j = 0;
        let mut y = h.clone();
        if exp != width {
            y = b.conv_bn_eps(
                &y,
                &format!("{p}.0.0"),
                &format!("{p}.0.1"),
                1,
                1,
                BN_EPS_V3,
            )?;
            y = act(b, &y, hs);
            j += 1;
        }
        let dw = format!("{p}.{j}.0.weight");
        let d = b.dims(&dw)?;
        if d != [exp, 1, k, k] {
            return Err(err(
                b.path,
                format!("{dw} is {d:?}; this MobileNetV3 block has a {k}×{k} depthwise convolution of {exp} channels"),
            ));
        }
        y = b.conv_bn_eps(
            &y,
            &format!("{p}.{j}.0"),
            &format!("{p}.{j}.1"),
            stride,
            exp,
            BN_EPS_V3,
        )?;
        y = act(b, &y, hs);
        j += 1;
        if se {
            let pooled = b.node("GlobalAveragePool", vec![y.clone()], vec![]);
            let s1 = b.conv_bias(&pooled, &format!("{p}.{j}.fc1"))?;
            let s1 = b.relu(&s1);
            let s2 = b.conv_bias(&s1, &format!("{p}.{j}.fc2"))?;
            let gate = b.node(
                "HardSigmoid",
                vec![s2],
                vec![
                    AttributeProto {
                        name: "alpha".into(),
                        r#type: 1,
                        f: 1.0 / 6.0,
                        ..Default::default()
                    },
                    AttributeProto {
                        name: "beta".into(),
                        r#type: 1,
                        f: 0.5,
                        ..Default::default()
                    },
                ],
            );
            y = b.node("Mul", vec![y, gate], vec![]);
            j += 1;
        }
        y = b.conv_bn_eps(
            &y,
            &format!("{p}.{j}.0"),
            &format!("{p}.{j}.1"),
            1,
            1,
            BN_EPS_V3,
        )?;
        h = if stride == 1 && out == width {
            b.add(&h, &y)
        } else {
            y
        };
        width = out;
    }
    let last = table.len() + 1;
    h = b.conv_bn_eps(
        &h,
        &format!("features.{last}.0"),
        &format!("features.{last}.1"),
        1,
        1,
        BN_EPS_V3,
    )?;
    h = b.hardswish(&h);
    let p = b.node("GlobalAveragePool", vec![h], vec![]);
    let f = b.node("Flatten", vec![p], vec![int("axis", 1)]);
    let y = b.linear(&f, "classifier.0")?;
    let y = b.hardswish(&y);
    b.linear(&y, "classifier.3")
}

/// torchvision's EfficientNet (B0 to B7; widths and depths from the checkpoint): a strided 3×3
/// SiLU stem, seven stages of MBConv blocks (expand 1×1 where the block has one, depthwise k×k,
/// squeeze and excitation with SiLU and a sigmoid gate, project 1×1; a residual where the block
/// keeps size and width; stages 2, 3, 4 and 6 start with stride 2), a 1×1 SiLU head, then the
/// classifier.
fn efficientnet(b: &mut Builder<'_>, x: &str) -> Result<String> {
    const STAGE_STRIDES: [usize; 7] = [1, 2, 2, 2, 1, 2, 1];
    let mut h = b.conv_bn(x, "features.0.0", "features.0.1", 2, 1)?;
    h = b.silu(&h);
    let mut width = b.dims("features.0.0.weight")?[0];
    for (s, &first_stride) in STAGE_STRIDES.iter().enumerate() {
        let stage = s + 1;
        let blocks = (0..)
            .take_while(|i| b.has(&format!("features.{stage}.{i}.block.0.0.weight")))
            .count();
        if blocks == 0 {
            return Err(err(
                b.path,
                format!("the checkpoint has no EfficientNet stage features.{stage}"),
            ));
        }
        for i in 0..blocks {
            let p = format!("features.{stage}.{i}.block");
            let stride = if i == 0 { first_stride } else { 1 };
            let mut j = 0;
            let mut y = h.clone();
            // A depthwise weight is [c, 1, k, k]; an expansion is 1×1 over the block's input.
            if b.dims(&format!("{p}.0.0.weight"))?[1] != 1 {
                y = b.conv_bn(&y, &format!("{p}.0.0"), &format!("{p}.0.1"), 1, 1)?;
                y = b.silu(&y);
                j += 1;
            }
            let channels = b.dims(&format!("{p}.{j}.0.weight"))?[0];
            y = b.conv_bn(
                &y,
                &format!("{p}.{j}.0"),
                &format!("{p}.{j}.1"),
                stride,
                channels,
            )?;
            y = b.silu(&y);
            j += 1;
            let pooled = b.node("GlobalAveragePool", vec![y.clone()], vec![]);
            let s1 = b.conv_bias(&pooled, &format!("{p}.{j}.fc1"))?;
            let s1 = b.silu(&s1);
            let s2 = b.conv_bias(&s1, &format!("{p}.{j}.fc2"))?;
            let gate = b.node("Sigmoid", vec![s2], vec![]);
            y = b.node("Mul", vec![y, gate], vec![]);
            j += 1;
            y = b.conv_bn(&y, &format!("{p}.{j}.0"), &format!("{p}.{j}.1"), 1, 1)?;
            let out = b.dims(&format!("{p}.{j}.0.weight"))?[0];
            h = if stride == 1 && out == width {
                b.add(&h, &y)
            } else {
                y
            };
            width = out;
        }
    }
    h = b.conv_bn(&h, "features.8.0", "features.8.1", 1, 1)?;
    h = b.silu(&h);
    b.head(&h, "classifier.1")
}

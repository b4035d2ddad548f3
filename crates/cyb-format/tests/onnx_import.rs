//! ONNX import on hand-built models: initializers in place, external data checks, errors that
//! name the node, and truncated or corrupted files that must give errors, never panics.

use bytes::Bytes;
use cyb_backend::Dispatcher;
use cyb_format::onnx::proto::*;
mod prepared;
use cyb_format::onnx::graph_from_bytes;
use cyb_graph::Executor;
use cyb_tensor::{Error, Tensor};
use prepared::load_onnx;
use prost::Message;
use std::collections::HashMap;
use std::path::Path;

fn vi(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: elem,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            dim_value: Some(d),
                            dim_param: None,
                        })
                        .collect(),
                }),
            }),
            ..Default::default()
        }),
    }
}

fn node(op: &str, ins: &[&str], outs: &[&str]) -> NodeProto {
    NodeProto {
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        name: format!("{op}_node"),
        op_type: op.into(),
        ..Default::default()
    }
}

/// y = relu(x · w + b), w and b initializers.
fn model(w: TensorProto) -> ModelProto {
    let b = TensorProto {
        dims: vec![2],
        data_type: 1,
        name: "b".into(),
        float_data: vec![0.5, -10.0],
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(GraphProto {
            node: vec![
                node("MatMul", &["x", "w"], &["xw"]),
                node("Add", &["xw", "b"], &["s"]),
                node("Relu", &["s"], &["y"]),
            ],
            name: "g".into(),
            initializer: vec![w, b],
            input: vec![vi("x", 1, &[1, 3])],
            output: vec![vi("y", 1, &[1, 2])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn raw_w() -> TensorProto {
    let vals = [1f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    TensorProto {
        dims: vec![3, 2],
        data_type: 1,
        name: "w".into(),
        raw_data: Bytes::from(
            vals.iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        ),
        ..Default::default()
    }
}

fn run(path: &Path) -> Vec<f32> {
    let g = load_onnx(path).unwrap();
    let d = Dispatcher::reference();
    let ex = Executor::new(&g, &d).unwrap();
    let x = HashMap::from([(
        "x".to_string(),
        Tensor::from_f32(&[1, 3], &[1.0, 0.0, 1.0]).unwrap(),
    )]);
    ex.run(&x).unwrap().0[0].1.to_f32_vec().unwrap()
}

fn tmpdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("cyb-onnx-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn initializers_raw_and_external_give_the_same_answer() {
    let dir = tmpdir("ext");
    let p = dir.join("m.onnx");
    std::fs::write(&p, model(raw_w()).encode_to_vec()).unwrap();
    // [1, 0, 1] · [[1,2],[3,4],[5,6]] = [6, 8]; + [0.5, -10] = [6.5, -2]; relu → [6.5, 0].
    assert_eq!(run(&p), vec![6.5, 0.0]);

    let mut w = raw_w();
    let data = w.raw_data.clone();
    w.raw_data = Bytes::new();
    w.data_location = 1;
    let mut blob = vec![7u8; 16];
    blob.extend_from_slice(&data);
    std::fs::write(dir.join("w.bin"), &blob).unwrap();
    let entry = |k: &str, v: &str| StringStringEntryProto {
        key: k.into(),
        value: v.into(),
    };
    w.external_data = vec![
        entry("location", "w.bin"),
        entry("offset", "16"),
        entry("length", "24"),
    ];
    std::fs::write(&p, model(w.clone()).encode_to_vec()).unwrap();
    assert_eq!(run(&p), vec![6.5, 0.0]);

    for (loc, off, why) in [
        ("../w.bin", "16", "leaves"),
        ("w.bin", "30", "outside"),
        ("nope.bin", "0", "nope"),
    ] {
        let mut bad = w.clone();
        bad.external_data = vec![
            entry("location", loc),
            entry("offset", off),
            entry("length", "24"),
        ];
        std::fs::write(&p, model(bad).encode_to_vec()).unwrap();
        let e = load_onnx(&p).unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_tensors_and_ops_are_named() {
    let mut w = raw_w();
    w.raw_data = w.raw_data.slice(..20);
    let e = graph_from_bytes(&model(w).encode_to_vec(), Path::new("m.onnx")).unwrap_err();
    assert!(matches!(e, Error::Format { .. }), "{e}");
    assert!(e.to_string().contains("tensor w"), "{e}");

    let mut m = model(raw_w());
    if let Some(g) = m.graph.as_mut() {
        g.node[2].op_type = "FancyNewOp".into();
    }
    let e = graph_from_bytes(&m.encode_to_vec(), Path::new("m.onnx")).unwrap_err();
    assert!(matches!(e, Error::UnsupportedOp { .. }), "{e}");
    let s = e.to_string();
    assert!(s.contains("FancyNewOp") && s.contains("Relu_node"), "{s}");

    let mut m = model(raw_w());
    m.opset_import[0].version = 99;
    assert!(graph_from_bytes(&m.encode_to_vec(), Path::new("m.onnx")).is_err());
}

#[test]
fn truncated_and_corrupted_files_never_panic() {
    let bytes = model(raw_w()).encode_to_vec();
    for cut in 0..bytes.len() {
        let _ = graph_from_bytes(&bytes[..cut], Path::new("cut.onnx"));
    }
    // Deterministic byte flips (a fixed LCG), several per variant.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..1 + next() % 4 {
            let i = next() % b.len();
            b[i] = (next() & 0xff) as u8;
        }
        if let Ok(g) = graph_from_bytes(&b, Path::new("flip.onnx")) {
            // What parses must also run or fail cleanly.
            let d = Dispatcher::reference();
            if let Ok(ex) = Executor::new(&g, &d) {
                let x = HashMap::from([(
                    "x".to_string(),
                    Tensor::from_f32(&[1, 3], &[1.0, 0.0, -1.0]).unwrap(),
                )]);
                let _ = ex.run(&x);
            }
        }
    }
}

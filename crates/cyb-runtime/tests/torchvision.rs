//! torchvision classifiers built from PyTorch checkpoints against torchvision itself
//! (tests/fixtures/pytorch, tools/fixtures/make_pytorch_fixtures.py): MobileNetV2 with the real
//! ImageNet weights (tools/fetch_mobilenet_weights.sh; with `CI=true` missing it fails), and
//! ResNet-18, ResNet-50, MobileNetV3 small and large and EfficientNet-B0 with generated weights (the fixture's
//! hash, regenerated here from the state dict's names and shapes). Images go through torchvision's ImageNet transform.

use cyb_media::image::ImageProcessor;
use cyb_runtime::{GraphModel, Runtime, RuntimeOptions};
use cyb_tensor::Tensor;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

fn json(rel: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(rel)).unwrap()).unwrap()
}

fn runtime() -> Runtime {
    Runtime::new(RuntimeOptions {
        backend: Some("cpu".into()),
        ..Default::default()
    })
    .unwrap()
}

/// Runs `model` on each fixture image and compares the logits with torchvision's.
fn check(what: &str, model: &GraphModel, want: &Value) {
    let proc = ImageProcessor::torchvision_imagenet(256, 224);
    for name in ["wide", "tall"] {
        let img =
            cyb_runtime::vision::load_image(&fixture(&format!("images/src_{name}.png"))).unwrap();
        let pv = proc.process(&img).unwrap();
        let x = Tensor::from_f32(&[1, 3, pv.height, pv.width], &pv.data).unwrap();
        let input = model.graph().values[model.graph().inputs[0]].name.clone();
        let outs = model.run(&HashMap::from([(input, x)])).unwrap();
        let got = outs[0].1.to_f32_vec().unwrap();
        let exp: Vec<f32> = want[name]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(got.len(), exp.len(), "{what} {name}");
        let scale = exp.iter().fold(1f32, |m, v| m.max(v.abs()));
        let diff = got
            .iter()
            .zip(&exp)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            diff <= 1e-4 * scale,
            "{what} {name}: logits off by {diff} (scale {scale})"
        );
        let top = |v: &[f32]| {
            v.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .unwrap()
                .0
        };
        assert_eq!(top(&got), top(&exp), "{what} {name}: top class");
    }
}

#[test]
fn mobilenet_v2_checkpoint_matches_torchvision() {
    let cache = cyb_runtime::cache_dir();
    let pth = cache.join("torchvision/mobilenet_v2-b0353104.pth");
    if !pth.is_file() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{} is missing (run tools/fetch_mobilenet_weights.sh)",
            pth.display()
        );
        eprintln!("skipping: {} is missing", pth.display());
        return;
    }
    let rt = runtime();
    let model = rt.load_torchvision(&pth, "mobilenet_v2", 224, 224).unwrap();
    check(
        "mobilenet_v2",
        &model,
        &json("pytorch/mobilenet_v2.json")["logits"],
    );
    // The wrong architecture for the checkpoint is refused by name.
    let e = rt
        .load_torchvision(&pth, "resnet50", 224, 224)
        .unwrap_err()
        .to_string();
    assert!(e.contains("conv1") || e.contains("resnet50"), "{e}");
    let e = rt
        .load_torchvision(&pth, "vgg16", 224, 224)
        .unwrap_err()
        .to_string();
    assert!(e.contains("vgg16") && e.contains("mobilenet_v2"), "{e}");
}

/// The fixture's generated weight of element `i` of the `t`-th tensor, in [-1, 1).
fn uniform(t: u64, n: usize) -> Vec<f64> {
    (0..n as u64)
        .map(|i| {
            let mut x = (t << 32)
                .wrapping_add(i)
                .wrapping_add(0x9E37_79B9_7F4A_7C15);
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^= x >> 31;
            (x >> 40) as f64 / f64::from(1u32 << 23) - 1.0
        })
        .collect()
}

fn generated_state(spec: &Value) -> Vec<(String, Tensor)> {
    spec.as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(t, e)| {
            let name = e[0].as_str().unwrap().to_string();
            let dims: Vec<usize> = e[1]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as usize)
                .collect();
            let n: usize = dims.iter().product();
            if name.ends_with("num_batches_tracked") {
                return (name, Tensor::from_i64(&dims, &[0]).unwrap());
            }
            let u = uniform(t as u64, n);
            let fan_in: usize = dims.iter().skip(1).product();
            let v: Vec<f32> = u
                .iter()
                .map(|&u| {
                    let x = if name.ends_with("running_var") {
                        0.01 + 0.25 * (u + 1.0)
                    } else if name.ends_with("running_mean") || name.ends_with("bias") {
                        0.1 * u
                    } else if dims.len() == 1 {
                        1.0 + 0.1 * u
                    } else {
                        u / (fan_in as f64).sqrt()
                    };
                    x as f32
                })
                .collect();
            (name, Tensor::from_f32(&dims, &v).unwrap())
        })
        .collect()
}

#[test]
fn generated_weight_models_match_torchvision() {
    let rt = runtime();
    for arch in [
        "resnet18",
        "resnet50",
        "mobilenet_v3_small",
        "mobilenet_v3_large",
        "efficientnet_b0",
    ] {
        let r = json(&format!("pytorch/{arch}.json"));
        let state = generated_state(&r["state"]);
        let path = PathBuf::from(format!("{arch}.pth"));
        let mut g = cyb_format::pytorch::torchvision::graph(&state, arch, 224, 224, &path).unwrap();
        cyb_graph::prepare(&mut g).unwrap();
        let model = rt.graph_model(g, true).unwrap();
        check(arch, &model, &r["logits"]);
    }
    // A checkpoint of one depth asked for as another.
    let r = json("pytorch/resnet18.json");
    let state = generated_state(&r["state"]);
    let e = cyb_format::pytorch::torchvision::graph(
        &state,
        "resnet34",
        224,
        224,
        &PathBuf::from("r.pth"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("[2, 2, 2, 2]"), "{e}");
}

//! Bad input gives an error that names what is wrong, never a panic or wrong output.

use cyb_backend::Dispatcher;
use cyb_models::{LlamaConfig, LlamaModel};
use cyb_tensor::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/llama_family")
        .join(rel)
}

/// A scratch copy of a fixture HF directory with `config.json` edited by `edit`.
fn hf_copy(name: &str, edit: impl Fn(&mut serde_json::Value)) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cyb-models-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = fixture("llama3/hf");
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let text = std::fs::read_to_string(src.join("config.json")).unwrap();
    let mut cfg: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut cfg);
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    dir
}

fn load(path: &Path) -> cyb_tensor::Result<LlamaModel> {
    let file = cyb_format::open(path)?;
    LlamaModel::load(&file, Arc::new(Dispatcher::reference()))
}

#[test]
fn unknown_architecture_names_itself() {
    let dir = hf_copy("arch", |c| c["model_type"] = "mamba9000".into());
    let err = load(&dir).unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    assert!(err.to_string().contains("mamba9000"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn missing_tensor_is_named() {
    // More layers than the weights hold: refused by the config check, naming the count.
    let dir = hf_copy("layers", |c| c["num_hidden_layers"] = 3.into());
    match load(&dir).unwrap_err() {
        Error::InvalidConfig { field, reason } => {
            assert_eq!(field, "num_layers");
            assert!(reason.contains("0 to 1"), "{reason}");
        }
        e => panic!("expected InvalidConfig, got {e}"),
    }
    let _ = std::fs::remove_dir_all(dir);
    // A switch that needs tensors the file lacks (q/k norms on a Llama GGUF).
    let file = cyb_format::open(fixture("llama3/model-q8_0.gguf")).unwrap();
    let mut cfg = LlamaConfig::from_file(&file).unwrap();
    cfg.qk_norm = true;
    let err = LlamaModel::load_with_config(&file, cfg, Arc::new(Dispatcher::reference()));
    match err.unwrap_err() {
        Error::MissingTensor { name, .. } => assert_eq!(name, "blk.0.attn_q_norm.weight"),
        e => panic!("expected MissingTensor, got {e}"),
    }
}

#[test]
fn wrong_shape_names_the_tensor() {
    let dir = hf_copy("shape", |c| c["intermediate_size"] = 48.into());
    match load(&dir).unwrap_err() {
        Error::ShapeMismatch { op, expected, got } => {
            assert!(op.contains("model.layers.0.mlp.gate_proj.weight"), "{op}");
            assert_eq!((expected, got), (vec![48, 64], vec![32, 64]));
        }
        e => panic!("expected ShapeMismatch, got {e}"),
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn truncated_weights_are_an_error() {
    let scratch = std::env::temp_dir().join(format!("cyb-models-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    for src in ["llama3/model-q4_0.gguf", "llama3/model-f32.gguf"] {
        let bytes = std::fs::read(fixture(src)).unwrap();
        for keep in [bytes.len() - 1, bytes.len() * 3 / 4, bytes.len() / 3, 100] {
            let path = scratch.join("cut.gguf");
            std::fs::write(&path, &bytes[..keep]).unwrap();
            assert!(load(&path).is_err(), "{src} cut to {keep} bytes loaded");
        }
    }
    let dir = hf_copy("trunc", |_| {});
    let st = dir.join("model.safetensors");
    let bytes = std::fs::read(&st).unwrap();
    std::fs::write(&st, &bytes[..bytes.len() / 2]).unwrap();
    assert!(load(&dir).is_err());
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(scratch);
}

#[test]
fn prompt_longer_than_the_context_is_a_clear_error() {
    let model = load(&fixture("qwen2/model-q8_0.gguf")).unwrap();
    let mut cache = model.new_cache(8).unwrap();
    let prompt: Vec<u32> = (1..=12).collect();
    let err = model.forward(&prompt, &mut cache).unwrap_err();
    assert!(
        err.to_string().contains("do not fit in the context"),
        "{err}"
    );
    assert_eq!(cache.len(), 0);
    // The session stays usable: 8 tokens fit, a 9th does not.
    model.forward(&prompt[..8], &mut cache).unwrap();
    assert!(model.forward(&[1], &mut cache).is_err());
    assert!(model
        .forward(&[], &mut model.new_cache(4).unwrap())
        .is_err());
}

#[test]
fn bad_token_and_foreign_cache_are_errors() {
    let model = load(&fixture("qwen2/model-q8_0.gguf")).unwrap();
    let mut cache = model.new_cache(8).unwrap();
    let err = model.forward(&[3, 128], &mut cache).unwrap_err();
    assert!(err.to_string().contains("128"), "{err}");
    assert_eq!(cache.len(), 0);
    let other = load(&fixture("qwen3/hf")).unwrap();
    let mut foreign = other.new_cache(8).unwrap();
    assert!(model.forward(&[3], &mut foreign).is_err());
}

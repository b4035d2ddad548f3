//! Loading and runtime set-up errors: each names what is wrong (the file, the architecture, the
//! backend) and none panics.

use cyb_runtime::{ExecPath, Runtime, RuntimeOptions};
use cyb_tensor::Error;
use std::path::{Path, PathBuf};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny_chat")
        .join(rel)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cyb-runtime-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn runtime() -> Runtime {
    Runtime::new(RuntimeOptions::default()).unwrap()
}

#[test]
fn missing_file_names_the_path() {
    let path = scratch("no-such-model.gguf");
    let err = runtime().load(&path).err().expect("an error");
    assert!(err.to_string().contains(&*path.to_string_lossy()), "{err}");
}

#[test]
fn truncated_gguf_names_the_file_and_reason() {
    let bytes = std::fs::read(fixture("model-f32.gguf")).unwrap();
    // Inside the header, inside the metadata, and inside the tensor data.
    for (i, len) in [10, 200, bytes.len() / 2, bytes.len() - 1]
        .into_iter()
        .enumerate()
    {
        let path = scratch(&format!("truncated-{i}.gguf"));
        std::fs::write(&path, &bytes[..len]).unwrap();
        let err = runtime().load(&path).err().expect("an error");
        let msg = err.to_string();
        assert!(
            msg.contains(&*path.to_string_lossy()),
            "cut at {len}: {msg}"
        );
        match &err {
            Error::Format { file, reason, .. } => {
                assert_eq!(file, &path);
                assert!(!reason.is_empty());
            }
            e => panic!("cut at {len}: expected a Format error, got {e:?}"),
        }
    }
}

/// The GGUF with `general.architecture` and every `<arch>.` key renamed to `to` (same length,
/// so every offset stays valid).
fn with_architecture(to: &str) -> PathBuf {
    let mut bytes = std::fs::read(fixture("model-f32.gguf")).unwrap();
    assert_eq!(to.len(), "llama".len());
    let key = b"general.architecture";
    let at = bytes
        .windows(key.len())
        .position(|w| w == key)
        .expect("general.architecture key");
    // key, then u32 type 8 (string), u64 length 5, the bytes.
    let value = at + key.len() + 4 + 8;
    assert_eq!(
        &bytes[at + key.len()..value],
        &[8, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(&bytes[value..value + 5], b"llama");
    bytes[value..value + 5].copy_from_slice(to.as_bytes());
    let prefix = b"llama.";
    let mut i = 0;
    while i + prefix.len() <= bytes.len() {
        if &bytes[i..i + prefix.len()] == prefix {
            bytes[i..i + 5].copy_from_slice(to.as_bytes());
        }
        i += 1;
    }
    let path = scratch(&format!("arch-{to}.gguf"));
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn unknown_architecture_names_itself() {
    let path = with_architecture("mamba");
    let err = runtime().load(&path).err().expect("an error");
    assert!(err.to_string().contains("mamba"), "{err}");
    assert!(
        matches!(
            err,
            Error::InvalidConfig { .. } | Error::UnsupportedOp { .. }
        ),
        "{err:?}"
    );
    // The same edit back to "llama" loads: the error came from the name, not the edit.
    let path = with_architecture("llama");
    runtime().load(&path).unwrap();
}

#[test]
fn unavailable_backend_says_why() {
    let err = Runtime::new(RuntimeOptions {
        backend: Some("honeycrisp".into()),
        ..RuntimeOptions::default()
    })
    .err()
    .expect("an error");
    match &err {
        Error::BackendInit { backend, reason } => {
            assert_eq!(backend, "honeycrisp");
            assert!(reason.contains("macOS"), "{reason}");
        }
        e => panic!("expected BackendInit, got {e:?}"),
    }
    let err = Runtime::new(RuntimeOptions {
        backend: Some("tpu9000".into()),
        ..RuntimeOptions::default()
    })
    .err()
    .expect("an error");
    assert!(err.to_string().contains("tpu9000"), "{err}");
}

#[test]
fn graph_path_loads_generators_and_refuses_encoders_clearly() {
    let rt = Runtime::new(RuntimeOptions {
        path: ExecPath::parse("graph").unwrap(),
        ..RuntimeOptions::default()
    })
    .unwrap();
    // A LlamaStyle generator runs on the graph template.
    rt.load(fixture("hf")).unwrap();
    // An encoder has no graph template: the error says so and names the way out.
    let bert = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bert/bert");
    let err = rt.load(&bert).err().expect("an error");
    let msg = err.to_string();
    assert!(msg.contains("graph") && msg.contains("curated"), "{msg}");
    let err = ExecPath::parse("fast").unwrap_err();
    assert!(err.to_string().contains("fast"), "{err}");
    // The curated path loads the same model.
    Runtime::new(RuntimeOptions {
        path: ExecPath::Curated,
        ..RuntimeOptions::default()
    })
    .unwrap()
    .load(fixture("hf"))
    .unwrap();
}

#[test]
fn model_without_tokenizer_names_what_is_missing() {
    // The llama_family fixtures are weights only.
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/llama_family/llama3/hf");
    let err = runtime().load(&dir).err().expect("an error");
    assert!(err.to_string().contains("tokenizer"), "{err}");
}

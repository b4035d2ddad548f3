//! A real model: SmolLM2-135M-Instruct Q4_1 (tools/fetch_smollm2.sh). Every tensor's dtype and
//! shape, and the dequantized bytes of every Q4_1/Q8_0 tensor, must match what gguf-py's
//! GGUFReader and gguf.quants.dequantize give (tests/fixtures/smollm2/tensors.json, made by
//! tools/fixtures/make_smollm2_fixture.py).
//!
//! Without the file the test is skipped, except under CI (env `CI` set), where it fails.

use cyb_format::{open, MetaValue, ModelFile};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("CYB_SMOLLM2_GGUF") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("CYB_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/cyb-llm")))
        .unwrap_or_default();
    cache.join("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn smollm2_matches_gguf_py() {
    let path = model_path();
    if !path.is_file() {
        let msg = format!(
            "{} is missing: run tools/fetch_smollm2.sh (or set CYB_SMOLLM2_GGUF)",
            path.display()
        );
        assert!(std::env::var_os("CI").is_none(), "{msg}");
        eprintln!("skipping smollm2 test: {msg}");
        return;
    }
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/smollm2/tensors.json");
    let want: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let ModelFile::Gguf(g) = open(&path).unwrap() else {
        panic!("{} not read as GGUF", path.display())
    };

    // Scalar metadata equals what GGUFReader read.
    for (key, w) in want["metadata"].as_object().unwrap() {
        let v = g
            .get(key)
            .unwrap_or_else(|| panic!("metadata {key} missing"));
        match (v, w.get("array_len")) {
            (MetaValue::Array(a), Some(n)) => assert_eq!(Some(a.len() as u64), n.as_u64(), "{key}"),
            _ => assert_eq!(&v.to_json(), w, "{key}"),
        }
    }

    let want_tensors = want["tensors"].as_array().unwrap();
    assert_eq!(g.tensor_infos().len(), want_tensors.len());
    let mut hashed = 0;
    for (t, w) in g.tensor_infos().iter().zip(want_tensors) {
        let name = w["name"].as_str().unwrap();
        assert_eq!(t.name, name);
        assert_eq!(t.ggml_type.name, w["type"].as_str().unwrap(), "{name}");
        assert_eq!(t.dtype.map(|d| d.name()), Some(t.ggml_type.name), "{name}");
        let shape: Vec<usize> = serde_json::from_value(w["shape"].clone()).unwrap();
        assert_eq!(t.shape.dims(), &shape[..], "{name}");
        assert_eq!(Some(t.byte_len as u64), w["n_bytes"].as_u64(), "{name}");
        if let Some(sha) = w.get("sha256_f32").and_then(Value::as_str) {
            let values = g.tensor(name).unwrap().to_f32_vec().unwrap();
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            assert_eq!(
                hex(&Sha256::digest(&bytes)),
                sha,
                "{name}: dequantized values differ"
            );
            hashed += 1;
        }
    }
    assert_eq!(hashed, 211);

    let c = open(&path).unwrap().config().unwrap();
    assert_eq!(c.architecture, "llama");
    assert_eq!(
        (c.num_layers, c.hidden_size, c.intermediate_size),
        (30, 576, Some(1536))
    );
    assert_eq!((c.num_heads, c.num_kv_heads, c.head_dim), (9, 3, 64));
    assert_eq!((c.vocab_size, c.context_length), (49152, Some(8192)));
    assert_eq!(c.rope_theta, 100000.0);
    assert_eq!(
        (c.bos_token_id, c.eos_token_ids.clone()),
        (Some(1), vec![2])
    );
    assert!(c.tie_word_embeddings, "SmolLM2 has no output.weight");
}

//! Readers checked against what the reference Python packages read back from the same files
//! (tests/fixtures/format/, made by tools/fixtures/make_format_fixtures.py with gguf-py and
//! safetensors).

use cyb_format::{open, MetaValue, ModelFile};
use cyb_tensor::{DType, Error};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/format")
}

fn load_json(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn flatten(v: &MetaValue, out: &mut Vec<Value>) {
    match v {
        MetaValue::Array(a) => a.iter().for_each(|x| flatten(&x, out)),
        x => out.push(x.to_json()),
    }
}

/// gguf-py's type names for our value types.
fn gguf_py_type(v: &MetaValue) -> &'static str {
    match v.type_name() {
        "u8" => "UINT8",
        "i8" => "INT8",
        "u16" => "UINT16",
        "i16" => "INT16",
        "u32" => "UINT32",
        "i32" => "INT32",
        "u64" => "UINT64",
        "i64" => "INT64",
        "f32" => "FLOAT32",
        "f64" => "FLOAT64",
        "bool" => "BOOL",
        "string" => "STRING",
        _ => "ARRAY",
    }
}

#[test]
fn gguf_matches_gguf_py() {
    let want = load_json(&fixtures().join("tiny.gguf.json"));
    let ModelFile::Gguf(g) = open(fixtures().join("tiny.gguf")).unwrap() else {
        panic!("tiny.gguf not detected as GGUF");
    };
    assert_eq!(Some(g.alignment()), want["alignment"].as_u64());
    let want_meta = want["metadata"].as_array().unwrap();
    assert_eq!(g.metadata().len(), want_meta.len());
    for ((key, v), w) in g.metadata().iter().zip(want_meta) {
        assert_eq!(key, w["key"].as_str().unwrap());
        assert_eq!(gguf_py_type(v), w["types"][0].as_str().unwrap(), "{key}");
        if key == "test.array_nested" {
            // gguf-py's contents() flattens nested arrays; compare the leaves.
            let mut leaves = Vec::new();
            flatten(v, &mut leaves);
            assert_eq!(Value::Array(leaves), w["value"], "{key}");
            assert!(matches!(
                v.as_array().and_then(|a| a.get(0)),
                Some(MetaValue::Array(_))
            ));
        } else {
            assert_eq!(v.to_json(), w["value"], "{key}");
        }
    }
    let want_tensors = want["tensors"].as_array().unwrap();
    assert_eq!(g.tensor_infos().len(), want_tensors.len());
    for (t, w) in g.tensor_infos().iter().zip(want_tensors) {
        let name = w["name"].as_str().unwrap();
        assert_eq!(t.name, name);
        assert_eq!(t.ggml_type.name, w["type"].as_str().unwrap(), "{name}");
        assert_eq!(t.dtype.map(|d| d.name()), Some(t.ggml_type.name), "{name}");
        let shape: Vec<usize> = serde_json::from_value(w["shape"].clone()).unwrap();
        assert_eq!(t.shape.dims(), &shape[..], "{name}");
        assert_eq!(
            Some(t.file_offset as u64),
            w["file_offset"].as_u64(),
            "{name}"
        );
        assert_eq!(Some(t.byte_len as u64), w["n_bytes"].as_u64(), "{name}");
        let values: Vec<f32> = g.tensor(name).unwrap().to_f32_vec().unwrap();
        let want_values: Vec<f64> = serde_json::from_value(w["values"].clone()).unwrap();
        let want_values: Vec<f32> = want_values.iter().map(|&v| v as f32).collect();
        assert_eq!(values.len(), want_values.len(), "{name}");
        for (i, (a, b)) in values.iter().zip(&want_values).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{name}[{i}]: {a} vs {b}");
        }
    }
}

#[test]
fn gguf_config() {
    let f = open(fixtures().join("tiny.gguf")).unwrap();
    let c = f.config().unwrap();
    assert_eq!(c.architecture, "llama");
    assert_eq!(
        (
            c.num_layers,
            c.hidden_size,
            c.num_heads,
            c.num_kv_heads,
            c.head_dim
        ),
        (2, 64, 4, 2, 16)
    );
    assert_eq!(c.intermediate_size, Some(96));
    assert_eq!(c.vocab_size, 40); // from the token list: the file has no llama.vocab_size
    assert_eq!(c.context_length, Some(128));
    assert_eq!(c.rope_theta, 50000.0);
    assert_eq!(c.norm_eps, Some(f64::from(1e-5f32)));
    assert_eq!(
        (c.bos_token_id, c.eos_token_ids.clone()),
        (Some(1), vec![2])
    );
    assert!(c.tie_word_embeddings);
    assert!(serde_json::to_string(&c)
        .unwrap()
        .contains("\"vocab_size\":40"));
}

fn check_hf(dir: &str) {
    let want = load_json(&fixtures().join(format!("{dir}.expected.json")));
    let f = open(fixtures().join(dir)).unwrap();
    assert_eq!(f.format_name(), "huggingface");
    let entries = f.tensors();
    let want_tensors = want["tensors"].as_array().unwrap();
    assert_eq!(entries.len(), want_tensors.len());
    for w in want_tensors {
        let name = w["name"].as_str().unwrap();
        let e = entries.iter().find(|e| e.name == name).unwrap();
        assert_eq!(e.file.file_name().unwrap(), w["file"].as_str().unwrap());
        let dtype = match w["dtype"].as_str().unwrap() {
            "float32" => DType::F32,
            "float16" => DType::F16,
            "int64" => DType::I64,
            "int32" => DType::I32,
            "int8" => DType::I8,
            "uint8" => DType::U8,
            "bool" => DType::Bool,
            other => panic!("fixture dtype {other}"),
        };
        assert_eq!(e.dtype, Some(dtype), "{name}");
        assert_eq!(e.type_name, dtype.name(), "{name}");
        let shape: Vec<usize> = serde_json::from_value(w["shape"].clone()).unwrap();
        assert_eq!(e.shape.dims(), &shape[..], "{name}");
        let t = f.tensor(name).unwrap();
        assert_eq!(t.storage().location(), "mmap");
        // serde_json's default float parsing may be off by one f64 ulp; values are f32 (or
        // exact integers), so comparing after rounding to f32 is exact.
        let want_values: Vec<f64> = serde_json::from_value(w["values"].clone()).unwrap();
        let want_values: Vec<u32> = want_values.iter().map(|&v| (v as f32).to_bits()).collect();
        let got: Vec<u32> = t
            .to_f32_vec()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert!(got == want_values, "{name}: values differ");
    }
    assert!(matches!(f.tensor("nope"), Err(Error::MissingTensor { .. })));
    let c = f.config().unwrap();
    assert_eq!(c.architecture, "llama");
    assert_eq!(c.architectures, vec!["LlamaForCausalLM".to_string()]);
    assert_eq!((c.vocab_size, c.hidden_size, c.num_layers), (32, 16, 1));
    assert_eq!((c.num_heads, c.num_kv_heads, c.head_dim), (4, 2, 4));
    assert_eq!(c.rope_theta, 500000.0);
    let rs = c.rope_scaling.clone().unwrap();
    assert_eq!(
        (rs.kind.as_str(), rs.factor, rs.original_max_position),
        ("llama3", Some(8.0), Some(8192))
    );
    assert_eq!(rs.extra.get("low_freq_factor"), Some(&Value::from(1.0)));
    assert_eq!(
        (c.bos_token_id, c.eos_token_ids.clone()),
        (Some(1), vec![2, 3])
    );
    assert!(!c.tie_word_embeddings);
    assert!(c.extra.contains_key("some_unknown_field"));
    assert!(!c.extra.contains_key("vocab_size"));
    let ModelFile::HuggingFace(h) = f else {
        unreachable!()
    };
    assert!(h.generation_config.is_some() && h.tokenizer_config.is_some());
    assert!(h.tokenizer_json.is_none());
}

#[test]
fn hf_single_matches_safetensors() {
    check_hf("hf_single");
}

#[test]
fn hf_sharded_matches_safetensors() {
    check_hf("hf_sharded");
    let ModelFile::HuggingFace(h) = open(fixtures().join("hf_sharded")).unwrap() else {
        panic!()
    };
    assert_eq!(h.shards().len(), 2);
}

/// A scratch copy of a fixture directory.
fn scratch(dir: &str, tag: &str) -> PathBuf {
    let to = std::env::temp_dir().join(format!("cyb-format-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&to);
    std::fs::create_dir_all(&to).unwrap();
    for e in std::fs::read_dir(fixtures().join(dir)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    to
}

#[test]
fn corrupt_hf_directories_are_errors() {
    let d = scratch("hf_single", "trunc");
    let st = d.join("model.safetensors");
    let bytes = std::fs::read(&st).unwrap();
    for cut in [0, 7, 8, 100, bytes.len() - 1] {
        std::fs::write(&st, &bytes[..cut]).unwrap();
        let e = open(&d).unwrap_err();
        assert!(matches!(e, Error::Format { .. }), "cut {cut}: {e}");
    }
    std::fs::remove_file(&st).unwrap();
    assert!(open(&d)
        .unwrap_err()
        .to_string()
        .contains("model.safetensors"));
    std::fs::write(d.join("config.json"), "[1, 2").unwrap();
    assert!(matches!(open(&d), Err(Error::Format { .. })));
    let _ = std::fs::remove_dir_all(&d);

    let d = scratch("hf_sharded", "escape");
    let idx = d.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&idx).unwrap();
    std::fs::write(&idx, text.replacen("model-00001", "../model-00001", 1)).unwrap();
    assert!(open(&d)
        .unwrap_err()
        .to_string()
        .contains("not a file name inside"));
    std::fs::write(
        &idx,
        text.replacen("\"lm_head.weight\"", "\"lm_head.missing\"", 1),
    )
    .unwrap();
    assert!(open(&d)
        .unwrap_err()
        .to_string()
        .contains("does not hold it"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn unrecognized_paths_are_named() {
    let e = open(fixtures().join("tiny.gguf.json"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tiny.gguf.json") && e.contains("unrecognized"),
        "{e}"
    );
    let e = open(fixtures()).unwrap_err().to_string();
    assert!(e.contains("without config.json"), "{e}");
    assert!(matches!(
        open(fixtures().join("absent")),
        Err(Error::Io { .. })
    ));
}

#[test]
fn missing_config_fields() {
    let mut cfg = load_json(&fixtures().join("hf_single/config.json"));
    cfg.as_object_mut().unwrap().remove("hidden_size");
    let e = cyb_format::ModelConfig::from_hf(&cfg, None, true).unwrap_err();
    assert!(
        matches!(e, Error::InvalidConfig { ref field, .. } if field == "hidden_size"),
        "{e}"
    );
    let mut cfg = load_json(&fixtures().join("hf_single/config.json"));
    cfg["num_key_value_heads"] = 3.into();
    assert!(cyb_format::ModelConfig::from_hf(&cfg, None, true).is_err());
}

#[test]
fn impossible_config_values_are_refused_naming_the_field() {
    let base = load_json(&fixtures().join("hf_single/config.json"));
    for (key, value, field) in [
        ("rms_norm_eps", serde_json::json!(-1.0), "rms_norm_eps"),
        ("rope_theta", serde_json::json!(0.0), "rope_theta"),
        ("rope_theta", serde_json::json!(-10000.0), "rope_theta"),
        (
            "num_attention_heads",
            serde_json::json!(0),
            "num_attention_heads",
        ),
        ("num_hidden_layers", serde_json::json!(0), "layers"),
    ] {
        let mut cfg = base.clone();
        cfg[key] = value.clone();
        match cyb_format::ModelConfig::from_hf(&cfg, None, true) {
            Err(Error::InvalidConfig { field: f, reason }) => {
                assert!(f.contains(field), "{key} = {value}: field {f:?} ({reason})")
            }
            other => panic!("{key} = {value}: {other:?}"),
        }
    }
    // A zero epsilon is unusual but computable.
    let mut cfg = base.clone();
    cfg["rms_norm_eps"] = 0.0.into();
    assert!(cyb_format::ModelConfig::from_hf(&cfg, None, true).is_ok());
}

#[test]
fn a_layer_count_beyond_the_weights_is_refused() {
    let dir = std::env::temp_dir().join(format!("cyb-layers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(fixtures().join("hf_single")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    let mut cfg = load_json(&dir.join("config.json"));
    let layers = cfg["num_hidden_layers"].as_u64().unwrap();
    cfg["num_hidden_layers"] = (1u64 << 31).into();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let e = open(&dir).unwrap().config().unwrap_err().to_string();
    assert!(
        e.contains("num_layers") && e.contains(&format!("0 to {}", layers - 1)),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_gguf_with_a_broken_epsilon_is_refused() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny_chat/model-f32.gguf");
    let bytes = std::fs::read(&path).unwrap();
    let key = b"attention.layer_norm_rms_epsilon";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    // The value type (u32, 6 = f32), then the value.
    assert_eq!(u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()), 6);
    for bad in [f32::NAN, -1.0, f32::INFINITY] {
        let mut b = bytes.clone();
        b[at + 4..at + 8].copy_from_slice(&bad.to_le_bytes());
        let p = std::env::temp_dir().join(format!("cyb-eps-{}-{bad}.gguf", std::process::id()));
        std::fs::write(&p, &b).unwrap();
        let e = open(&p).unwrap().config().unwrap_err().to_string();
        assert!(e.contains("layer_norm_(rms_)epsilon"), "{bad}: {e}");
        let _ = std::fs::remove_file(&p);
    }
}

//! whisper.cpp ggml files read as the transformers model they were converted from:
//! tests/fixtures/whisper_ggml/ (made by tools/fixtures/make_whisper_ggml_fixtures.py with
//! whisper.cpp's own converter, plus quantized copies laid out as its `quantize` tool writes
//! them) holds the random-weight Whisper fixtures of tests/fixtures/whisper/ as f16 and f32
//! files and as q8_0, q5_1 and q4_0; each must give the transformers tensors (to the
//! converter's float16 rounding, to the quantization error), and import into a `.model` that
//! reopens as the same model.

use cyb_format::model_container::{write_model, WriteOptions};
use cyb_format::{open, HfModel, ModelFile};
use cyb_tensor::{DType, Tensor};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn hf(m: &ModelFile) -> &HfModel {
    match m {
        ModelFile::HuggingFace(h) => h,
        ModelFile::Gguf(_) => panic!("{} opened as GGUF", m.path().display()),
    }
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_f32_vec().unwrap()
}

/// The transformers fixture's values as the converter writes them (through float16).
fn f16_rounded(t: &Tensor) -> Vec<f32> {
    values(&Tensor::from_f32_as(t.dims(), &values(t), DType::F16).unwrap())
}

/// The transformers tensor names, without the tied output projection.
fn names(h: &HfModel) -> Vec<String> {
    let mut v: Vec<String> = h.tensor_infos().map(|(t, _)| t.name.clone()).collect();
    v.retain(|n| n != "proj_out.weight");
    v.sort();
    v
}

#[test]
fn converted_files_give_the_transformers_tensors() {
    for (variant, kinds) in [
        ("tiny80", &["f16", "f32", "q8_0", "q5_1", "q4_0"][..]),
        ("mel128", &["f16", "f32"][..]),
    ] {
        let reference = open(fixtures().join("whisper").join(variant)).unwrap();
        let want = hf(&reference);
        for kind in kinds {
            let path = fixtures().join(format!("whisper_ggml/{variant}-{kind}.bin"));
            let m = open(&path).unwrap();
            assert_eq!(m.format_name(), "ggml");
            assert_eq!(
                m.format_version(),
                format!("whisper.cpp ggml, {kind}"),
                "{variant}"
            );
            let h = hf(&m);
            assert_eq!(names(h), names(want), "{variant} {kind}");
            for name in names(want) {
                let (a, b) = (h.tensor(&name).unwrap(), want.tensor(&name).unwrap());
                assert_eq!(a.dims(), b.dims(), "{variant} {kind} {name}");
                let got = values(&a);
                let exact = f16_rounded(&b);
                let quantized = !matches!(a.dtype(), DType::F32 | DType::F16);
                if !quantized {
                    assert_eq!(got, exact, "{variant} {kind} {name}");
                    continue;
                }
                // Blocks of 32 along a row. Q8_0 rounds to steps of amax/127 (error half a
                // step), Q5_1 to (max - min)/31 ≤ 2·amax/31 (half a step), Q4_0 to amax/8 with
                // the block's extreme on the side of 8 steps, so the other side's end can be
                // clamped a whole step short.
                let bound = match a.dtype() {
                    DType::Q8_0 => 0.5 / 127.0,
                    DType::Q5_1 => 1.0 / 31.0,
                    DType::Q4_0 => 1.0 / 8.0,
                    d => panic!("{name}: unexpected {d}"),
                };
                for (g, x) in got.chunks(32).zip(exact.chunks(32)) {
                    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
                    // Plus the block scale's own float16 rounding.
                    let tol = amax * (bound * 1.01 + 2e-3) + 1e-6;
                    for (g, x) in g.iter().zip(x) {
                        assert!((g - x).abs() <= tol, "{kind} {name}: {g} vs {x}");
                    }
                }
            }
        }
    }
}

#[test]
fn quantized_files_keep_their_blocks() {
    let m = open(fixtures().join("whisper_ggml/tiny80-q5_1.bin")).unwrap();
    let h = hf(&m);
    let dtype = |n: &str| h.tensor(n).unwrap().dtype();
    assert_eq!(dtype("model.encoder.layers.0.fc1.weight"), DType::Q5_1);
    assert_eq!(dtype("model.decoder.embed_tokens.weight"), DType::Q5_1);
    // Not quantized by whisper.cpp's tool: 3-D conv kernels, position tables, vectors.
    assert_eq!(dtype("model.encoder.conv1.weight"), DType::F16);
    assert_eq!(dtype("model.decoder.embed_positions.weight"), DType::F32);
    assert_eq!(dtype("model.decoder.layer_norm.bias"), DType::F32);
    let meta = m.metadata();
    let get = |k: &str| meta.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("ggml.ftype"), Some(Value::from(2009)));
}

#[test]
fn config_matches_transformers() {
    for variant in ["tiny80", "mel128"] {
        let reference = open(fixtures().join("whisper").join(variant)).unwrap();
        let want = hf(&reference).config_json();
        let m = open(fixtures().join(format!("whisper_ggml/{variant}-f16.bin"))).unwrap();
        let c = hf(&m).config_json();
        for key in [
            "model_type",
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "num_mel_bins",
            "vocab_size",
            "max_source_positions",
            "max_target_positions",
            "activation_function",
            "scale_embedding",
        ] {
            assert_eq!(c.get(key), want.get(key), "{variant} {key}");
        }
        assert_eq!(c["tie_word_embeddings"], Value::from(true));
        // A 120-token test vocabulary is not Whisper's: no tokenizer is made for it.
        assert!(hf(&m).tokenizer_json.is_none());
        assert_eq!(m.config().unwrap().architecture, "whisper");
    }
}

#[test]
fn imports_into_a_model_container() {
    let dir = std::env::temp_dir().join(format!("cyb-ggml-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for kind in ["f16", "q5_1"] {
        let src = open(fixtures().join(format!("whisper_ggml/tiny80-{kind}.bin"))).unwrap();
        let out = dir.join(format!("{kind}.model"));
        write_model(&src, &out, &WriteOptions::default()).unwrap();
        let m = open(&out).unwrap();
        m.verify().unwrap();
        assert_eq!(m.format_name(), "model");
        let (a, b) = (hf(&src), hf(&m));
        assert_eq!(a.config_json(), b.config_json(), "{kind}");
        assert_eq!(a.tensor_infos().count(), b.tensor_infos().count());
        for (t, _) in a.tensor_infos() {
            let (x, y) = (a.tensor(&t.name).unwrap(), b.tensor(&t.name).unwrap());
            assert_eq!((x.dtype(), x.dims()), (y.dtype(), y.dims()), "{}", t.name);
            assert_eq!(x.host_bytes(), y.host_bytes(), "{kind} {}", t.name);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

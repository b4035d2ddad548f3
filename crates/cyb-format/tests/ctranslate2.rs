//! CTranslate2 Whisper directories read as the transformers model they were converted from:
//! tests/fixtures/ct2/ (made by tools/fixtures/make_ct2_fixture.py with CTranslate2's own
//! converter) holds a tiny transformers Whisper (hf/) and its float32, float16, bfloat16, int8
//! and int8_float16 conversions; each must give hf/'s tensors (exactly, to float16 or bfloat16
//! rounding, to int8 quantization error), import into a `.model` that reopens as the same model, and fail cleanly
//! on damaged files. The real whisper-tiny.en conversion (tools/fetch_whisper_tiny_en.sh) is
//! checked when it is in the cache; without it that test is skipped, except under CI (env `CI`
//! set), where it fails.

use cyb_format::model_container::{write_model, WriteOptions};
use cyb_format::{ctranslate2, open, Ct2File, HfModel, ModelFile};
use cyb_tensor::{DType, Error, Tensor};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/ct2")
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

/// The reference's values rounded to `dtype` as the converter stores them.
fn rounded(t: &Tensor, dtype: DType) -> Vec<f32> {
    let v = values(t);
    values(&Tensor::from_f32_as(t.dims(), &v, dtype).unwrap())
}

const QUANTS: [&str; 5] = ["float32", "float16", "bfloat16", "int8", "int8_float16"];

#[test]
fn conversions_give_the_transformers_tensors() {
    let reference = open(fixtures().join("hf")).unwrap();
    let want = hf(&reference);
    let mut want_names: Vec<String> = want.tensor_infos().map(|(t, _)| t.name.clone()).collect();
    // The tied output projection is not a tensor of its own in either.
    want_names.retain(|n| n != "proj_out.weight");
    want_names.sort();
    for quant in QUANTS {
        let m = open(fixtures().join(quant)).unwrap();
        assert_eq!(m.format_name(), "ctranslate2", "{quant}");
        assert_eq!(m.format_version(), "model.bin v6, WhisperSpec revision 3");
        let h = hf(&m);
        let mut names: Vec<String> = h.tensor_infos().map(|(t, _)| t.name.clone()).collect();
        names.sort();
        assert_eq!(names, want_names, "{quant}");
        for name in &want_names {
            let (a, b) = (h.tensor(name).unwrap(), want.tensor(name).unwrap());
            assert_eq!(a.dims(), b.dims(), "{quant} {name}");
            let got = values(&a);
            match (quant, a.dtype()) {
                ("float32", DType::F32) => assert_eq!(got, values(&b), "{name}"),
                ("float16" | "int8_float16", DType::F16) | ("bfloat16", DType::BF16) => {
                    assert_eq!(got, rounded(&b, a.dtype()), "{quant} {name}")
                }
                ("int8" | "int8_float16", DType::F32) if !h.tensor_in_place(name) => {
                    // Per output row: q = rint(x * 127 / amax), so |x - q / scale| <= amax / 254.
                    let exact = values(&b);
                    let rows = b.dims()[0];
                    let row = exact.len() / rows;
                    for (r, (g, x)) in got.chunks(row).zip(exact.chunks(row)).enumerate() {
                        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
                        for (g, x) in g.iter().zip(x) {
                            let tol = amax / 254.0 * 1.0001 + 1e-7;
                            assert!((g - x).abs() <= tol, "{name} row {r}: {g} vs {x}");
                        }
                    }
                }
                ("int8", DType::F32) => assert_eq!(got, values(&b), "{name}"),
                (q, d) => panic!("{q} {name}: unexpected dtype {d}"),
            }
        }
        if quant.starts_with("int8") {
            assert!(!h.tensor_in_place("model.encoder.conv1.weight"));
            assert!(!h.tensor_in_place("model.decoder.embed_tokens.weight"));
            assert!(h.tensor_in_place("model.decoder.embed_positions.weight"));
        }
    }
}

#[test]
fn config_matches_transformers() {
    let reference = open(fixtures().join("hf")).unwrap();
    let want = hf(&reference).config_json();
    let want_gen = hf(&reference).generation_config.clone().unwrap();
    let m = open(fixtures().join("float16")).unwrap();
    let c = hf(&m).config_json();
    for key in [
        "model_type",
        "architectures",
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
        "tie_word_embeddings",
        "decoder_start_token_id",
        "eos_token_id",
        "pad_token_id",
    ] {
        assert_eq!(c.get(key), want.get(key), "{key}");
    }
    // CTranslate2's settings pass through, and under transformers' names.
    assert_eq!(c["suppress_ids"], want_gen["suppress_tokens"]);
    assert_eq!(c["suppress_tokens"], want_gen["suppress_tokens"]);
    assert_eq!(c["suppress_ids_begin"], want_gen["begin_suppress_tokens"]);
    assert_eq!(
        c["begin_suppress_tokens"],
        want_gen["begin_suppress_tokens"]
    );
    assert_eq!(c["alignment_heads"], want_gen["alignment_heads"]);
    assert!(c.get("lang_ids").is_some());

    let cfg = m.config().unwrap();
    assert_eq!(cfg.architecture, "whisper");
    assert_eq!(cfg.architectures, ["WhisperForConditionalGeneration"]);
    assert_eq!((cfg.hidden_size, cfg.num_layers, cfg.num_heads), (16, 2, 2));
    assert_eq!(cfg.vocab_size, 64);
    assert!(cfg.tie_word_embeddings);
    assert_eq!(
        hf(&m).tokenizer_json.as_deref(),
        Some(fixtures().join("float16/tokenizer.json").as_path())
    );
    let meta = m.metadata();
    let get = |k: &str| meta.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("ctranslate2.spec"), Some(Value::from("WhisperSpec")));
    assert_eq!(get("ctranslate2.decoder/num_heads"), Some(Value::from(2)));
    assert_eq!(get("d_model"), Some(Value::from(16)));
}

#[test]
fn member_paths_open_the_directory() {
    for member in ["model.bin", "config.json"] {
        let m = open(fixtures().join("float32").join(member)).unwrap();
        assert_eq!(m.format_name(), "ctranslate2", "{member}");
        assert_eq!(m.path(), fixtures().join("float32"));
    }
    let direct = HfModel::open(fixtures().join("int8")).unwrap();
    assert!(direct.ctranslate2().is_some());
}

#[test]
fn imports_into_a_model_container() {
    let dir = std::env::temp_dir().join(format!("cyb-ct2-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for quant in ["float16", "int8_float16"] {
        let src = open(fixtures().join(quant)).unwrap();
        let out = dir.join(format!("{quant}.model"));
        write_model(&src, &out, &WriteOptions::default()).unwrap();
        let m = open(&out).unwrap();
        m.verify().unwrap();
        assert_eq!(m.format_name(), "model");
        let (a, b) = (hf(&src), hf(&m));
        assert_eq!(a.config_json(), b.config_json(), "{quant}");
        let tok = std::fs::read(b.tokenizer_json.as_deref().unwrap()).unwrap();
        assert_eq!(
            tok,
            std::fs::read(fixtures().join(quant).join("tokenizer.json")).unwrap()
        );
        assert_eq!(a.tensor_infos().count(), b.tensor_infos().count());
        for (t, _) in a.tensor_infos() {
            let (x, y) = (a.tensor(&t.name).unwrap(), b.tensor(&t.name).unwrap());
            assert_eq!((x.dtype(), x.dims()), (y.dtype(), y.dims()), "{}", t.name);
            assert_eq!(x.host_bytes(), y.host_bytes(), "{quant} {}", t.name);
        }
        assert_eq!(m.config().unwrap(), {
            let mut c = src.config().unwrap();
            c.source = "huggingface".into();
            c
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Parses `bytes` as the float16 fixture's model.bin and builds the Whisper view over the
/// fixture directory's other files.
fn build(bytes: Vec<u8>) -> cyb_tensor::Result<HfModel> {
    build_in(bytes, &fixtures().join("float16"))
}

fn build_in(bytes: Vec<u8>, dir: &Path) -> cyb_tensor::Result<HfModel> {
    let file = Ct2File::from_bytes(Arc::new(bytes), "model.bin")?;
    ctranslate2::from_file(file, dir)
}

fn expect_format<T: std::fmt::Debug>(r: cyb_tensor::Result<T>, offset: usize, words: &str) {
    match r {
        Err(Error::Format {
            file,
            offset: at,
            reason,
        }) => {
            assert_eq!(file, PathBuf::from("model.bin"));
            assert_eq!(at, offset as u64, "{reason}");
            assert!(reason.contains(words), "{reason:?} lacks {words:?}");
        }
        other => panic!("expected a format error about {words:?}, got {other:?}"),
    }
}

#[test]
fn damaged_files_are_format_errors() {
    let good = std::fs::read(fixtures().join("float16/model.bin")).unwrap();
    build(good.clone()).unwrap();
    for cut in 0..good.len() {
        match Ct2File::from_bytes(Arc::new(good[..cut].to_vec()), "model.bin") {
            Err(Error::Format { file, offset, .. }) => {
                assert_eq!(file, PathBuf::from("model.bin"));
                assert!(offset as usize <= cut, "cut {cut}: offset {offset}");
            }
            other => panic!("cut {cut}: {other:?}"),
        }
    }

    let parsed = Ct2File::from_bytes(Arc::new(good.clone()), "model.bin").unwrap();
    let v = parsed.variable("encoder/conv2/weight").unwrap().clone();
    let rank_at = v.record_offset + 2 + v.name.len() + 1;
    let dims_at = rank_at + 1;
    let dtype_at = dims_at + 4 * v.shape.rank();
    let num_bytes_at = dtype_at + 1;
    let with = |at: usize, bytes: &[u8]| {
        let mut b = good.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        b
    };
    expect_format(
        build(with(dims_at, &17u32.to_le_bytes())),
        dtype_at,
        "needs",
    );
    let n = v.byte_len as u32 + 2;
    expect_format(
        build(with(num_bytes_at, &n.to_le_bytes())),
        dtype_at,
        "needs",
    );
    expect_format(build(with(dtype_at, &[6])), dtype_at, "unknown dtype id 6");
    expect_format(
        build(with(v.record_offset + 2, &[0xc3, 0x28])),
        v.record_offset,
        "UTF-8",
    );
    let count_at = 4 + 2 + "WhisperSpec".len() + 1 + 4;
    expect_format(
        build(with(count_at, &0x7fff_ffffu32.to_le_bytes())),
        count_at,
        "num_variables",
    );
    // A renamed weight leaves its counterpart missing.
    let renamed = with(v.record_offset + 2, b"E");
    assert!(matches!(build(renamed), Err(Error::MissingTensor { .. })));

    // Flipping any byte of the structure (file header, variable records, aliases) and every
    // 31st data byte gives a model or an error, never a panic. No other files are beside it,
    // so only model.bin is read each time.
    let nowhere = Path::new("/nonexistent-ct2-fixture-dir");
    let data: Vec<std::ops::Range<usize>> = parsed
        .variables()
        .iter()
        .map(|v| v.offset..v.offset + v.byte_len)
        .collect();
    let in_data = |i: usize| data.iter().any(|r| r.contains(&i));
    for i in (0..good.len()).filter(|&i| !in_data(i) || i % 31 == 0) {
        let mut b = good.clone();
        b[i] ^= 0x5a;
        if let Ok(h) = build_in(b, nowhere) {
            for (t, _) in h.tensor_infos() {
                let _ = h.tensor(&t.name).map(|t| values(&t));
            }
        }
    }
}

fn tiny_en_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("CYB_WHISPER_TINY_EN_CT2") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("CYB_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/cyb-llm")))
        .unwrap_or_default();
    cache.join("whisper-tiny.en-ct2")
}

/// Every tensor name of transformers' WhisperForConditionalGeneration with `enc` and `dec`
/// layers (tied output projection).
fn whisper_names(enc: usize, dec: usize) -> Vec<String> {
    let mut n = Vec::new();
    let e = "model.encoder";
    for t in ["conv1", "conv2"] {
        n.push(format!("{e}.{t}.weight"));
        n.push(format!("{e}.{t}.bias"));
    }
    n.push(format!("{e}.embed_positions.weight"));
    let d = "model.decoder";
    n.push(format!("{d}.embed_tokens.weight"));
    n.push(format!("{d}.embed_positions.weight"));
    let layer = |n: &mut Vec<String>, l: String, cross: bool| {
        let mut attn = vec!["self_attn"];
        let mut norms = vec!["self_attn_layer_norm", "final_layer_norm"];
        if cross {
            attn.push("encoder_attn");
            norms.push("encoder_attn_layer_norm");
        }
        for a in attn {
            for p in ["q_proj", "k_proj", "v_proj", "out_proj"] {
                n.push(format!("{l}.{a}.{p}.weight"));
                if p != "k_proj" {
                    n.push(format!("{l}.{a}.{p}.bias"));
                }
            }
        }
        for x in norms.into_iter().chain(["fc1", "fc2"]) {
            n.push(format!("{l}.{x}.weight"));
            n.push(format!("{l}.{x}.bias"));
        }
    };
    for i in 0..enc {
        layer(&mut n, format!("{e}.layers.{i}"), false);
    }
    for i in 0..dec {
        layer(&mut n, format!("{d}.layers.{i}"), true);
    }
    for s in [e, d] {
        n.push(format!("{s}.layer_norm.weight"));
        n.push(format!("{s}.layer_norm.bias"));
    }
    n.sort();
    n
}

#[test]
fn whisper_tiny_en() {
    let dir = tiny_en_dir();
    if !dir.join("model.bin").is_file() {
        let msg = format!(
            "{} is missing: run tools/fetch_whisper_tiny_en.sh (or set CYB_WHISPER_TINY_EN_CT2)",
            dir.display()
        );
        assert!(std::env::var_os("CI").is_none(), "{msg}");
        eprintln!("skipping whisper tiny.en test: {msg}");
        return;
    }
    let m = open(&dir).unwrap();
    assert_eq!(m.format_name(), "ctranslate2");
    let h = hf(&m);
    let c = h.config_json();
    for (k, v) in [
        ("d_model", 384),
        ("encoder_layers", 4),
        ("decoder_layers", 4),
        ("encoder_attention_heads", 6),
        ("decoder_attention_heads", 6),
        ("encoder_ffn_dim", 1536),
        ("decoder_ffn_dim", 1536),
        ("num_mel_bins", 80),
        ("vocab_size", 51864),
        ("max_source_positions", 1500),
        ("max_target_positions", 448),
        ("eos_token_id", 50256),
        ("decoder_start_token_id", 50257),
    ] {
        assert_eq!(c[k], v, "{k}");
    }
    assert_eq!(c["tie_word_embeddings"], true);
    assert!(c["alignment_heads"].is_array() && c["suppress_ids"].is_array());
    let mut names: Vec<String> = h.tensor_infos().map(|(t, _)| t.name.clone()).collect();
    names.sort();
    assert_eq!(names, whisper_names(4, 4));
    for name in &names {
        let t = h.tensor(name).unwrap();
        assert_eq!(t.dtype(), DType::F16, "{name}");
    }
    let shape = |n: &str| h.tensor(n).unwrap().dims().to_vec();
    assert_eq!(shape("model.encoder.conv1.weight"), [384, 80, 3]);
    assert_eq!(shape("model.encoder.conv2.weight"), [384, 384, 3]);
    assert_eq!(shape("model.encoder.embed_positions.weight"), [1500, 384]);
    assert_eq!(shape("model.decoder.embed_tokens.weight"), [51864, 384]);
    assert_eq!(shape("model.decoder.embed_positions.weight"), [448, 384]);
    assert_eq!(
        shape("model.decoder.layers.3.encoder_attn.k_proj.weight"),
        [384, 384]
    );
    assert_eq!(shape("model.encoder.layers.0.fc1.weight"), [1536, 384]);

    // Split projections are row ranges of the fused CTranslate2 matrix.
    let file = h.ctranslate2().unwrap();
    let fused = file
        .variable("decoder/layer_2/self_attention/linear_0/weight")
        .unwrap();
    let data = file.data(fused);
    let third = data.len() / 3;
    for (i, p) in ["q_proj", "k_proj", "v_proj"].iter().enumerate() {
        let t = h
            .tensor(&format!("model.decoder.layers.2.self_attn.{p}.weight"))
            .unwrap();
        assert_eq!(
            t.host_bytes().unwrap(),
            &data[i * third..(i + 1) * third],
            "{p}"
        );
    }
    let cfg = m.config().unwrap();
    assert_eq!(
        (cfg.hidden_size, cfg.num_layers, cfg.num_heads),
        (384, 4, 6)
    );
    assert!(h.tokenizer_json.is_some());
}

//! The real Whisper tiny.en weights as a whisper.cpp ggml file: the CTranslate2 fp16 model
//! (`tools/fetch_whisper_tiny_en.sh`) rewritten in the layout whisper.cpp's
//! `convert-h5-to-ggml.py` writes (openai-whisper names, `ne` reversed, 2-D/3-D weights f16,
//! the rest f32, conv biases as [n, 1], the vocabulary as raw bytes in id order, no merges and
//! no special tokens). The reader's layout itself is checked against files made by that
//! converter (crates/cyb-format/tests/whisper_ggml.rs); this checks what only a real
//! vocabulary and real weights show: the tokenizer made from the bare word list encodes as the
//! checkpoint's own tokenizer.json, the special ids whisper.cpp derives from `n_vocab` are the
//! checkpoint's, and the file transcribes the Piper-spoken test files to faster-whisper's text
//! (tests/fixtures/whisper/transcripts.json, greedy), segment times within 0.1 s.
//!
//! Skipped, with a note, when the model is not in the cache.

use cyb_format::{HfModel, ModelFile};
use cyb_runtime::transcribe::TranscribeOptions;
use cyb_runtime::{Runtime, RuntimeOptions, Tokenizer};
use cyb_tensor::DType;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/whisper")
}

/// openai-whisper's name for a transformers Whisper tensor name.
fn openai_name(name: &str) -> String {
    let fixed = [
        (
            "model.encoder.embed_positions.weight",
            "encoder.positional_embedding",
        ),
        (
            "model.decoder.embed_positions.weight",
            "decoder.positional_embedding",
        ),
        (
            "model.decoder.embed_tokens.weight",
            "decoder.token_embedding.weight",
        ),
        ("model.encoder.layer_norm.weight", "encoder.ln_post.weight"),
        ("model.encoder.layer_norm.bias", "encoder.ln_post.bias"),
        ("model.decoder.layer_norm.weight", "decoder.ln.weight"),
        ("model.decoder.layer_norm.bias", "decoder.ln.bias"),
    ];
    if let Some((_, o)) = fixed.iter().find(|(h, _)| *h == name) {
        return o.to_string();
    }
    let n = name.strip_prefix("model.").unwrap();
    let n = n.replace(".layers.", ".blocks.");
    let decoder = n.starts_with("decoder.");
    let mut out = n.clone();
    for (h, o) in [
        ("self_attn.q_proj", "attn.query"),
        ("self_attn.k_proj", "attn.key"),
        ("self_attn.v_proj", "attn.value"),
        ("self_attn.out_proj", "attn.out"),
        ("self_attn_layer_norm", "attn_ln"),
        ("encoder_attn.q_proj", "cross_attn.query"),
        ("encoder_attn.k_proj", "cross_attn.key"),
        ("encoder_attn.v_proj", "cross_attn.value"),
        ("encoder_attn.out_proj", "cross_attn.out"),
        ("encoder_attn_layer_norm", "cross_attn_ln"),
        ("fc1", "mlp.0"),
        ("fc2", "mlp.2"),
        ("final_layer_norm", "mlp_ln"),
    ] {
        if n.contains(&format!(".{h}.")) {
            assert!(decoder || !h.starts_with("encoder_attn"));
            out = n.replace(&format!(".{h}."), &format!(".{o}."));
        }
    }
    out
}

/// GPT-2's printable character → byte table, inverted.
fn byte_of_char() -> std::collections::HashMap<char, u8> {
    let mut m = std::collections::HashMap::new();
    let mut extra = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let c = if printable {
            char::from(b)
        } else {
            extra += 1;
            char::from_u32(255 + extra).unwrap()
        };
        m.insert(c, b);
    }
    m
}

/// The ggml file of `h` (a tiny.en), written as convert-h5-to-ggml.py writes one.
fn ggml_bytes(h: &HfModel, tokenizer_json: &Path) -> Vec<u8> {
    let c = h.config_json();
    let g = |k: &str| c[k].as_i64().unwrap() as i32;
    let mut b = 0x6767_6d6c_u32.to_le_bytes().to_vec();
    for v in [
        g("vocab_size"),
        g("max_source_positions"),
        g("d_model"),
        g("encoder_attention_heads"),
        g("encoder_layers"),
        g("max_target_positions"),
        g("d_model"),
        g("decoder_attention_heads"),
        g("decoder_layers"),
        g("num_mel_bins"),
        1,
    ] {
        b.extend(v.to_le_bytes());
    }
    // The filter bank is not read; its size is.
    b.extend(80i32.to_le_bytes());
    b.extend(201i32.to_le_bytes());
    b.extend(vec![0u8; 80 * 201 * 4]);
    let tok: Value = serde_json::from_slice(&std::fs::read(tokenizer_json).unwrap()).unwrap();
    let mut vocab: Vec<(u64, &str)> = tok["model"]["vocab"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (v.as_u64().unwrap(), k.as_str()))
        .collect();
    vocab.sort();
    let bytes_of = byte_of_char();
    b.extend((vocab.len() as i32).to_le_bytes());
    for (_, t) in vocab {
        let raw: Vec<u8> = t.chars().map(|ch| bytes_of[&ch]).collect();
        b.extend((raw.len() as u32).to_le_bytes());
        b.extend(raw);
    }
    for (info, _) in h.tensor_infos() {
        let t = h.tensor(&info.name).unwrap();
        let name = openai_name(&info.name);
        let mut dims: Vec<usize> = t.dims().to_vec();
        if name.ends_with("conv1.bias") || name.ends_with("conv2.bias") {
            dims.push(1);
        }
        let f16 = dims.len() >= 2 && !name.ends_with("bias") && !name.contains("positional");
        let values = t.to_f32_vec().unwrap();
        b.extend((dims.len() as i32).to_le_bytes());
        b.extend((name.len() as i32).to_le_bytes());
        b.extend(i32::from(f16).to_le_bytes());
        for d in dims.iter().rev() {
            b.extend((*d as i32).to_le_bytes());
        }
        b.extend(name.as_bytes());
        if f16 {
            let t16 = cyb_tensor::Tensor::from_f32_as(&dims, &values, DType::F16).unwrap();
            b.extend(t16.host_bytes().unwrap());
        } else {
            b.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        }
    }
    b
}

#[test]
fn real_tiny_en_as_a_ggml_file() {
    let dir = cyb_runtime::cache_dir().join("whisper-tiny.en-ct2");
    if !dir.join("model.bin").is_file() {
        eprintln!(
            "skipped: {} is absent (run tools/fetch_whisper_tiny_en.sh)",
            dir.display()
        );
        return;
    }
    let ct2 = cyb_format::open(&dir).unwrap();
    let ModelFile::HuggingFace(h) = &ct2 else {
        panic!("not a Hugging Face view")
    };
    let tokenizer_json = dir.join("tokenizer.json");
    let tmp = std::env::temp_dir().join(format!("cyb-ggml-tiny-en-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let path = tmp.join("ggml-tiny.en.bin");
    std::fs::write(&path, ggml_bytes(h, &tokenizer_json)).unwrap();

    let file = cyb_format::open(&path).unwrap();
    assert_eq!(file.format_name(), "ggml");
    // The special ids whisper.cpp derives from n_vocab are the checkpoint's.
    let ModelFile::HuggingFace(g) = &file else {
        panic!()
    };
    for key in ["eos_token_id", "decoder_start_token_id"] {
        assert_eq!(g.config_json()[key], h.config_json()[key], "{key}");
    }
    // The tokenizer made from the word list encodes as the checkpoint's tokenizer.json.
    let made = Tokenizer::from_model_file(&file).unwrap();
    let want = Tokenizer::from_tokenizer_json(&tokenizer_json).unwrap();
    let mut texts: Vec<String> = [
        " Hello, world!",
        "The quick brown fox jumps over the lazy dog.",
        " naïve café — 1,234.56 km²",
        "日本語のテキストと한국어",
        "  double  spaces\tand\nnewlines  ",
        " -",
        " '",
        "♪♪♪ ♩",
        "<|startoftranscript|><|en|><|transcribe|><|notimestamps|> text<|endoftext|>",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("transcripts.json")).unwrap(),
    )
    .unwrap();
    let files = reference["files"].as_object().unwrap();
    for by_config in files.values() {
        if let Some(t) = by_config["greedy"]["text"].as_str() {
            texts.push(t.to_string());
        }
    }
    for t in &texts {
        assert_eq!(
            made.encode(t, false).unwrap(),
            want.encode(t, false).unwrap(),
            "{t:?}"
        );
    }
    for id in [0u32, 220, 13, 50256, 50257, 50258, 50358, 50362] {
        assert_eq!(
            made.decode(&[id], false).unwrap(),
            want.decode(&[id], false).unwrap()
        );
    }

    // Transcripts equal faster-whisper's.
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    let model = rt.load(&path).unwrap();
    let opts = TranscribeOptions {
        language: Some("en".into()),
        beam_size: 1,
        ..TranscribeOptions::default()
    };
    let mut failures = Vec::new();
    for (name, by_config) in files {
        let want = &by_config["greedy"];
        if want.is_null() {
            continue;
        }
        let audio = cyb_media::load_16k_mono(&fixtures().join("speech").join(name)).unwrap();
        let got = model.transcribe(&audio, &opts, &mut |_, _| true).unwrap();
        let want_text = want["text"].as_str().unwrap().trim();
        if got.text.trim() != want_text {
            failures.push(format!("{name}: {:?} vs {want_text:?}", got.text.trim()));
            continue;
        }
        let segs = want["segments"].as_array().unwrap();
        assert_eq!(segs.len(), got.segments.len(), "{name}");
        for (s, w) in got.segments.iter().zip(segs) {
            let (ws, we) = (w["start"].as_f64().unwrap(), w["end"].as_f64().unwrap());
            assert!(
                (s.start - ws).abs() <= 0.1 && (s.end - we).abs() <= 0.1,
                "{name}: segment {}–{} vs {ws}–{we}",
                s.start,
                s.end
            );
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

use super::tokenizer::Specials;
use super::*;

/// A minimal ggml file: the header, a 1 × 2 filter bank, `words`, then `tensors`
/// (name, ne, type id, value bytes).
fn file_bytes(n_vocab: i32, words: &[&[u8]], tensors: &[(&str, &[i32], i32, Vec<u8>)]) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    for v in [n_vocab, 4, 8, 2, 1, 4, 8, 2, 1, 2, 1] {
        b.extend(v.to_le_bytes());
    }
    b.extend(1i32.to_le_bytes());
    b.extend(2i32.to_le_bytes());
    b.extend([0u8; 8]);
    b.extend((words.len() as i32).to_le_bytes());
    for w in words {
        b.extend((w.len() as u32).to_le_bytes());
        b.extend(*w);
    }
    for (name, ne, ty, data) in tensors {
        b.extend((ne.len() as i32).to_le_bytes());
        b.extend((name.len() as i32).to_le_bytes());
        b.extend(ty.to_le_bytes());
        for d in *ne {
            b.extend(d.to_le_bytes());
        }
        b.extend(name.as_bytes());
        b.extend(data);
    }
    b
}

fn parse(bytes: Vec<u8>) -> Result<GgmlWhisperFile> {
    GgmlWhisperFile::from_bytes(Arc::new(bytes), "test.bin")
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn reads_records_and_reverses_ne() {
    let w = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let bytes = file_bytes(
        3,
        &[b"a", b"bc"],
        &[
            ("encoder.blocks.0.mlp.0.weight", &[3, 2], 0, w),
            ("encoder.conv1.bias", &[1, 2], 0, f32_bytes(&[7.0, 8.0])),
        ],
    );
    let f = parse(bytes).unwrap();
    assert_eq!(f.hparams().n_vocab, 3);
    assert_eq!(f.hparams().n_mels, 2);
    assert_eq!(f.words().collect::<Vec<_>>(), vec![&b"a"[..], &b"bc"[..]]);
    assert_eq!(f.tensors()[0].dims, vec![2, 3]);
    let weights = GgmlWhisperWeights::new(f).unwrap();
    let t = weights.tensor("model.encoder.layers.0.fc1.weight").unwrap();
    assert_eq!(t.dims(), &[2, 3]);
    assert_eq!(t.to_f32_vec().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = weights.tensor("model.encoder.conv1.bias").unwrap();
    assert_eq!(b.dims(), &[2]);
    assert_eq!(b.to_f32_vec().unwrap(), vec![7.0, 8.0]);
}

#[test]
fn every_truncation_and_many_byte_flips_are_errors_not_panics() {
    let bytes = file_bytes(
        3,
        &[b"a", b"bc"],
        &[
            (
                "decoder.blocks.0.cross_attn.query.weight",
                &[2, 2],
                1,
                vec![0; 8],
            ),
            ("decoder.ln.bias", &[2], 0, f32_bytes(&[1.0, 2.0])),
        ],
    );
    assert!(parse(bytes.clone()).is_ok());
    for cut in 0..bytes.len() {
        let short = bytes[..cut].to_vec();
        // A cut exactly between two tensor records is a valid, shorter file.
        if let Err(e) = parse(short) {
            assert!(matches!(e, Error::Format { .. }), "{e}");
        }
    }
    for at in 0..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[at] ^= flip;
            if let Ok(f) = parse(b) {
                let _ = GgmlWhisperWeights::new(f).and_then(|w| {
                    let names: Vec<String> = w.infos().iter().map(|i| i.name.clone()).collect();
                    names.iter().try_for_each(|n| w.tensor(n).map(|_| ()))
                });
            }
        }
    }
}

#[test]
fn refuses_what_is_not_whisper() {
    let unknown = file_bytes(
        3,
        &[],
        &[("encoder.blocks.0.mystery.weight", &[2], 0, vec![0; 8])],
    );
    let e = GgmlWhisperWeights::new(parse(unknown).unwrap()).unwrap_err();
    assert!(e.to_string().contains("mystery"), "{e}");
    let cross_in_encoder = file_bytes(
        3,
        &[],
        &[(
            "encoder.blocks.0.cross_attn.query.weight",
            &[2],
            0,
            vec![0; 8],
        )],
    );
    assert!(GgmlWhisperWeights::new(parse(cross_in_encoder).unwrap()).is_err());
    let ragged_quant = file_bytes(3, &[], &[("decoder.ln.bias", &[16], 8, vec![0; 34])]);
    let e = parse(ragged_quant).unwrap_err();
    assert!(e.to_string().contains("Q8_0"), "{e}");
    let twice = file_bytes(
        3,
        &[],
        &[
            ("decoder.ln.bias", &[1], 0, vec![0; 4]),
            ("decoder.ln.bias", &[1], 0, vec![0; 4]),
        ],
    );
    assert!(parse(twice).unwrap_err().to_string().contains("twice"));
    let mut big_vocab = file_bytes(3, &[], &[]);
    // n_words (after the 48-byte header and the 16-byte filter bank) larger than n_vocab.
    big_vocab[4 + 44 + 16..4 + 44 + 16 + 4].copy_from_slice(&1000i32.to_le_bytes());
    assert!(parse(big_vocab).is_err());
    let mut negative = file_bytes(3, &[], &[]);
    negative[4..8].copy_from_slice(&(-5i32).to_le_bytes());
    assert!(parse(negative).unwrap_err().to_string().contains("n_vocab"));
}

#[test]
fn special_ids_follow_whisper_cpp() {
    // tiny.en / base.en …: GPT-2's 50257 tokens, then the specials.
    let en = Specials::of(51864).unwrap();
    assert_eq!(
        (en.eot, en.sot, en.translate, en.languages),
        (50256, 50257, 50357, 99)
    );
    // Multilingual tiny … large-v2.
    let m = Specials::of(51865).unwrap();
    assert_eq!(
        (m.eot, m.sot, m.translate, m.languages),
        (50257, 50258, 50358, 99)
    );
    // large-v3 and large-v3-turbo (<|yue|>).
    let v3 = Specials::of(51866).unwrap();
    assert_eq!(
        (v3.eot, v3.sot, v3.translate, v3.languages),
        (50257, 50258, 50359, 100)
    );
    assert!(Specials::of(120).is_none());
    assert!(Specials::of(60000).is_none());
}

#[test]
fn openai_names_map_to_transformers_names() {
    for (a, b) in [
        (
            "encoder.blocks.3.attn.key.weight",
            "model.encoder.layers.3.self_attn.k_proj.weight",
        ),
        (
            "decoder.blocks.1.cross_attn.out.bias",
            "model.decoder.layers.1.encoder_attn.out_proj.bias",
        ),
        (
            "decoder.blocks.0.cross_attn_ln.weight",
            "model.decoder.layers.0.encoder_attn_layer_norm.weight",
        ),
        (
            "encoder.blocks.0.mlp.2.weight",
            "model.encoder.layers.0.fc2.weight",
        ),
        (
            "decoder.blocks.2.mlp_ln.bias",
            "model.decoder.layers.2.final_layer_norm.bias",
        ),
        ("encoder.ln_post.weight", "model.encoder.layer_norm.weight"),
        (
            "decoder.positional_embedding",
            "model.decoder.embed_positions.weight",
        ),
    ] {
        assert_eq!(hf_name(a).as_deref(), Some(b), "{a}");
    }
    assert_eq!(hf_name("encoder.blocks.x.attn.key.weight"), None);
    assert_eq!(hf_name("decoder.blocks.0.attn.key.scale"), None);
}

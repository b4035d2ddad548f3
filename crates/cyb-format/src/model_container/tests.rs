use super::writer::write_to;
use super::*;
use cyb_tensor::Error;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

fn import(src: &Path) -> Vec<u8> {
    let m = crate::open(src).unwrap();
    let mut out = Vec::new();
    write_to(&m, &mut out, &WriteOptions::default(), &mut |_| {}).unwrap();
    out
}

fn parse(b: Vec<u8>) -> Result<ModelFile> {
    from_bytes(Arc::new(b), "t.model")
}

fn reason(e: Error) -> String {
    match e {
        Error::Format { reason, .. } => reason,
        other => panic!("expected a Format error, got {other}"),
    }
}

#[test]
fn gguf_metadata_and_tensors_survive() {
    let src = fixture("format/tiny.gguf");
    let bytes = import(&src);
    let orig = crate::open(&src).unwrap();
    let m = parse(bytes.clone()).unwrap();
    assert_eq!(m.format_name(), "model");
    let (ModelFile::Gguf(a), ModelFile::Gguf(b)) = (&orig, &m) else {
        panic!("not GGUF")
    };
    let mut am = a.metadata().to_vec();
    let mut bm = b.metadata().to_vec();
    am.sort_by(|x, y| x.0.cmp(&y.0));
    bm.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(am, bm);
    assert_eq!(orig.tensors().len(), m.tensors().len());
    for t in orig.tensors() {
        let u = m.tensors().into_iter().find(|u| u.name == t.name).unwrap();
        assert_eq!(
            (&t.type_name, &t.shape, t.byte_len),
            (&u.type_name, &u.shape, u.byte_len)
        );
        assert_eq!(u.offset % 64, 0);
        let (x, y) = (orig.tensor(&t.name), m.tensor(&t.name));
        if let (Ok(x), Ok(y)) = (x, y) {
            assert_eq!(
                x.host_bytes().unwrap(),
                y.host_bytes().unwrap(),
                "{}",
                t.name
            );
        }
    }
    m.verify().unwrap();
    // Deterministic: importing twice gives the same bytes and root.
    assert_eq!(bytes, import(&src));
}

#[test]
fn every_truncation_is_a_named_error() {
    let bytes = import(&fixture("format/tiny.gguf"));
    for cut in 0..bytes.len() {
        let e = parse(bytes[..cut].to_vec()).expect_err(&format!("cut at {cut}"));
        assert!(!reason(e).is_empty());
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(reason(parse(longer).unwrap_err()).contains("tensor data ends"));
}

#[test]
fn flipped_bytes_never_panic_and_data_flips_fail_verify_naming_the_tensor() {
    let bytes = import(&fixture("format/tiny.gguf"));
    let m = parse(bytes.clone()).unwrap();
    let info = m.container().unwrap();
    let (data_start, first) = (info.data_start, info.tensors[0].clone());
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut b = bytes.clone();
            b[i] ^= bit;
            match parse(b) {
                Ok(m) if i >= data_start => {
                    let e = reason(m.verify().unwrap_err());
                    assert!(e.contains("blake3"), "{e}");
                }
                // A flip inside a header string (metadata text) can still parse; the root
                // changes and verify names the section.
                Ok(m) => {
                    assert_ne!(m.container().unwrap().root, info.root, "byte {i}");
                    let e = reason(m.verify().unwrap_err());
                    assert!(e.contains("section"), "byte {i}: {e}");
                }
                Err(e) => assert!(!reason(e).is_empty()),
            }
        }
    }
    let mut b = bytes.clone();
    b[first.file_offset] ^= 1;
    let e = reason(parse(b).unwrap().verify().unwrap_err());
    assert!(e.contains(&format!("{:?}", first.name)), "{e}");
}

#[test]
fn verify_covers_every_section() {
    // A Hugging Face import has a vocab section (tokenizer.json's bytes).
    let bytes = import(&fixture("tiny_chat/hf"));
    let m = parse(bytes.clone()).unwrap();
    m.verify().unwrap();
    let info = m.container().unwrap();
    let (at, len) = info
        .sections
        .iter()
        .find(|(n, _, _)| *n == "vocab")
        .map(|&(_, a, l)| (a, l))
        .unwrap();
    // Four bytes flipped in the middle of the vocab (inside a JSON string, so it still parses).
    let mut b = bytes.clone();
    let span = (at + len / 2..at + len - 4)
        .chain(at..at + len - 4)
        .find(|&i| b[i..i + 4].iter().all(|c| c.is_ascii_lowercase()))
        .expect("four letters in the vocab");
    for c in &mut b[span..span + 4] {
        *c ^= 0x20;
    }
    let e = reason(parse(b).unwrap().verify().unwrap_err());
    assert!(e.contains("\"vocab\"") && e.contains("blake3"), "{e}");
    // A file written before the check section existed cannot be verified.
    let cfg = "source = \"gguf\"\ngguf_version = 3\n";
    let old = header_with(cfg, "");
    let e = reason(parse(old).unwrap().verify().unwrap_err());
    assert!(e.contains("no \"check\" section"), "{e}");
}

fn header_with(config: &str, tensors: &str) -> Vec<u8> {
    let mut h = format!(
        "cyb-model 1\n~~~config {}\n{config}\n~~~tensors {}\n{tensors}\n~~~end\n",
        config.len(),
        tensors.len()
    )
    .into_bytes();
    h.resize(h.len().div_ceil(64) * 64, 0);
    h
}

#[test]
fn hostile_headers_are_refused_with_reasons() {
    let cfg = "source = \"gguf\"\ngguf_version = 3\n";
    let zero_hash = "0".repeat(64);
    let ok_line = format!("w F32 [2] 0 8 {zero_hash}\n");
    let mut good = header_with(cfg, &ok_line);
    good.extend_from_slice(&[0; 8]);
    parse(good.clone()).unwrap();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"cyb-model 2\n".to_vec(), "version 2"),
        (b"cyb-model 01\n".to_vec(), "malformed"),
        (b"cyb-model 1\n~~~config 99999999999999999999\n".to_vec(), "bad length"),
        (b"cyb-model 1\n~~~config 18446744073709551615\n".to_vec(), "runs past"),
        (b"cyb-model 1\n~~~weights 0\n\n~~~end\n".to_vec(), "unknown section"),
        (b"cyb-model 1\n~~~tensors 0\n\n~~~config 0\n\n~~~end\n".to_vec(), "out of order"),
        (b"cyb-model 1\n~~~config 0\n\n~~~config 0\n\n~~~end\n".to_vec(), "repeated"),
        (b"cyb-model 1\n~~~config 0\n\n~~~end\n".to_vec(), "\"tensors\" is missing"),
        (header_with("source = 1", ""), "source"),
        (header_with("source = \"gguf\"", ""), "gguf_version"),
        (header_with("[[[", ""), "invalid TOML"),
        (header_with(cfg, &format!("w F32 [3] 0 8 {zero_hash}\n")), "not the size"),
        (header_with(cfg, &format!("w F32 [2] 64 8 {zero_hash}\n")), "runs past"),
        (header_with(cfg, &format!("w F32 [2] 8 8 {zero_hash}\n")), "multiple of 64"),
        (header_with(cfg, &format!("w F33 [2] 0 8 {zero_hash}\n")), "unknown dtype"),
        (header_with(cfg, &format!("w F32 [0] 0 0 {zero_hash}\n")), "bad dimension"),
        (header_with(cfg, &format!("w Q8_0 [16] 0 17 {zero_hash}\n")), "block size"),
        (
            header_with(cfg, &format!("w F32 [4294967296,4294967296,16] 0 8 {zero_hash}\n")),
            "overflows",
        ),
        (
            [header_with(cfg, "w F32 [2] 0 8 xyz\n"), vec![0; 8]].concat(),
            "bad blake3",
        ),
        (header_with(cfg, "w F32 [2] 0 8\n"), "6 fields"),
        (
            [header_with(cfg, &format!("{ok_line}{ok_line}")), vec![0; 8]].concat(),
            "listed twice",
        ),
        (
            header_with(
                "source = \"gguf\"\ngguf_version = 3\n[[metadata]]\nkey = \"a\"\ntype = \"u8\"\nvalue = 300\n",
                "",
            ),
            "not a u8",
        ),
        (
            header_with("source = \"huggingface\"\nconfig_json = \"[1]\"\n", ""),
            "not a JSON object",
        ),
    ];
    for (bytes, want) in cases {
        let e = reason(parse(bytes.clone()).unwrap_err());
        assert!(
            e.contains(want),
            "{:?}: {e} (wanted {want:?})",
            String::from_utf8_lossy(&bytes)
        );
    }
}

#[test]
fn sharded_hf_dir_round_trips_and_truncations_fail() {
    let src = fixture("format/hf_sharded");
    let orig = crate::open(&src).unwrap();
    let bytes = import(&src);
    let m = parse(bytes.clone()).unwrap();
    let ModelFile::HuggingFace(h) = &m else {
        panic!("not a Hugging Face model")
    };
    assert_eq!(h.generation_config, orig_hf(&orig).generation_config);
    assert_eq!(h.tokenizer_config, orig_hf(&orig).tokenizer_config);
    assert_eq!(m.config().unwrap(), orig.config().unwrap());
    for t in orig.tensors() {
        let (a, b) = (orig.tensor(&t.name).unwrap(), m.tensor(&t.name).unwrap());
        assert_eq!((a.shape(), a.dtype()), (b.shape(), b.dtype()), "{}", t.name);
        assert_eq!(
            a.host_bytes().unwrap(),
            b.host_bytes().unwrap(),
            "{}",
            t.name
        );
    }
    m.verify().unwrap();
    for cut in (0..bytes.len()).step_by(7) {
        assert!(!reason(parse(bytes[..cut].to_vec()).unwrap_err()).is_empty());
    }
}

fn orig_hf(m: &ModelFile) -> &HfModel {
    match m {
        ModelFile::HuggingFace(h) => h,
        ModelFile::Gguf(_) => panic!("not a Hugging Face model"),
    }
}

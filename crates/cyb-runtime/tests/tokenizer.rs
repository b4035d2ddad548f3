//! Token ids against the reference tokenizers (tests/fixtures/tokenizer/, made by
//! tools/fixtures/make_tokenizer_fixtures.py): a tiny SentencePiece model written as GGUF vs
//! transformers' LlamaTokenizer, a Hugging Face directory vs the `tokenizers` Python package,
//! and the real SmolLM2 GGUF vs transformers reading the same file.
//!
//! The SmolLM2 test is skipped without the file (tools/fetch_smollm2.sh), except under CI
//! (env `CI` set), where it fails.

mod common;

use cyb_runtime::Tokenizer;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tokenizer")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("ids array")
        .iter()
        .map(|i| u32::try_from(i.as_u64().expect("id")).expect("u32 id"))
        .collect()
}

fn load(path: &Path) -> Tokenizer {
    let model = cyb_format::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_model_file(&model).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every case: ids with and without special tokens, decode with and without skipping them,
/// streaming decode equal to full decode, and the round trip wherever the reference has it.
fn check_cases(tok: &Tokenizer, expected: &Value) {
    let cases = expected["cases"].as_array().expect("cases");
    assert!(cases.len() >= 20, "corpus too small");
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let want = ids(&case["ids"]);
        let got = tok.encode(text, false).expect("encode");
        if got != want {
            failures.push(format!("{text:?}: got {got:?}, want {want:?}"));
            continue;
        }
        let got_special = tok.encode(text, true).expect("encode");
        if got_special != ids(&case["ids_add_special"]) {
            failures.push(format!(
                "{text:?} with special tokens: got {got_special:?}, want {:?}",
                ids(&case["ids_add_special"])
            ));
        }
        let decoded = tok.decode(&want, false).expect("decode");
        if decoded != case["decoded"].as_str().expect("decoded") {
            failures.push(format!(
                "decode {text:?}: got {decoded:?}, want {}",
                case["decoded"]
            ));
        }
        let skipped = tok.decode(&want, true).expect("decode");
        if skipped != case["decoded_skip_special"].as_str().expect("decoded") {
            failures.push(format!(
                "decode skipping specials {text:?}: got {skipped:?}, want {}",
                case["decoded_skip_special"]
            ));
        }
        if case["decoded"] == case["text"] && decoded != text {
            failures.push(format!("round trip {text:?} gave {decoded:?}"));
        }
        for skip in [false, true] {
            let mut stream = tok.incremental_decoder(skip);
            let mut streamed = String::new();
            for &id in &want {
                streamed += &stream.push(id).expect("push");
            }
            streamed += &stream.finish().expect("finish");
            let full = tok.decode(&want, skip).expect("decode");
            if streamed != full {
                failures.push(format!(
                    "stream {text:?} (skip {skip}): {streamed:?} vs {full:?}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn sentencepiece_gguf_matches_transformers() {
    let dir = fixtures().join("spm");
    let expected = read_json(&dir.join("expected.json"));
    let tok = load(&dir.join("tiny-spm.gguf"));
    assert_eq!(
        tok.vocab_size() as u64,
        expected["vocab_size"].as_u64().unwrap()
    );
    assert_eq!(tok.bos_id().map(u64::from), expected["bos_id"].as_u64());
    // eos, then <|im_end|>: a control token that ends a chat turn stops generation too.
    let im_end = tok.token_id("<|im_end|>").expect("<|im_end|>");
    assert_eq!(
        tok.eos_ids(),
        [expected["eos_id"].as_u64().unwrap() as u32, im_end]
    );
    assert!(tok.add_bos());
    assert_eq!(tok.token_text(2).as_deref(), Some("</s>"));
    assert!(
        tok.token_id("<0x0A>").is_some(),
        "byte-fallback tokens in the vocabulary"
    );
    assert_eq!(tok.token_text(tok.vocab_size() as u32), None);
    check_cases(&tok, &expected);
}

#[test]
fn hf_directory_matches_tokenizers() {
    let dir = fixtures().join("hf_bpe");
    let expected = read_json(&dir.join("expected.json"));
    let tok = load(&dir);
    assert_eq!(
        tok.vocab_size() as u64,
        expected["vocab_size"].as_u64().unwrap()
    );
    assert_eq!(tok.bos_id().map(u64::from), expected["bos_id"].as_u64());
    assert_eq!(tok.eos_ids(), ids(&expected["eos_ids"]));
    assert!(tok.add_bos());
    check_cases(&tok, &expected);
}

#[test]
fn smollm2_gguf_matches_transformers() {
    let Some(path) = common::smollm2() else {
        return;
    };
    let expected = read_json(&fixtures().join("smollm2.json"));
    let tok = load(&path);
    assert_eq!(
        tok.vocab_size() as u64,
        expected["vocab_size"].as_u64().unwrap()
    );
    assert_eq!(tok.bos_id().map(u64::from), expected["bos_id"].as_u64());
    let eos = expected["eos_id"].as_u64().unwrap() as u32;
    assert_eq!(tok.eos_ids().first(), Some(&eos));
    assert!(!tok.add_bos());
    assert_eq!(tok.token_text(1).as_deref(), Some("<|im_start|>"));
    check_cases(&tok, &expected);
}

/// Gemma (merges in token order, spaces by normalizer) and Phi-3 (prefix space by normalizer)
/// read the same SentencePiece vocabulary differently.
#[test]
fn sentencepiece_architecture_variants_match_transformers() {
    let dir = fixtures().join("spm");
    for arch in ["gemma2", "phi3"] {
        let expected = read_json(&dir.join(format!("expected-{arch}.json")));
        let tok = load(&dir.join(format!("tiny-spm-{arch}.gguf")));
        assert!(tok.add_bos(), "{arch}");
        check_cases(&tok, &expected);
    }
}

//! Malformed tokenizer.json files found by the `tokenizer_json` fuzz target
//! (tests/fixtures/tokenizer/hostile): the tokenizers library panics on each, while loading or
//! while encoding; here each is an error, never a panic out of our API.

use cyb_runtime::tokenizer::Tokenizer;
use std::path::Path;

fn hostile(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tokenizer/hostile")
        .join(name)
}

#[test]
fn a_decoder_that_does_not_parse_is_a_load_error() {
    let Err(e) = Tokenizer::from_tokenizer_json(&hostile("decoder_key_not_a_string.json")) else {
        panic!("loaded");
    };
    let msg = e.to_string();
    assert!(msg.contains("decoder_key_not_a_string.json"), "{msg}");
}

#[test]
fn a_template_naming_a_missing_special_token_is_an_encode_error() {
    let path = hostile("template_names_missing_special_token.json");
    match Tokenizer::from_tokenizer_json(&path) {
        Err(e) => assert!(e.to_string().contains("template_names"), "{e}"),
        Ok(t) => {
            let Err(e) = t.encode("Hello", true) else {
                panic!("encoded");
            };
            assert!(e.to_string().contains("malformed"), "{e}");
            // Without special tokens the template is not used.
            assert!(t.encode("Hello", false).is_ok());
        }
    }
}

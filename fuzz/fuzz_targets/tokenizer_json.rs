//! Arbitrary bytes as a tokenizer.json, loaded as a model directory's tokenizer is (the
//! `tokenizers` crate's parser, then the special-token and vocabulary probes), then a short
//! text encoded and decoded with whatever loaded. Must return Ok or Err, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The loader turns a panic inside the tokenizers library into an error (catch_unwind);
    // libfuzzer-sys's hook would abort on it first, so panics are left to unwind: one that
    // escapes our code still ends the run, through the harness's own catch.
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| std::panic::set_hook(Box::new(|info| eprintln!("panic: {info}"))));
    // The loader reads a file: one per fuzzing process, rewritten for each input.
    let path = std::env::temp_dir().join(format!("cyb-fuzz-tokenizer-{}.json", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    if let Ok(t) = cyb_runtime::tokenizer::Tokenizer::from_tokenizer_json(&path) {
        if let Ok(ids) = t.encode("Hello, world! 123 \u{1F600}", true) {
            let _ = t.decode(&ids, false);
        }
    }
});

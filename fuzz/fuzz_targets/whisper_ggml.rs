//! Arbitrary bytes through the whisper.cpp ggml reader, its Whisper view and the tokenizer
//! made from its word list: Ok or Err, never a panic, and every tensor of an accepted model
//! readable.
#![no_main]

use cyb_format::whisper_ggml::{self, GgmlWhisperFile};
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgmlWhisperFile::from_bytes(Arc::new(data.to_vec()), "ggml.bin") else {
        return;
    };
    let _ = whisper_ggml::tokenizer_json(&f);
    let Ok(h) = whisper_ggml::from_file(f) else {
        return;
    };
    let infos: Vec<_> = h.tensor_infos().map(|(t, _)| t.clone()).collect();
    for t in infos {
        let tensor = h.tensor(&t.name).expect("an accepted tensor must be readable");
        assert_eq!(tensor.byte_len(), t.byte_len);
        let _ = tensor.to_f32_vec();
    }
});

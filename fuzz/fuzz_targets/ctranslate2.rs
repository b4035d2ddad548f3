//! Arbitrary bytes through the CTranslate2 `model.bin` reader and its Whisper view: Ok or Err,
//! never a panic, and every tensor of an accepted model readable.
#![no_main]

use cyb_format::{ctranslate2, Ct2File};
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = Ct2File::from_bytes(Arc::new(data.to_vec()), "model.bin") else {
        return;
    };
    for v in f.variables() {
        assert_eq!(f.data(v).len(), v.byte_len);
    }
    // No files beside it: only model.bin is read.
    let Ok(h) = ctranslate2::from_file(f, Path::new("/nonexistent-fuzz-dir")) else {
        return;
    };
    let infos: Vec<_> = h.tensor_infos().map(|(t, _)| t.clone()).collect();
    for t in infos {
        let tensor = h.tensor(&t.name).expect("an accepted tensor must be readable");
        assert_eq!(tensor.byte_len(), t.byte_len);
        let _ = tensor.to_f32_vec();
    }
});

//! Arbitrary bytes through the GGUF parser: it must return Ok or Err, never panic, and every
//! tensor it accepts must be readable in place, unless its ggml type has no DType in this build,
//! which must then be refused as such.
#![no_main]

use cyb_format::GgufFile;
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_bytes(Arc::new(data.to_vec()), "fuzz.gguf") else {
        return;
    };
    let _ = cyb_format::ModelConfig::from_gguf(&f);
    for (_, v) in f.metadata() {
        let _ = v.summary();
    }
    for t in f.tensor_infos() {
        if t.dtype.is_none() {
            let refused = f.tensor(&t.name).err().map(|e| e.to_string());
            assert!(refused.is_some_and(|e| e.contains("cannot compute with")));
            continue;
        }
        let tensor = f.tensor(&t.name).expect("an accepted tensor must be readable");
        assert_eq!(tensor.byte_len(), t.byte_len);
        let _ = tensor.to_f32_vec();
    }
});

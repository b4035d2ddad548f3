//! Arbitrary bytes through the safetensors reader used for Hugging Face directories: Ok or
//! Err, never a panic, and every accepted tensor readable in place.
#![no_main]

use cyb_format::SafetensorsFile;
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = SafetensorsFile::from_bytes(Arc::new(data.to_vec()), "fuzz.safetensors") else {
        return;
    };
    for t in f.tensor_infos() {
        let tensor = f.tensor(&t.name).expect("an accepted tensor must be readable");
        assert_eq!(tensor.byte_len(), t.byte_len);
        let _ = tensor.to_f32_vec();
    }
});

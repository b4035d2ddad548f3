//! Arbitrary bytes through the `.model` container reader: Ok or Err, never a panic; every
//! tensor of an accepted file is readable in place (or refused as a type this build cannot
//! compute with), and verification answers either way.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = cyb_format::model_container::from_bytes(Arc::new(data.to_vec()), "fuzz.model")
    else {
        return;
    };
    let _ = m.config();
    let _ = m.metadata();
    let _ = m.verify();
    for t in m.tensors() {
        match m.tensor(&t.name) {
            Ok(tensor) => assert_eq!(tensor.byte_len(), t.byte_len),
            Err(e) => assert!(t.dtype.is_none(), "{}: {e}", t.name),
        }
    }
});

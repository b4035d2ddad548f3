//! Arbitrary bytes through the `.model` container reader: Ok or Err, never a panic; every
//! tensor of an accepted file is readable in place (or refused as a type this build cannot
//! compute with), and verification answers either way. The same bytes go through the graph
//! `.model` reader (graph section parse, constants bound to tensors).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz.model");
    if let Ok(g) = cyb_format::model_container::graph_from_bytes(Arc::new(data.to_vec()), path) {
        let _ = g.info.verify();
    }
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

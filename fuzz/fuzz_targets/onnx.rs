#![no_main]
//! ONNX import on arbitrary bytes: any result is fine, a panic is a bug.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cyb_format::onnx::graph_from_bytes(data, std::path::Path::new("fuzz.onnx"));
});

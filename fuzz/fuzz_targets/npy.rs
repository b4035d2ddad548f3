//! Arbitrary bytes as a `.npy` file (`cyb-llm infer`'s inputs): the header's version, lengths,
//! dict and shape, and the data against the shape. Must return Ok or Err, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cyb_format::npy::parse(data, std::path::Path::new("fuzz.npy"));
});

//! Arbitrary bytes as the multipart/form-data body of an upload to the audio endpoints
//! (`/v1/audio/transcriptions`), read into its fields as the server reads them (axum's
//! multipart parser, then the field rules and size limits). Must return Ok or Err, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a tokio runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    let body = data.to_vec();
    let _ = runtime().block_on(cyb_server::read_audio_form(body, "XyZ", 1 << 20));
});

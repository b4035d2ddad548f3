//! Shared by the tests that need the real default model.

use std::path::PathBuf;

/// The SmolLM2 GGUF (`CYB_SMOLLM2_GGUF`, else the runtime's default model path), or `None` with
/// a skip message when it is absent. Under CI (env `CI` set) a missing file fails the test.
pub fn smollm2() -> Option<PathBuf> {
    let p = std::env::var_os("CYB_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(cyb_runtime::default_model_path);
    if p.is_file() {
        return Some(p);
    }
    let msg = format!(
        "SmolLM2 GGUF not found at {}; run tools/fetch_smollm2.sh (or set CYB_SMOLLM2_GGUF)",
        p.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("skipping: {msg}");
    None
}

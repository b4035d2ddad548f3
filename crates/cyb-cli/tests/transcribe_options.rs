//! `cyb-llm transcribe` options and inputs that need no real model: a bad `--suppress-tokens`
//! list is refused before any model is read, and a whisper.cpp ggml file is recognized by
//! `inspect` (tests/fixtures/whisper_ggml/).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cyb(args: &[&str]) -> (bool, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8(stderr).unwrap();
    assert!(!stderr.contains("panicked"), "cyb-llm {args:?}: {stderr}");
    (status.success(), String::from_utf8(stdout).unwrap(), stderr)
}

#[test]
fn a_bad_suppress_tokens_list_is_refused() {
    let audio = root().join("tests/fixtures/whisper/speech/short.flac");
    for bad in ["abc", "-1,x", "1.5"] {
        let (ok, _, err) = cyb(&[
            "transcribe",
            "no-such-model",
            audio.to_str().unwrap(),
            "--suppress-tokens",
            bad,
        ]);
        assert!(!ok);
        assert!(err.contains("--suppress-tokens"), "{bad}: {err}");
        assert!(!err.contains("no-such-model"), "options come first: {err}");
    }
}

#[test]
fn inspect_reads_a_whisper_cpp_file() {
    let f = root().join("tests/fixtures/whisper_ggml/tiny80-q8_0.bin");
    let (ok, out, err) = cyb(&["inspect", f.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("ggml"), "{out}");
    assert!(out.contains("whisper"), "{out}");
    assert!(
        out.contains("model.decoder.layers.1.encoder_attn.q_proj.weight"),
        "{out}"
    );
    assert!(out.contains("Q8_0"), "{out}");
}

//! `cyb-llm transcribe --vad`: a missing VAD model is an error that says how to get one, and
//! with Silero VAD v5 and Whisper tiny.en in the cache (tools/fetch_silero_vad.sh,
//! tools/fetch_whisper_tiny_en.sh) the silence of silence_middle.flac is skipped with the times
//! of the original audio kept, as faster-whisper's vad_filter gives them
//! (tests/fixtures/vad/reference.json). Those runs skip, with a note, when a model is absent.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn speech(name: &str) -> String {
    root()
        .join("tests/fixtures/whisper/speech")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// Runs cyb-llm with an empty cache, so nothing is found there.
fn cyb(args: &[&str]) -> (bool, String, String) {
    let cache = std::env::temp_dir().join(format!("cyb-vad-cli-{}", std::process::id()));
    std::fs::create_dir_all(&cache).unwrap();
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .args(args)
        .env("CYB_CACHE", &cache)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8(stderr).unwrap();
    assert!(!stderr.contains("panicked"), "cyb-llm {args:?}: {stderr}");
    (status.success(), String::from_utf8(stdout).unwrap(), stderr)
}

fn cached(rel: &str, note: &str) -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from)?;
    let cache = std::env::var_os("CYB_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/cyb-llm"));
    let p = cache.join(rel);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("skipped: {} is absent (run {note})", p.display());
        None
    }
}

#[test]
fn a_missing_vad_model_says_how_to_get_one() {
    // The VAD model is looked for before the Whisper model is loaded.
    let (ok, _, err) = cyb(&[
        "transcribe",
        "no-such-model",
        &speech("hello.flac"),
        "--vad",
    ]);
    assert!(!ok);
    assert!(
        err.contains("tools/fetch_silero_vad.sh") && err.contains("--vad-model"),
        "{err}"
    );
    let (ok, _, err) = cyb(&[
        "transcribe",
        "no-such-model",
        &speech("hello.flac"),
        "--vad-model",
        "/no/such/silero_vad.onnx",
    ]);
    assert!(!ok);
    assert!(err.contains("/no/such/silero_vad.onnx"), "{err}");
}

#[test]
fn vad_keeps_the_original_times() {
    let Some(vad) = cached("silero-vad/silero_vad.onnx", "tools/fetch_silero_vad.sh") else {
        return;
    };
    let Some(whisper) = cached(
        "whisper-tiny.en-ct2/model.bin",
        "tools/fetch_whisper_tiny_en.sh",
    ) else {
        return;
    };
    let whisper = whisper.parent().unwrap().to_string_lossy().into_owned();
    let (ok, out, err) = cyb(&[
        "transcribe",
        &whisper,
        &speech("silence_middle.flac"),
        "--language",
        "en",
        "--vad-model",
        &vad.to_string_lossy(),
        "--format",
        "verbose_json",
    ]);
    assert!(ok, "{err}");
    let got: Value = serde_json::from_str(&out).unwrap();
    let text = std::fs::read_to_string(root().join("tests/fixtures/vad/reference.json")).unwrap();
    let reference: Value = serde_json::from_str(&text).unwrap();
    let want = &reference["transcripts"]["silence_middle.flac"]["beam5"];
    assert_eq!(got["text"], want["text"]);
    let (g, w) = (&got["segments"][0], &want["segments"][0]);
    for key in ["start", "end"] {
        let (a, b) = (g[key].as_f64().unwrap(), w[key].as_f64().unwrap());
        assert!((a - b).abs() <= 0.1, "{key}: {a} vs faster-whisper {b}");
    }
    assert!((got["duration"].as_f64().unwrap() - 25.995375).abs() < 1e-3);
}

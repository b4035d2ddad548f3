//! Limits checked before work: a context past the trained one, or one whose KV cache cannot
//! fit in memory, is refused at once with the numbers, not after allocating.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny_chat/model-f32.gguf")
}

fn cyb(args: &[&str]) -> (bool, String, Duration) {
    let t0 = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    (out.status.success(), stderr, t0.elapsed())
}

#[test]
fn contexts_are_checked_before_anything_is_sized() {
    let model = tiny();
    let model = model.to_str().unwrap();
    let (ok, err, took) = cyb(&["run", model, "--ctx", "1000000", "-n", "1", "hi"]);
    assert!(!ok);
    assert!(
        err.contains("trained for") && err.contains("--ctx-overflow"),
        "{err}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    let (ok, err, _) = cyb(&[
        "run",
        model,
        "--ctx",
        "10000000000",
        "--ctx-overflow",
        "allow",
        "-n",
        "1",
        "hi",
    ]);
    assert!(!ok);
    assert!(
        err.contains("out of memory") && err.contains("MiB"),
        "{err}"
    );
    // Past the trained context when asked: it runs.
    let (ok, err, _) = cyb(&[
        "run",
        model,
        "--ctx",
        "512",
        "--ctx-overflow",
        "allow",
        "-n",
        "2",
        "hi",
    ]);
    assert!(ok, "{err}");
}

/// A huge line for an encoder is refused (or cut, with --truncate) before it is tokenized.
/// Uses all-MiniLM-L6-v2 from the cache (tools/fetch_minilm.sh); skipped when absent.
#[test]
fn a_huge_embedding_input_is_bounded_before_tokenizing() {
    let Some(home) = std::env::var_os("HOME").map(PathBuf::from) else {
        return;
    };
    let model = home.join(".cache/cyb-llm/minilm/all-MiniLM-L6-v2");
    if !model.is_dir() {
        eprintln!(
            "skipped: {} is absent (run tools/fetch_minilm.sh)",
            model.display()
        );
        return;
    }
    let file = std::env::temp_dir().join(format!("cyb-huge-line-{}.txt", std::process::id()));
    std::fs::write(&file, "word ".repeat(10_000_000)).unwrap();
    let (m, f) = (model.to_str().unwrap(), file.to_str().unwrap());
    let (ok, err, took) = cyb(&["embed", m, "--file", f]);
    assert!(!ok);
    assert!(
        err.contains("bytes long") && err.contains("--truncate"),
        "{err}"
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
    let (ok, err, took) = cyb(&["embed", m, "--file", f, "--truncate"]);
    assert!(ok, "{err}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    let _ = std::fs::remove_file(&file);
}

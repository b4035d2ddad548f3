//! `cyb-llm import` end to end on the tiny chat model (tests/fixtures/tiny_chat, reference.json
//! from transformers via tools/fixtures/make_tiny_chat_fixture.py): the `.model` written from the
//! GGUF file and from the Hugging Face directory answers exactly like transformers (so the
//! tokenizer, chat template and weights all came through), `inspect` shows the root that
//! `import` printed, and a corrupted file is refused naming the tensor.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny_chat")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cyb-import-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// (success, stdout, stderr); never a panic.
fn cyb(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .args(args)
        .env("CYB_CACHE", scratch("cache"))
        .env("XDG_CACHE_HOME", scratch("xdg"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains("panicked"), "{args:?} panicked:\n{stderr}");
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        stderr,
    )
}

fn expected_answer() -> (String, String) {
    let text = std::fs::read_to_string(fixture("reference.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    let prompt = r["chat"]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    // The answer stops at eos, which `run` does not print.
    let text = r["chat"]["greedy_stop_at_eos"]["text"].as_str().unwrap();
    (prompt, text.strip_suffix("<|im_end|>").unwrap().to_string())
}

#[test]
fn imported_models_answer_like_the_reference_and_show_their_root() {
    let (prompt, want) = expected_answer();
    for (src, name) in [
        ("model-f32.gguf", "from_gguf.model"),
        ("hf", "from_hf.model"),
    ] {
        let out = scratch(name);
        let out_s = out.to_string_lossy().into_owned();
        let (ok, stdout, stderr) = cyb(&["import", &fixture(src), "-o", &out_s]);
        assert!(ok, "{src}: {stderr}");
        let root = stdout.split_whitespace().next().unwrap().to_string();
        assert_eq!(root.len(), 64, "{stdout}");

        let (ok, stdout, stderr) =
            cyb(&["run", &out_s, &prompt, "--temp", "0", "-n", "8", "--verify"]);
        assert!(ok, "{src}: {stderr}");
        assert_eq!(stdout, format!("{want}\n"), "{src}");

        let (ok, stdout, stderr) = cyb(&["inspect", "--verify", "--json", &out_s]);
        assert!(ok, "{src}: {stderr}");
        let j: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(j["root"].as_str(), Some(root.as_str()));
        assert_eq!(j["format"].as_str(), Some("model"));

        // Flip one byte of the last tensor: inspect still lists it, --verify names it.
        let mut bytes = std::fs::read(&out).unwrap();
        let last = j["tensors"].as_array().unwrap().last().unwrap().clone();
        let at = last["offset"].as_u64().unwrap() as usize;
        bytes[at] ^= 0x10;
        let bad = scratch(&format!("bad_{name}"));
        std::fs::write(&bad, &bytes).unwrap();
        let bad_s = bad.to_string_lossy().into_owned();
        assert!(cyb(&["inspect", &bad_s]).0);
        let (ok, _, stderr) = cyb(&["inspect", "--verify", &bad_s]);
        assert!(!ok);
        let tensor = last["name"].as_str().unwrap();
        assert!(
            stderr.contains(tensor) && stderr.contains("blake3"),
            "{stderr}"
        );
    }
}

#[test]
fn import_refuses_bad_arguments() {
    let out = scratch("x.model").to_string_lossy().into_owned();
    let (ok, _, stderr) = cyb(&["import", &fixture("hf"), "-o", &out, "--quant", "F16"]);
    assert!(!ok && stderr.contains("not a quantized type"), "{stderr}");
    let (ok, _, stderr) = cyb(&["import", &fixture("nope"), "-o", &out]);
    assert!(!ok && stderr.contains("nope"), "{stderr}");
}

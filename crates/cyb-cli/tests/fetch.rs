//! `cyb-llm fetch` and `cyb-llm models` end to end against the in-process fake hub of
//! crates/cyb-hub/tests/support, and the commands that take a model accepting a cached repo id.
//! The served model is the tiny chat fixture (tests/fixtures/tiny_chat, made by
//! tools/fixtures/make_tiny_chat_fixture.py), so `run` through the repo id must answer exactly
//! as `run` on the fixture file does.

#[path = "../../cyb-hub/tests/support/fake_hub.rs"]
mod fake_hub;

use fake_hub::{random_bytes, Behavior, FakeFile, FakeHub, FakeRepo};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const COMMIT: &str = "feedfacefeedfacefeedfacefeedfacefeedface";

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

fn chat_repo() -> FakeRepo {
    FakeRepo {
        repo: "org/tiny-chat".into(),
        commit: COMMIT.into(),
        files: vec![
            FakeFile::new(
                "model-f32.gguf",
                std::fs::read(fixture("tiny_chat/model-f32.gguf")).unwrap(),
                true,
            ),
            FakeFile::new("README.md", b"tiny chat model\n".to_vec(), false),
            FakeFile::new("extra.bin", random_bytes(50_000, 7), true),
        ],
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cyb-cli-fetch-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs cyb-llm with the hub at `endpoint`, the hub cache in `cache` and no user settings.
fn cyb(args: &[&str], endpoint: &str, cache: &Path, token: Option<&str>) -> Ran {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cyb-llm"));
    cmd.args(args)
        .env("HF_ENDPOINT", endpoint)
        .env("HF_HUB_CACHE", cache)
        .env("CYB_CACHE", cache.join("cyb"))
        .env_remove("HF_HOME")
        .env_remove("HF_TOKEN")
        .env_remove("HUGGING_FACE_HUB_TOKEN")
        .env_remove("RUST_LOG");
    if let Some(t) = token {
        cmd.env("HF_TOKEN", t);
    }
    let out = cmd.output().unwrap();
    let ran = Ran {
        ok: out.status.success(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    assert!(
        !ran.stderr.contains("panicked"),
        "{args:?}:\n{}",
        ran.stderr
    );
    ran
}

#[test]
fn fetch_then_run_inspect_and_models_by_repo_id() {
    let hub = FakeHub::start(vec![chat_repo()], Behavior::default());
    let cache = scratch("flow");
    let f = cyb(
        &[
            "fetch",
            "org/tiny-chat",
            "--include",
            "*.gguf",
            "--include",
            "README*",
        ],
        &hub.url,
        &cache,
        None,
    );
    assert!(f.ok, "{}", f.stderr);
    let snap = cache.join("models--org--tiny-chat/snapshots").join(COMMIT);
    assert_eq!(f.stdout.trim(), snap.display().to_string());
    assert!(snap.join("model-f32.gguf").is_file() && !snap.join("extra.bin").exists());
    assert_eq!(
        std::fs::read_to_string(cache.join("models--org--tiny-chat/refs/main")).unwrap(),
        COMMIT
    );

    // The repo id stands for the snapshot's one GGUF file.
    let direct = fixture("tiny_chat/model-f32.gguf").display().to_string();
    let by_id = cyb(
        &["inspect", "org/tiny-chat", "--json"],
        &hub.url,
        &cache,
        None,
    );
    let by_path = cyb(&["inspect", &direct, "--json"], &hub.url, &cache, None);
    assert!(by_id.ok && by_path.ok, "{}{}", by_id.stderr, by_path.stderr);
    let (a, b): (Value, Value) = (
        serde_json::from_str(&by_id.stdout).unwrap(),
        serde_json::from_str(&by_path.stdout).unwrap(),
    );
    // Same tensors (names, types, shapes, offsets); only the file they point into differs.
    let tensors = |v: &Value| -> Vec<String> {
        let list = v["tensors"].as_array().unwrap();
        list.iter()
            .map(|t| {
                format!(
                    "{} {} {} {}",
                    t["name"], t["dtype"], t["shape"], t["offset"]
                )
            })
            .collect()
    };
    assert!(!tensors(&a).is_empty());
    assert_eq!(tensors(&a), tensors(&b));
    assert!(a["path"]
        .as_str()
        .unwrap()
        .contains("models--org--tiny-chat"));

    let gen = ["--temp", "0", "-n", "6"];
    let run_id = cyb(
        &[&["run", "org/tiny-chat@main", "Hello"][..], &gen].concat(),
        &hub.url,
        &cache,
        None,
    );
    let run_path = cyb(
        &[&["run", &direct, "Hello"][..], &gen].concat(),
        &hub.url,
        &cache,
        None,
    );
    assert!(run_id.ok, "{}", run_id.stderr);
    assert!(!run_id.stdout.trim().is_empty());
    assert_eq!(run_id.stdout, run_path.stdout);

    let out = cache.join("tiny.model").display().to_string();
    let import = cyb(
        &["import", "org/tiny-chat", "-o", &out],
        &hub.url,
        &cache,
        None,
    );
    assert!(import.ok, "{}", import.stderr);
    assert!(Path::new(&out).is_file());

    let list = cyb(&["models", "list", "--json"], &hub.url, &cache, None);
    assert!(list.ok, "{}", list.stderr);
    let repos: Value = serde_json::from_str(&list.stdout).unwrap();
    let gguf_len = std::fs::metadata(fixture("tiny_chat/model-f32.gguf"))
        .unwrap()
        .len();
    assert_eq!(repos[0]["repo"], "org/tiny-chat");
    assert_eq!(repos[0]["files"], 2);
    assert_eq!(repos[0]["size_on_disk"], gguf_len + 16);
    assert_eq!(repos[0]["revisions"][0]["refs"][0], "main");
    let table = cyb(&["models", "list"], &hub.url, &cache, None);
    assert!(
        table.stdout.contains("org/tiny-chat") && table.stdout.contains("main"),
        "{}",
        table.stdout
    );

    let info = cyb(&["models", "info", "org/tiny-chat"], &hub.url, &cache, None);
    assert!(info.ok, "{}", info.stderr);
    assert!(
        info.stdout.contains(COMMIT)
            && info.stdout.contains("gguf")
            && info.stdout.contains("model-f32.gguf"),
        "{}",
        info.stdout
    );

    let rm = cyb(&["models", "rm", "org/tiny-chat"], &hub.url, &cache, None);
    assert!(rm.ok, "{}", rm.stderr);
    assert!(rm.stdout.contains("2 blob(s)"), "{}", rm.stdout);
    assert!(!cache.join("models--org--tiny-chat").exists());
    let gone = cyb(&["inspect", "org/tiny-chat"], &hub.url, &cache, None);
    assert!(!gone.ok);
    assert!(
        gone.stderr.contains("cyb-llm fetch org/tiny-chat"),
        "{}",
        gone.stderr
    );
    let rm_again = cyb(&["models", "rm", "org/tiny-chat"], &hub.url, &cache, None);
    assert!(
        !rm_again.ok && rm_again.stderr.contains("not in the hub cache"),
        "{}",
        rm_again.stderr
    );
}

#[test]
fn fetch_sends_the_token_and_explains_refusals() {
    let hub = FakeHub::start(
        vec![chat_repo()],
        Behavior {
            require_token: Some("hf_test_token".into()),
            cut_first_after: Some(20_000),
            ..Behavior::default()
        },
    );
    let cache = scratch("token");
    let denied = cyb(&["fetch", "org/tiny-chat"], &hub.url, &cache, None);
    assert!(!denied.ok);
    assert!(
        denied.stderr.contains("401") && denied.stderr.contains("HF_TOKEN"),
        "{}",
        denied.stderr
    );
    let missing = cyb(
        &["fetch", "org/nope"],
        &hub.url,
        &cache,
        Some("hf_test_token"),
    );
    assert!(
        !missing.ok && missing.stderr.contains("404") && missing.stderr.contains("org/nope"),
        "{}",
        missing.stderr
    );

    // Every download is cut once; fetch resumes each and ends with the right bytes.
    let ok = cyb(
        &["fetch", "org/tiny-chat", "--include", "*.bin"],
        &hub.url,
        &cache,
        Some("hf_test_token"),
    );
    assert!(ok.ok, "{}", ok.stderr);
    let got = std::fs::read(Path::new(ok.stdout.trim()).join("extra.bin")).unwrap();
    assert_eq!(got, random_bytes(50_000, 7));
    assert!(hub
        .requests_to("/cdn/org/tiny-chat/")
        .iter()
        .any(|r| r.header("range") == Some("bytes=20000-")));
    let api = hub.requests_to("/api/models/org/tiny-chat/");
    assert_eq!(
        api.last().unwrap().header("authorization"),
        Some("Bearer hf_test_token")
    );
}

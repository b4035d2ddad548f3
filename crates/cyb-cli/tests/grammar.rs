//! `cyb-llm run --json-schema / --grammar / --regex` on the tiny chat model. Its weights are
//! random, so only the constraint makes the answers well-formed.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn model() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny_chat/hf")
        .to_string_lossy()
        .into_owned()
}

fn scratch(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cyb-cli-grammar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// Runs `cyb-llm run MODEL PROMPT args...`; (success, stdout without the final newline, stderr).
fn run(args: &[&str]) -> (bool, String, String) {
    let m = model();
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .args(["run", m.as_str(), "Answer:", "-n", "150"])
        .args(args)
        .env(
            "CYB_CACHE",
            std::env::temp_dir().join("cyb-cli-grammar-cache"),
        )
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8(stderr).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    let stdout = String::from_utf8(stdout).unwrap();
    let stdout = stdout.strip_suffix('\n').unwrap_or(&stdout).to_string();
    (status.success(), stdout, stderr)
}

#[test]
fn json_schema_flag_constrains_the_answer() {
    let schema = json!({
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "n": {"type": "integer", "minimum": 0, "maximum": 9},
            "color": {"enum": ["red", "blue"]},
            "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99},
                      "maxItems": 3}
        },
        "required": ["ok", "n", "color", "items"],
        "additionalProperties": false
    });
    let file = scratch("schema.json", &schema.to_string());
    let file = file.to_str().unwrap();
    for (temp, seed) in [("0", "0"), ("1.0", "1"), ("1.5", "2")] {
        let (ok, out, err) = run(&["--json-schema", file, "--temp", temp, "--seed", seed]);
        assert!(ok, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out:?}"));
        let o = v.as_object().unwrap();
        assert_eq!(o.len(), 4, "{out}");
        assert!(o["ok"].is_boolean(), "{out}");
        assert!(o["n"].as_u64().is_some_and(|n| n <= 9), "{out}");
        assert!(
            ["red", "blue"].contains(&o["color"].as_str().unwrap()),
            "{out}"
        );
        let items = o["items"].as_array().unwrap();
        assert!(items.len() <= 3, "{out}");
        assert!(
            items.iter().all(|i| i.as_u64().is_some_and(|i| i <= 99)),
            "{out}"
        );
    }
}

#[test]
fn lark_and_regex_flags_constrain_the_answer() {
    let lark = scratch("yesno.lark", "start: (\"yes\" | \"no\") \" \" /[0-9]{2}/\n");
    let (ok, out, err) = run(&["--grammar", lark.to_str().unwrap(), "--seed", "3"]);
    assert!(ok, "{err}");
    let (word, num) = out.split_once(' ').unwrap_or_else(|| panic!("{out:?}"));
    assert!(word == "yes" || word == "no", "{out:?}");
    assert!(
        num.len() == 2 && num.bytes().all(|b| b.is_ascii_digit()),
        "{out:?}"
    );

    let (ok, out, err) = run(&["--regex", "[a-c]{4}-[0-9]", "--seed", "4", "--temp", "1.3"]);
    assert!(ok, "{err}");
    let b = out.as_bytes();
    assert_eq!(b.len(), 6, "{out:?}");
    assert!(b[..4].iter().all(|c| (b'a'..=b'c').contains(c)), "{out:?}");
    assert_eq!(b[4], b'-');
    assert!(b[5].is_ascii_digit(), "{out:?}");
}

#[test]
fn bad_grammars_fail_with_a_message() {
    let not_json = scratch("bad.json", "{not json");
    let (ok, _, err) = run(&["--json-schema", not_json.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("bad.json") && err.contains("not JSON"),
        "{err}"
    );

    let bad_type = scratch("badtype.json", r#"{"type": "strnig"}"#);
    let (ok, _, err) = run(&["--json-schema", bad_type.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("strnig"), "{err}");

    let (ok, _, err) = run(&["--grammar", "/nonexistent/g.lark"]);
    assert!(!ok);
    assert!(err.contains("/nonexistent/g.lark"), "{err}");

    // One grammar at a time.
    let (ok, _, err) = run(&["--regex", "a", "--json-schema", not_json.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("cannot be used with"), "{err}");
}

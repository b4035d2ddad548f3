//! A command whose reader goes away (`cyb-llm embed ... | head -c 10`) ends quietly, as Unix
//! tools do: no panic message, killed by SIGPIPE or exiting cleanly, never "failed printing to
//! stdout". Uses all-MiniLM-L6-v2 from the cache (tools/fetch_minilm.sh); skipped, with a note,
//! when it is absent.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};

#[test]
fn embed_into_a_closed_pipe_ends_quietly() {
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
    // 300 vectors of 384 numbers: far more than a pipe buffers.
    let texts: Vec<String> = (0..300).map(|i| format!("sentence number {i}")).collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .arg("embed")
        .arg(&model)
        .args(&texts)
        .arg("-t")
        .arg("1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG")
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 10];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("failed printing"), "{stderr}");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert!(
            out.status.success() || out.status.signal() == Some(13),
            "{:?}: {stderr}",
            out.status
        );
    }
}

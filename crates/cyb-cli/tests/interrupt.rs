//! Ctrl-C (SIGINT) during `cyb-llm run` stops the generation cleanly: the process exits
//! successfully, soon, with the text so far on stdout and "[interrupted]" and the metrics line
//! on stderr.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn sigint_stops_generation_cleanly() {
    let model =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny_chat/model-f32.gguf");
    // A generation that would run for a very long time: no EOS, a huge context.
    let mut child = Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .args([
            "run",
            model.to_str().unwrap(),
            "hello",
            "--raw",
            "--temp",
            "0",
            "--ignore-eos",
        ])
        .args([
            "-n",
            "1000000",
            "--ctx",
            "200000",
            "--ctx-overflow",
            "allow",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    // Wait for the first streamed bytes, so the handler is installed and generation is running.
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    let sent = Instant::now();
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    let waited = sent.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {stderr}",
        out.status
    );
    assert!(waited < Duration::from_secs(10), "took {waited:?} to stop");
    assert!(stderr.contains("[interrupted]"), "stderr: {stderr}");
    assert!(stderr.contains("decode"), "metrics line missing: {stderr}");
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
}

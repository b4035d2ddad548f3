//! The `cyb-llm` binary end to end on the tiny chat model (tests/fixtures/tiny_chat, whose
//! reference.json holds transformers' greedy output, made by
//! tools/fixtures/make_tiny_chat_fixture.py): run, chat over stdin, perplexity, inspect,
//! backends, and the error paths (exit status, message on stderr, never a panic).

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny_chat")
        .join(rel)
}

fn fixture_str(rel: &str) -> String {
    fixture(rel).to_string_lossy().into_owned()
}

fn reference() -> Value {
    let text = std::fs::read_to_string(fixture("reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cyb-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

struct Ran {
    ok: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn cyb(args: &[&str], stdin: Option<&str>) -> Ran {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .args(args)
        // Never fetch the default model, never read a user's logging settings.
        .env("CYB_CACHE", scratch("cache"))
        .env_remove("RUST_LOG")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().unwrap();
    let ran = Ran {
        ok: status.success(),
        code: status.code(),
        stdout: String::from_utf8(stdout).unwrap(),
        stderr: String::from_utf8(stderr).unwrap(),
    };
    assert!(
        !ran.stderr.contains("panicked"),
        "cyb-llm {args:?} panicked:\n{}",
        ran.stderr
    );
    ran
}

/// The greedy answer text of a reference case, without the eos token.
fn answer(case: &Value) -> String {
    let text = case["greedy_stop_at_eos"]["text"].as_str().unwrap();
    text.strip_suffix("<|im_end|>").unwrap().to_string()
}

/// How many tokens the greedy answer of a reference case has before eos.
fn answer_tokens(case: &Value) -> usize {
    case["greedy_stop_at_eos"]["ids"].as_array().unwrap().len() - 1
}

/// The `prompt N tok (M prefilled)` and `K tokens` figures of each metrics line on stderr.
fn metrics(stderr: &str) -> Vec<(usize, usize, usize)> {
    stderr
        .lines()
        .filter(|l| l.starts_with("load "))
        .map(|l| {
            let num = |after: &str| -> usize {
                let rest = &l[l.find(after).unwrap() + after.len()..];
                let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap();
                rest[..end].parse().unwrap()
            };
            let tokens = l.rsplit("| ").next().unwrap();
            let generated = tokens.strip_suffix(" tokens").unwrap().parse().unwrap();
            (num("prompt "), num("tok ("), generated)
        })
        .collect()
}

#[test]
fn run_streams_the_answer_to_stdout_and_metrics_to_stderr() {
    let r = reference();
    let want = answer(&r["chat"]);
    let prompt = r["chat"]["messages"][0]["content"].as_str().unwrap();
    let prompt_len = r["chat"]["prompt_ids"].as_array().unwrap().len();
    for model in ["hf", "model-f32.gguf"] {
        let out = cyb(
            &["run", &fixture_str(model), prompt, "--temp", "0", "-n", "8"],
            None,
        );
        assert!(out.ok, "{model}: {}", out.stderr);
        assert_eq!(out.stdout, format!("{want}\n"), "{model}");
        // The answer ends at eos before the 8 allowed tokens.
        let n = answer_tokens(&r["chat"]);
        assert!(n < 8);
        assert_eq!(
            metrics(&out.stderr),
            [(prompt_len, prompt_len, n)],
            "{}",
            out.stderr
        );
    }
    // -n cuts the same answer short.
    let out = cyb(
        &["run", &fixture_str("hf"), prompt, "--temp", "0", "-n", "3"],
        None,
    );
    assert!(out.ok, "{}", out.stderr);
    let pieces: Vec<&str> = r["chat"]["greedy_stop_at_eos"]["pieces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(out.stdout, format!("{}\n", pieces[..3].concat()));
}

#[test]
fn run_with_a_draft_gives_the_same_greedy_answer() {
    // The GGUF drafts for the HF directory (the same weights): transformers' greedy answer,
    // every proposal kept; a draft of another vocabulary is refused before generating.
    let r = reference();
    let want = answer(&r["chat"]);
    let prompt = r["chat"]["messages"][0]["content"].as_str().unwrap();
    let out = cyb(
        &[
            "run",
            &fixture_str("hf"),
            prompt,
            "--temp",
            "0",
            "-n",
            "8",
            "--draft",
            &fixture_str("model-f32.gguf"),
            "--draft-max",
            "3",
        ],
        None,
    );
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout, format!("{want}\n"));
    let line = out.stderr.lines().find(|l| l.starts_with("draft: "));
    let line = line.unwrap_or_else(|| panic!("no draft line in {}", out.stderr));
    let nums: Vec<usize> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
    assert!(
        nums.len() >= 2 && nums[0] == nums[1] && nums[0] > 0,
        "{line}"
    );
    let bert =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bert_gguf/model.gguf");
    let out = cyb(
        &[
            "run",
            &fixture_str("hf"),
            prompt,
            "--draft",
            bert.to_str().unwrap(),
        ],
        None,
    );
    assert!(!out.ok);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(out.stderr.contains("draft"), "{}", out.stderr);
    // Prompt lookup: the same answer, whatever it copies.
    let out = cyb(
        &[
            "run",
            &fixture_str("hf"),
            prompt,
            "--temp",
            "0",
            "-n",
            "8",
            "--draft-lookup",
            "--draft-max",
            "4",
        ],
        None,
    );
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout, format!("{want}\n"));
}

#[test]
fn run_raw_feeds_the_prompt_without_template() {
    let r = reference();
    let raw = &r["raw"];
    let pieces: Vec<&str> = raw["greedy_ignore_eos"]["pieces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    let out = cyb(
        &[
            "run",
            &fixture_str("model-f32.gguf"),
            raw["text"].as_str().unwrap(),
            "--raw",
            "--temp",
            "0",
            "-n",
            "8",
            "--ignore-eos",
        ],
        None,
    );
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout, format!("{}\n", pieces[..8].concat()));
    let prompt_len = raw["prompt_ids"].as_array().unwrap().len();
    assert_eq!(metrics(&out.stderr), [(prompt_len, prompt_len, 8)]);
    // A stop string from that text ends the answer before it.
    let stop = pieces[5];
    let out = cyb(
        &[
            "run",
            &fixture_str("model-f32.gguf"),
            raw["text"].as_str().unwrap(),
            "--raw",
            "--temp",
            "0",
            "-n",
            "8",
            "--stop",
            stop,
        ],
        None,
    );
    assert!(out.ok, "{}", out.stderr);
    let text = pieces[..8].concat();
    assert_eq!(
        out.stdout,
        format!("{}\n", &text[..text.find(stop).unwrap()])
    );
}

#[test]
fn seeded_sampling_repeats() {
    let r = reference();
    let args = |seed: &'static str| {
        vec![
            "run".to_string(),
            fixture_str("hf"),
            r["raw"]["text"].as_str().unwrap().to_string(),
            "--raw".into(),
            "--temp".into(),
            "1.5".into(),
            "--seed".into(),
            seed.into(),
            "-n".into(),
            "16".into(),
            "--ignore-eos".into(),
        ]
    };
    let go = |seed| {
        let a = args(seed);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let out = cyb(&a, None);
        assert!(out.ok, "{}", out.stderr);
        out.stdout
    };
    let first = go("11");
    assert_eq!(go("11"), first);
}

#[test]
fn errors_exit_nonzero_and_say_why() {
    let missing = scratch("missing-model.gguf");
    let missing = missing.to_string_lossy();
    let out = cyb(&["run", &missing, "hi"], None);
    assert!(!out.ok);
    assert!(out.stderr.contains(&*missing), "{}", out.stderr);
    assert!(out.stdout.is_empty());

    let hf = fixture_str("hf");
    let out = cyb(&["run", &hf, "hi", "--backend", "honeycrisp"], None);
    assert!(!out.ok);
    assert!(
        out.stderr.contains("honeycrisp") && out.stderr.contains("macOS"),
        "{}",
        out.stderr
    );
    let out = cyb(&["run", &hf, "hi", "--path", "sideways"], None);
    assert!(!out.ok);
    assert!(out.stderr.contains("sideways"), "{}", out.stderr);
    // The graph path answers what the curated path answers.
    let args = ["run", &hf, "hi", "--temp", "0", "-n", "8"];
    let curated = cyb(&args, None);
    let graph = cyb(&[&args[..], &["--path", "graph"]].concat(), None);
    assert!(curated.ok && graph.ok, "{}", graph.stderr);
    assert_eq!(graph.stdout, curated.stdout);

    // A prompt longer than --ctx names both numbers.
    let out = cyb(&["run", &hf, "Hi there", "--ctx", "8", "--temp", "0"], None);
    assert!(!out.ok);
    assert!(
        out.stderr.contains("21") && out.stderr.contains("holds 8"),
        "{}",
        out.stderr
    );

    // Usage errors are clap's (exit 2), not panics.
    let out = cyb(&["run"], None);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    let out = cyb(&["perplexity", &hf], None);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

#[test]
fn chat_session_file_carries_the_conversation_to_the_next_run() {
    // Turn one in one process, turn two in another: the second answer equals transformers'
    // on the whole conversation, with only the new text prefilled.
    let r = reference();
    let (first, second) = (answer(&r["chat"]), answer(&r["chat_next_turn"]));
    let hi = r["chat"]["messages"][0]["content"].as_str().unwrap();
    let next = r["chat_next_turn"]["messages"][2]["content"]
        .as_str()
        .unwrap();
    let file = scratch("chat.session");
    let _ = std::fs::remove_file(&file);
    let hf = fixture_str("hf");
    let args = [
        "chat",
        &hf,
        "--temp",
        "0",
        "-n",
        "24",
        "--metrics",
        "--session",
        file.to_str().unwrap(),
    ];
    let one = cyb(&args, Some(&format!("{hi}\n")));
    assert!(one.ok, "{}", one.stderr);
    assert_eq!(
        one.stdout.trim_start_matches("> ").trim_end_matches("> "),
        format!("{first}\n")
    );
    let two = cyb(&args, Some(&format!("{next}\n")));
    assert!(two.ok, "{}", two.stderr);
    assert!(
        two.stderr.contains("[restored 2 messages"),
        "{}",
        two.stderr
    );
    assert_eq!(
        two.stdout.trim_start_matches("> ").trim_end_matches("> "),
        format!("{second}\n")
    );
    let len = |case: &str| r[case]["prompt_ids"].as_array().unwrap().len();
    let held = len("chat") + answer_tokens(&r["chat"]);
    let m = metrics(&two.stderr);
    assert_eq!(m.len(), 1, "{}", two.stderr);
    assert_eq!(m[0].1, len("chat_next_turn") - held, "{}", two.stderr);
    // A damaged file is a clear error, not a panic.
    std::fs::write(&file, b"CYBSESS1 but nothing else").unwrap();
    let bad = cyb(&args, Some("hi\n"));
    assert!(!bad.ok);
    assert!(bad.stderr.contains("session file"), "{}", bad.stderr);
}

#[test]
fn chat_drops_the_oldest_turns_when_the_context_fills() {
    // Eight long turns in a 160-token context with room for 24-token answers: the oldest
    // turns go and every question is answered.
    let question = "Please tell me a long story about the sea and the wind";
    let script = format!("{}/exit\n", format!("{question}\n").repeat(8));
    let out = cyb(
        &[
            "chat",
            &fixture_str("hf"),
            "--temp",
            "0",
            "-n",
            "24",
            "--ctx",
            "160",
            "--metrics",
        ],
        Some(&script),
    );
    assert!(out.ok, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("oldest messages were dropped to fit the context"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("error"), "{}", out.stderr);
    let m = metrics(&out.stderr);
    assert_eq!(m.len(), 8, "{}", out.stderr);
    assert!(m.iter().all(|&(prompt, _, _)| prompt + 24 <= 160), "{m:?}");
}

#[test]
fn chat_keeps_the_cache_across_turns_and_obeys_commands() {
    let r = reference();
    let first = answer(&r["chat"]);
    let second = answer(&r["chat_next_turn"]);
    let hi = r["chat"]["messages"][0]["content"].as_str().unwrap();
    let next = r["chat_next_turn"]["messages"][2]["content"]
        .as_str()
        .unwrap();
    let script = format!("{hi}\n{next}\n/reset\n\n{hi}\n/system Be brief.\n{hi}\n/exit\n{hi}\n");
    let out = cyb(
        &[
            "chat",
            &fixture_str("hf"),
            "--temp",
            "0",
            "-n",
            "24",
            "--metrics",
        ],
        Some(&script),
    );
    assert!(out.ok, "{}", out.stderr);
    // Each turn prints "> " then the answer and a newline; commands print only "> ".
    let answers: Vec<&str> = out
        .stdout
        .split("> ")
        .map(|s| s.trim_end_matches('\n'))
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(answers.len(), 4, "{:?}", out.stdout);
    assert_eq!(answers[0], first);
    // The second turn equals transformers on the whole conversation.
    assert_eq!(answers[1], second);
    // After /reset, the first question gets the first answer again.
    assert_eq!(answers[2], first);
    assert!(out.stderr.contains("[conversation cleared]"));
    assert!(out.stderr.contains("[system message set"));

    let m = metrics(&out.stderr);
    assert_eq!(m.len(), 4, "{}", out.stderr);
    let len = |case: &str| r[case]["prompt_ids"].as_array().unwrap().len();
    let (n1, n2) = (
        answer_tokens(&r["chat"]),
        answer_tokens(&r["chat_next_turn"]),
    );
    assert_eq!(m[0], (len("chat"), len("chat"), n1));
    // Second turn: only what follows the first prompt and answer is prefilled.
    let held = len("chat") + n1;
    assert_eq!(
        m[1],
        (len("chat_next_turn"), len("chat_next_turn") - held, n2)
    );
    assert_eq!(m[2], (len("chat"), len("chat"), n1));
    // The system message changes the prompt; the cache was cleared, so all of it is new.
    assert!(m[3].0 > len("chat"));
    assert_eq!(m[3].0, m[3].1);
}

#[test]
fn chat_survives_a_full_context() {
    // A second turn that does not fit drops the first; a question longer than the whole
    // context is an error, and the chat goes on.
    let r = reference();
    let hi = r["chat"]["messages"][0]["content"].as_str().unwrap();
    let long = "word ".repeat(60);
    let script = format!("{hi}\nHow are you?\n{long}\n/reset\n{hi}\n");
    let out = cyb(
        &["chat", &fixture_str("hf"), "--temp", "0", "--ctx", "30"],
        Some(&script),
    );
    assert!(out.ok, "{}", out.stderr);
    assert!(
        out.stderr.contains("oldest messages were dropped"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("error:"), "{}", out.stderr);
    let answers: Vec<&str> = out
        .stdout
        .split("> ")
        .map(|s| s.trim_end_matches('\n'))
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(answers.len(), 3, "{answers:?}");
    assert_eq!(answers[0], answer(&r["chat"]));
    assert_eq!(answers[2], answer(&r["chat"]));
}

#[test]
fn perplexity_prints_the_figure() {
    let r = reference();
    let p = &r["perplexity"];
    let file = scratch("ppl.txt");
    std::fs::write(&file, p["text"].as_str().unwrap()).unwrap();
    let file = file.to_string_lossy();
    let hf = fixture_str("hf");
    let out = cyb(&["perplexity", &hf, &file, "--ctx", "16", "--json"], None);
    assert!(out.ok, "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let want = p["perplexity"].as_f64().unwrap();
    let got = v["perplexity"].as_f64().unwrap();
    assert!((got - want).abs() / want < 1e-4, "{got} vs {want}");
    assert_eq!(v["chunks"], p["chunks"]);
    assert_eq!(v["scored_tokens"], p["scored_tokens"]);

    let out = cyb(&["perplexity", &hf, &file, "--ctx", "16"], None);
    assert!(out.ok, "{}", out.stderr);
    assert!(out.stdout.starts_with("PPL = "), "{}", out.stdout);
    let printed: f64 = out.stdout[6..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((printed - want).abs() < 1e-3, "{printed} vs {want}");

    // Too short a text for one chunk (the default chunk is 512 tokens).
    let out = cyb(&["perplexity", &hf, &file], None);
    assert!(!out.ok);
    assert!(out.stderr.contains("512"), "{}", out.stderr);
    let missing = scratch("missing.txt");
    let out = cyb(&["perplexity", &hf, &missing.to_string_lossy()], None);
    assert!(!out.ok);
    assert!(
        out.stderr.contains(&*missing.to_string_lossy()),
        "{}",
        out.stderr
    );
}

/// `--kl-divergence-base` stores a run's log-probabilities; `--kl-divergence` compares another
/// run with them. The base run on the reference backend must reproduce transformers'
/// perplexity from the stored rows, the cpu backend must sit within the storage's rounding of
/// it, and a base of another context or text is refused.
#[test]
fn kl_divergence_against_a_stored_base() {
    let r = reference();
    let p = &r["perplexity"];
    let file = scratch("kld.txt");
    std::fs::write(&file, p["text"].as_str().unwrap()).unwrap();
    let file = file.to_string_lossy();
    let base = scratch("kld-base.bin");
    let base = base.to_string_lossy();
    let hf = fixture_str("hf");
    let want = p["perplexity"].as_f64().unwrap();
    let args = ["perplexity", &hf, &file, "--ctx", "16"];
    let with = |extra: &[&str]| {
        let mut a = args.to_vec();
        a.extend_from_slice(extra);
        cyb(&a, None)
    };
    let out = with(&["--backend", "reference", "--kl-divergence-base", &base]);
    assert!(out.ok, "{}", out.stderr);
    assert!(
        out.stderr.contains("stored the log-probabilities"),
        "{}",
        out.stderr
    );
    let compare = ["--kl-divergence-base", &*base, "--kl-divergence", "--json"];
    for backend in ["reference", "cpu"] {
        let out = with(&[&["--backend", backend][..], &compare].concat());
        assert!(out.ok, "{}", out.stderr);
        let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
        let k = &v["kl_divergence"];
        assert_eq!(k["positions"], p["scored_tokens"]);
        let base_ppl = k["base_perplexity"].as_f64().unwrap();
        assert!(
            (base_ppl - want).abs() / want < 2e-4,
            "{base_ppl} vs {want}"
        );
        let ppl = k["perplexity"].as_f64().unwrap();
        assert!((ppl - v["perplexity"].as_f64().unwrap()).abs() < 1e-9 * ppl);
        // 16 bits over 16 nats: a step of 2.4e-4 in each stored log-probability.
        assert!(k["max"].as_f64().unwrap().abs() < 1e-4, "{backend}: {k}");
        assert!(k["mean"].as_f64().unwrap().abs() < 2e-5, "{backend}: {k}");
        assert_eq!(k["same_top"].as_f64().unwrap(), 1.0, "{backend}: {k}");
    }
    let out = with(&["--kl-divergence-base", &base, "--kl-divergence"]);
    assert!(out.ok, "{}", out.stderr);
    let text = &out.stdout;
    assert!(text.contains("KL divergence: mean "), "{text}");
    assert!(text.contains("same top token: 100.000%"), "{text}");

    // The base holds the tokens: no text file needed.
    let out = cyb(&[&["perplexity", &*hf][..], &compare].concat(), None);
    assert!(out.ok, "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["kl_divergence"]["positions"], p["scored_tokens"]);
    // Another text, another context, or no base at all are refused.
    let other = scratch("kld-other.txt");
    std::fs::write(
        &other,
        "Another text, long enough for one chunk of sixteen tokens or two.",
    )
    .unwrap();
    let other = other.to_string_lossy();
    let out = cyb(
        &[&["perplexity", &*hf, &*other][..], &compare].concat(),
        None,
    );
    assert!(!out.ok);
    assert!(out.stderr.contains("not the text"), "{}", out.stderr);
    let out = cyb(
        &[&["perplexity", &*hf, &*file, "--ctx", "8"][..], &compare].concat(),
        None,
    );
    assert!(!out.ok);
    let e = &out.stderr;
    assert!(
        e.contains(&*base) && e.contains("--ctx 8") && e.contains("16"),
        "{e}"
    );
    let out = with(&["--kl-divergence"]);
    assert!(!out.ok);
    assert!(
        out.stderr.contains("--kl-divergence-base"),
        "{}",
        out.stderr
    );
    // Without --kl-divergence the text is required: a usage error.
    let out = cyb(&["perplexity", &hf], None);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

#[test]
fn inspect_json_parses() {
    let out = cyb(&["inspect", &fixture_str("model-f32.gguf"), "--json"], None);
    assert!(out.ok, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["format"], "gguf");
    assert_eq!(v["architecture"], "llama");
    assert_eq!(v["config"]["vocab_size"], reference()["vocab_size"]);
    let out = cyb(&["inspect", &fixture_str("hf"), "--json"], None);
    assert!(out.ok, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["config"]["num_layers"], 2);
}

#[test]
fn backends_lists_reference_and_unavailable_ones() {
    let out = cyb(&["backends"], None);
    assert!(out.ok, "{}", out.stderr);
    let row = |name: &str| {
        out.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_string())
    };
    assert_eq!(row("reference").as_deref(), Some("yes"), "{}", out.stdout);
    assert_eq!(row("honeycrisp").as_deref(), Some("no"), "{}", out.stdout);
    assert_eq!(row("auto").as_deref(), Some("yes"), "{}", out.stdout);
    let out = cyb(&["backends", "--json"], None);
    assert!(out.ok, "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let list = v.as_array().unwrap();
    assert!(list
        .iter()
        .any(|b| b["name"] == "reference" && b["available"] == true));
    // Software adapters (this machine's lavapipe, if any) are never picked.
    let auto = list.iter().find(|b| b["name"] == "auto").unwrap();
    let picks = auto["picks"].as_str().unwrap();
    assert!(picks == "cpu" || picks == "wgpu", "{auto}");
    if picks == "wgpu" {
        let detail = auto["detail"].as_str().unwrap();
        assert!(!detail.contains("llvmpipe"), "{detail}");
    }
}

#[test]
fn the_backend_choice_is_logged() {
    let out = cyb(
        &[
            "run",
            &fixture_str("hf"),
            "hi",
            "-n",
            "2",
            "--verbose",
            "--backend",
            "cpu",
        ],
        None,
    );
    assert!(out.ok, "{}", out.stderr);
    assert!(
        out.stderr.contains("backend chosen") && out.stderr.contains("asked for"),
        "{}",
        out.stderr
    );
    let out = cyb(&["run", &fixture_str("hf"), "hi", "-n", "2", "-v"], None);
    assert!(out.ok, "{}", out.stderr);
    assert!(out.stderr.contains("backend chosen"), "{}", out.stderr);
}

/// A copy of the tiny model without a chat template whose tokenizer adds BOS (a base model).
fn base_model_dir() -> PathBuf {
    let dir = scratch("base-model");
    std::fs::create_dir_all(&dir).unwrap();
    for name in [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer_config.json",
    ] {
        std::fs::copy(fixture("hf").join(name), dir.join(name)).unwrap();
    }
    let text = std::fs::read_to_string(fixture("hf/tokenizer.json")).unwrap();
    let mut tok: Value = serde_json::from_str(&text).unwrap();
    let bos = "<|endoftext|>";
    let seq = |id: &str| serde_json::json!({"Sequence": {"id": id, "type_id": 0}});
    let special = serde_json::json!({"SpecialToken": {"id": bos, "type_id": 0}});
    tok["post_processor"] = serde_json::json!({
        "type": "TemplateProcessing",
        "single": [special, seq("A")],
        "pair": [special, seq("A"), seq("B")],
        "special_tokens": {bos: {"id": bos, "ids": [0], "tokens": [bos]}},
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
    dir
}

#[test]
fn run_without_template_feeds_raw_text_with_bos() {
    let r = reference();
    let dir = base_model_dir();
    let dir = dir.to_string_lossy();
    let prompt = r["raw"]["text"].as_str().unwrap();
    let prompt_len = r["raw"]["prompt_ids"].as_array().unwrap().len();
    let args = [
        "run",
        &dir,
        prompt,
        "--temp",
        "0",
        "-n",
        "4",
        "--ignore-eos",
    ];
    let plain = cyb(&args, None);
    assert!(plain.ok, "{}", plain.stderr);
    assert!(
        plain.stderr.contains("no chat template"),
        "{}",
        plain.stderr
    );
    let raw = cyb(&[&args[..], &["--raw"]].concat(), None);
    assert!(raw.ok, "{}", raw.stderr);
    // Both feed BOS + the prompt.
    assert_eq!(metrics(&raw.stderr), [(prompt_len + 1, prompt_len + 1, 4)]);
    assert_eq!(metrics(&plain.stderr), metrics(&raw.stderr));
    assert_eq!(plain.stdout, raw.stdout);
    // chat needs a template.
    let out = cyb(&["chat", &dir], Some("hi\n"));
    assert!(!out.ok);
    assert!(out.stderr.contains("chat template"), "{}", out.stderr);
}

#[test]
fn chat_commands_match_whole_words() {
    // "/systematic ..." is a message to the model, not the /system command.
    let out = cyb(
        &["chat", &fixture_str("hf"), "--temp", "0", "-n", "4"],
        Some("/systematic errors\n/exit\n"),
    );
    assert!(out.ok, "{}", out.stderr);
    assert!(
        !out.stderr.contains("[system message set"),
        "{}",
        out.stderr
    );
    let answers = out
        .stdout
        .split("> ")
        .filter(|s| !s.trim().is_empty())
        .count();
    assert_eq!(answers, 1, "{:?}", out.stdout);
}

/// `--lora` and `--lora-scaled` apply an adapter (PEFT's greedy text with it, from
/// tests/fixtures/lora); scale 0 gives the model's own text, and a bad scale is refused.
#[test]
fn run_with_lora_adapters() {
    let lora: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("../lora/reference.json")).unwrap())
            .unwrap();
    let joined = |v: &Value| -> String {
        v.as_array()
            .unwrap()
            .iter()
            .take(8)
            .map(|p| p.as_str().unwrap())
            .collect()
    };
    let with = joined(&lora["tiny_chat"]["greedy_ignore_eos"]["pieces"]);
    let without = joined(&reference()["raw"]["greedy_ignore_eos"]["pieces"]);
    let adapter = fixture_str("../lora/tiny_chat_peft");
    let text = reference()["raw"]["text"].as_str().unwrap().to_string();
    let model = fixture_str("model-f32.gguf");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            &model,
            &text,
            "--raw",
            "--temp",
            "0",
            "-n",
            "8",
            "--ignore-eos",
        ];
        args.extend_from_slice(extra);
        cyb(&args, None)
    };
    let out = run(&["--lora", &adapter]);
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout, format!("{with}\n"));
    let out = run(&["--lora-scaled", &adapter, "0"]);
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout, format!("{without}\n"));
    let out = run(&["--lora-scaled", &adapter, "half"]);
    assert!(!out.ok);
    assert!(out.stderr.contains("not a number"), "{}", out.stderr);
}

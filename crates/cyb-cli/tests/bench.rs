//! `cyb-llm bench` on a tiny model: the JSON has llama-bench's fields and is consistent with
//! itself, the flags are honoured, and bad input is refused with a message.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny_chat/model-f32.gguf")
}

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .arg("bench")
        .args(args)
        .output()
        .expect("run cyb-llm")
}

fn bench_json(args: &[&str]) -> Vec<Value> {
    let model = fixture();
    let mut all = vec![model.to_str().expect("utf-8 path"), "--json"];
    all.extend_from_slice(args);
    let out = bench(&all);
    assert!(
        out.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    v.as_array().expect("a JSON array").clone()
}

fn f64s(v: &Value, key: &str) -> Vec<f64> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} is not an array"))
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

#[test]
fn json_has_llama_bench_fields_and_consistent_numbers() {
    let tests = bench_json(&["-p", "7", "-n", "5", "-r", "3", "-t", "1"]);
    assert_eq!(tests.len(), 2, "one object per test (pp, tg)");
    let file_len = std::fs::metadata(fixture()).expect("fixture").len();
    for (t, (n_prompt, n_gen)) in tests.iter().zip([(7u64, 0u64), (0, 5)]) {
        for key in [
            "model_filename",
            "model_type",
            "model_size",
            "model_n_params",
            "n_threads",
            "n_prompt",
            "n_gen",
            "avg_ns",
            "stddev_ns",
            "avg_ts",
            "stddev_ts",
            "samples_ns",
            "samples_ts",
            "backends",
            "test_time",
            "median_ts",
            "load_ms",
            "peak_rss_bytes",
        ] {
            assert!(t.get(key).is_some(), "field {key} missing in {t}");
        }
        assert_eq!(t["n_prompt"].as_u64(), Some(n_prompt));
        assert_eq!(t["n_gen"].as_u64(), Some(n_gen));
        assert_eq!(t["n_threads"].as_u64(), Some(1));
        let size = t["model_size"].as_u64().expect("model_size");
        assert!(
            size > 0 && size < file_len,
            "model_size {size} vs file {file_len}"
        );
        assert!(t["model_n_params"].as_u64().expect("params") > 0);

        let ns = f64s(t, "samples_ns");
        let ts = f64s(t, "samples_ts");
        assert_eq!(ns.len(), 3, "-r 3 gives three samples");
        assert_eq!(ts.len(), 3);
        let tokens = (n_prompt + n_gen) as f64;
        for (n, s) in ns.iter().zip(&ts) {
            assert!(*n > 0.0);
            let expect = tokens * 1e9 / n;
            assert!((s - expect).abs() <= 1e-9 * expect, "{s} vs {expect}");
        }
        let mean = ts.iter().sum::<f64>() / 3.0;
        let avg = t["avg_ts"].as_f64().expect("avg_ts");
        assert!(
            (avg - mean).abs() <= 1e-9 * mean,
            "avg_ts {avg} is the mean {mean}"
        );
        let mut sorted = ts.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(t["median_ts"].as_f64(), Some(sorted[1]));
        let sd = (ts.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
        let got_sd = t["stddev_ts"].as_f64().expect("stddev_ts");
        assert!(
            (got_sd - sd).abs() <= 1e-9 * mean,
            "stddev_ts {got_sd} vs {sd}"
        );
        assert!(t["peak_rss_bytes"].as_u64().is_some_and(|b| b > 0));
    }
}

#[test]
fn repetitions_are_honoured() {
    for r in ["1", "4"] {
        let tests = bench_json(&["-p", "3", "-n", "2", "-r", r]);
        for t in &tests {
            assert_eq!(f64s(t, "samples_ns").len().to_string(), r);
        }
    }
}

#[test]
fn human_table_names_the_tests() {
    let model = fixture();
    let out = bench(&[
        model.to_str().expect("utf-8"),
        "-p",
        "9",
        "-n",
        "4",
        "-r",
        "1",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("| model | size | params | backend | threads | test | t/s |"));
    assert!(text.contains("| pp9 |"), "{text}");
    assert!(text.contains("| tg4 |"), "{text}");
    assert!(text.contains("peak RSS"), "{text}");
}

#[test]
fn bad_arguments_are_refused() {
    let model = fixture();
    let m = model.to_str().expect("utf-8");
    for (args, needle) in [
        (vec![m, "-p", "0", "-n", "0"], "every -p and -n value is 0"),
        (
            vec![m, "-p", "0,0", "-n", "0"],
            "every -p and -n value is 0",
        ),
        (vec![m, "-r", "0"], "-r"),
        (vec![m, "-t", "0"], "-t"),
        (vec![m, "-t", "2,0"], "-t"),
        (vec![m, "-p", "12,x"], "n-prompt"),
        (vec![m, "--pg", "8"], "PP,TG"),
        (vec![m, "--pg", "8,0"], "at least 1"),
        (vec!["/nonexistent/model.gguf"], "/nonexistent/model.gguf"),
        (vec![m, "--backend", "no-such-backend"], "no-such-backend"),
    ] {
        let out = bench(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed results");
    }
}

#[test]
fn depth_runs_each_test_after_a_filled_context() {
    let tests = bench_json(&["-p", "3", "-n", "2", "-d", "600", "-r", "2", "-t", "2"]);
    assert_eq!(tests.len(), 2);
    for (t, (n_prompt, n_gen)) in tests.iter().zip([(3u64, 0u64), (0, 2)]) {
        assert_eq!(t["n_depth"].as_u64(), Some(600), "{t}");
        assert_eq!(t["n_prompt"].as_u64(), Some(n_prompt));
        assert_eq!(t["n_gen"].as_u64(), Some(n_gen));
        // avg_ts counts the test's own tokens, not the context's.
        let ts = f64s(t, "samples_ts");
        let ns = f64s(t, "samples_ns");
        let tokens = (n_prompt + n_gen) as f64;
        for (n, s) in ns.iter().zip(&ts) {
            assert!((s - tokens * 1e9 / n).abs() <= 1e-9 * s);
        }
    }
    let model = fixture();
    let out = bench(&[
        model.to_str().expect("utf-8"),
        "-p",
        "4",
        "-n",
        "3",
        "-d",
        "9",
        "-r",
        "1",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("| pp4 @ d9 |"), "{text}");
    assert!(text.contains("| tg3 @ d9 |"), "{text}");
    // A context that cannot be allocated is an error, not an abort.
    let out = bench(&[
        model.to_str().expect("utf-8"),
        "-d",
        "1000000000000000",
        "-r",
        "1",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.to_lowercase().contains("kv cache"), "{err}");
}

/// Lists run every combination in llama-bench's order — thread counts outermost (one load
/// each), then depths, then the pp tests of every `-p` and the tg tests of every `-n` — and a
/// 0 skips that kind of test.
#[test]
fn lists_run_every_combination_and_zero_skips_a_test() {
    let tests = bench_json(&["-p", "3,5", "-n", "0", "-d", "0,4", "-t", "1,2", "-r", "1"]);
    let got: Vec<(u64, u64, u64, u64)> = tests
        .iter()
        .map(|t| {
            let n = |k: &str| t[k].as_u64().unwrap_or_else(|| panic!("{k} in {t}"));
            (n("n_threads"), n("n_depth"), n("n_prompt"), n("n_gen"))
        })
        .collect();
    let mut want = Vec::new();
    for threads in [1, 2] {
        for depth in [0, 4] {
            for p in [3, 5] {
                want.push((threads, depth, p, 0));
            }
        }
    }
    assert_eq!(got, want);

    // The flag repeated is the same as a list; `-p 0` leaves only the tg tests.
    let tests = bench_json(&["-p", "0", "-n", "2", "-n", "3", "-r", "2"]);
    let got: Vec<(u64, u64)> = tests
        .iter()
        .map(|t| {
            (
                t["n_prompt"].as_u64().unwrap(),
                t["n_gen"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [(0, 2), (0, 3)]);
    for t in &tests {
        assert_eq!(f64s(t, "samples_ns").len(), 2);
    }

    let model = fixture();
    let out = bench(&[
        model.to_str().expect("utf-8"),
        "-p",
        "6",
        "-n",
        "0",
        "-r",
        "1",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("| pp6 |"), "{text}");
    assert!(!text.contains("| tg"), "-n 0 ran a tg test: {text}");
}

/// Several models run one after another, each through every test, in one table and one JSON
/// array (llama-bench's repeated `-m`); each row names its own file.
#[test]
fn several_models_in_one_run() {
    let tiny = fixture();
    // The same model as a Hugging Face directory: another file, another loader.
    let hf = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny_chat/hf");
    let (a, b) = (tiny.to_str().unwrap(), hf.to_str().unwrap());
    let out = bench(&[a, b, "-p", "4", "-n", "2", "-t", "1,2", "-r", "1", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let got: Vec<(String, u64, u64, u64, u64)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["model_filename"].as_str().unwrap().to_string(),
                t["model_size"].as_u64().unwrap(),
                t["n_threads"].as_u64().unwrap(),
                t["n_prompt"].as_u64().unwrap(),
                t["n_gen"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut want = Vec::new();
    for m in [&tiny, &hf] {
        for t in [1, 2] {
            for (p, n) in [(4, 0), (0, 2)] {
                want.push((m.display().to_string(), t, p, n));
            }
        }
    }
    let names: Vec<_> = got.iter().map(|g| (g.0.clone(), g.2, g.3, g.4)).collect();
    assert_eq!(names, want);
    assert!(got.iter().all(|g| g.1 > 0), "{got:?}");

    let out = bench(&[a, b, "-p", "4", "-n", "0", "-t", "1", "-r", "1"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("| pp4 |")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert_ne!(
        rows[0].split('|').nth(1),
        rows[1].split('|').nth(1),
        "{text}"
    );

    // A missing second model is an error naming it, not a partial table.
    let missing = "/nonexistent/model.gguf";
    let out = bench(&[a, missing, "-p", "4", "-n", "0", "-r", "1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(missing));
}

/// `-o jsonl` prints one object per line with the JSON fields, `-o csv` a header and one
/// quoted row per test (llama-bench's formats); `--json` with another `-o` is refused.
#[test]
fn output_formats_jsonl_and_csv() {
    let model = fixture();
    let m = model.to_str().expect("utf-8");
    let run = |args: &[&str]| {
        let out = bench(&[&[m, "-p", "4", "-n", "3", "-r", "2", "-t", "1"], args].concat());
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    };

    let jsonl = run(&["-o", "jsonl"]);
    let objects: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect();
    assert_eq!(objects.len(), 2, "{jsonl}");
    for (o, (p, n)) in objects.iter().zip([(4u64, 0u64), (0, 3)]) {
        assert_eq!(
            (o["n_prompt"].as_u64(), o["n_gen"].as_u64()),
            (Some(p), Some(n))
        );
        assert_eq!(f64s(o, "samples_ts").len(), 2);
    }

    let csv = run(&["-o", "csv"]);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "a header and two rows: {csv}");
    let header: Vec<&str> = lines[0].split(',').collect();
    for field in [
        "model_type",
        "n_threads",
        "n_prompt",
        "n_gen",
        "avg_ts",
        "stddev_ts",
    ] {
        assert!(header.contains(&field), "{field} missing from {header:?}");
    }
    assert!(!header.contains(&"samples_ns"), "arrays are left out");
    for (row, (p, n)) in lines[1..].iter().zip([("4", "0"), ("0", "3")]) {
        // No field here holds a comma or a quote, so splitting on commas is exact.
        let cells: Vec<&str> = row.split(',').collect();
        assert_eq!(cells.len(), header.len(), "{row}");
        assert!(cells.iter().all(|c| c.starts_with('"') && c.ends_with('"')));
        let cell = |name: &str| {
            let i = header.iter().position(|h| *h == name).expect("field");
            cells[i].trim_matches('"')
        };
        assert_eq!((cell("n_prompt"), cell("n_gen")), (p, n));
        assert!(cell("avg_ts").parse::<f64>().expect("a number") > 0.0);
    }

    let out = bench(&[m, "--json", "-o", "csv"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("two formats"));
    assert!(out.stdout.is_empty());
}

/// `--pg PP,TG` times a prompt and the tokens generated after it together, counting both in
/// t/s; with `-p 0 -n 0` it is the only test.
#[test]
fn prompt_and_generation_test() {
    let tests = bench_json(&[
        "-p", "0", "-n", "0", "--pg", "6,3", "--pg", "2,2", "-r", "2",
    ]);
    let got: Vec<(u64, u64)> = tests
        .iter()
        .map(|t| {
            (
                t["n_prompt"].as_u64().unwrap(),
                t["n_gen"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [(6, 3), (2, 2)]);
    for t in &tests {
        let tokens = (t["n_prompt"].as_u64().unwrap() + t["n_gen"].as_u64().unwrap()) as f64;
        for (n, s) in f64s(t, "samples_ns").iter().zip(f64s(t, "samples_ts")) {
            assert!((s - tokens * 1e9 / n).abs() <= 1e-9 * s, "{t}");
        }
    }
    let model = fixture();
    let out = bench(&[
        model.to_str().expect("utf-8"),
        "-p",
        "4",
        "-n",
        "0",
        "--pg",
        "5,2",
        "-r",
        "1",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("| pp4 |"), "{text}");
    assert!(text.contains("| pp5+tg2 |"), "{text}");
}

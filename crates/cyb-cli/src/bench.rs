//! `cyb-llm bench MODEL...`: prompt processing (pp) and generation (tg) speed, measured the way
//! llama.cpp's `llama-bench` measures so the two can be set side by side on the same file.
//!
//! - pp<P>: one bulk forward of P random token ids from an empty context (the first id is BOS
//!   when the model adds one); t/s = P / time.
//! - tg<N>: N single-token forwards from an empty context, each fed a random id (llama-bench
//!   does not sample either); t/s = N / time.
//! - `-d D` (llama-bench's `--n-depth`): both tests run after D tokens already in the context
//!   ("pp128 @ d1024"); the D tokens are prefilled untimed once per test, and every repeat
//!   starts from them (the cache cut back to D).
//!
//! Each test runs once untimed to warm up (pp: the full prompt; tg: one token), then R timed
//! repeats, each from an empty cache (or the D-token context). Tokenization and sampling are
//! never timed. The human table shows the median ± the sample standard deviation; `--json`
//! prints llama-bench's field names (`avg_ts` is the mean, as there) plus `median_ts`,
//! `load_ms`, `peak_rss_bytes` and, on a GPU backend, `gpu_mem_bytes` (the most device
//! memory held so far).
//!
//! As in llama-bench, `-p`, `-n`, `-d` and `-t` take lists (`-p 128,512`, or the flag
//! repeated) and every combination runs: for each thread count the model is loaded once, then
//! for each depth the pp tests of every `-p` and the tg tests of every `-n`; a 0 in `-p` or
//! `-n` skips that kind of test (`-n 0`: prefill only). Several models run one after another
//! (llama-bench's repeated `-m`), each through every combination, in one table. `--pg PP,TG`
//! (llama-bench's `-pg`) adds
//! a test of both in one run: PP tokens in one forward, then TG single-token forwards after
//! them, t/s = (PP + TG) / time (`pp512+tg128`).

use cyb_runtime::{BenchSession, ExecPath, Model, Runtime, RuntimeOptions};
use cyb_tensor::{Error, Result};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// GGUF files or Hugging Face directories (several: each runs every test in turn, as
    /// llama-bench's repeated `-m`); or graph models (ONNX files, or `.model` files of a graph
    /// with --input/--shape), timed per run on one set of inputs.
    #[arg(required = true, num_args = 1..)]
    pub models: Vec<PathBuf>,
    /// Prompt tokens of the pp tests (a list: `-p 128,512`; 0 skips the pp tests).
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "128"
    )]
    pub n_prompt: Vec<usize>,
    /// Generated tokens of the tg tests (a list; 0 skips the tg tests).
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "64"
    )]
    pub n_gen: Vec<usize>,
    /// Tokens already in the context when each test starts (llama-bench's `-d`; a list).
    #[arg(
        short = 'd',
        long = "n-depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    pub n_depth: Vec<usize>,
    /// Timed repeats of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub reps: usize,
    /// Compute threads (a list: the model is loaded once per count; default: all cores).
    #[arg(short = 't', long = "threads", value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// A prompt and generation test, as llama-bench's `-pg PP,TG`: a bulk forward of PP tokens,
    /// then TG single-token forwards, timed together (`pp512+tg128`; repeatable).
    #[arg(long = "pg", value_name = "PP,TG", value_parser = parse_pg)]
    pub pg: Vec<(usize, usize)>,
    /// Backend: auto (a discrete or integrated GPU when there is one, else cpu), cpu, wgpu or
    /// reference (`cyb-llm backends` lists them and says what auto picks).
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Print a JSON array, one object per test, with llama-bench's field names (`-o json`).
    #[arg(long)]
    pub json: bool,
    /// Output format, as llama-bench's `-o`: md (the table), json (an array), jsonl (one
    /// object per line) or csv (a header, then one quoted row per test; no sample arrays).
    #[arg(short = 'o', long = "output", value_enum, default_value = "md")]
    pub output: OutputFormat,
    /// A graph model's input from a file: `NAME=FILE.npy` (repeatable; graph models: ONNX
    /// files, or any model given --input or --shape).
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// A graph model's input made at this shape: `NAME=1x3x640x640` (random values in
    /// [-1, 1) for float inputs, zeros for integer ones; default: the graph's fixed shape).
    #[arg(long = "shape", value_name = "NAME=DIMS")]
    pub shapes: Vec<String>,
}

/// `cyb-llm bench -o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Md,
    Json,
    Jsonl,
    Csv,
}

/// One finished test.
struct TestResult {
    /// Which load (thread count) of the model it ran on: an index into the run infos.
    run: usize,
    n_depth: usize,
    n_prompt: usize,
    n_gen: usize,
    samples_ns: Vec<u64>,
    test_time: String,
    peak_rss_bytes: Option<u64>,
    /// The most device memory the backend held by the end of the test (GPU backends).
    gpu_mem_bytes: Option<u64>,
}

impl TestResult {
    fn tokens(&self) -> usize {
        self.n_prompt + self.n_gen
    }

    fn samples_ts(&self) -> Vec<f64> {
        let n = self.tokens() as f64;
        self.samples_ns
            .iter()
            .map(|&ns| n * 1e9 / ns.max(1) as f64)
            .collect()
    }

    fn name(&self) -> String {
        let test = if self.n_gen == 0 {
            format!("pp{}", self.n_prompt)
        } else if self.n_prompt > 0 {
            format!("pp{}+tg{}", self.n_prompt, self.n_gen)
        } else {
            format!("tg{}", self.n_gen)
        };
        match self.n_depth {
            0 => test,
            d => format!("{test} @ d{d}"),
        }
    }
}

/// What the table and JSON say about the model and the run.
struct RunInfo {
    model_filename: String,
    model_type: String,
    model_size: u64,
    model_n_params: u64,
    backend: String,
    threads: usize,
    load_ms: f64,
}

pub fn run(args: BenchArgs) -> Result<()> {
    if args.reps == 0 {
        return Err(Error::invalid("bench", "-r must be at least 1"));
    }
    let format = match (args.json, args.output) {
        (false, f) | (true, f @ (OutputFormat::Json | OutputFormat::Md)) => {
            if args.json {
                OutputFormat::Json
            } else {
                f
            }
        }
        (true, f) => {
            return Err(Error::invalid(
                "bench",
                format!("--json and -o {f:?} ask for two formats").to_lowercase(),
            ))
        }
    };
    for (flag, list) in [
        ("-p", &args.n_prompt),
        ("-n", &args.n_gen),
        ("-d", &args.n_depth),
    ] {
        if list.is_empty() {
            return Err(Error::invalid("bench", format!("{flag} needs a value")));
        }
    }
    if args.n_prompt.iter().chain(&args.n_gen).all(|&v| v == 0) && args.pg.is_empty() {
        return Err(Error::invalid(
            "bench",
            "nothing to run: every -p and -n value is 0 (0 skips that test)",
        ));
    }
    if args.threads.contains(&0) {
        return Err(Error::invalid("bench", "-t must be at least 1"));
    }
    let thread_counts = match args.threads.is_empty() {
        true => vec![std::thread::available_parallelism().map_or(1, |n| n.get())],
        false => args.threads.clone(),
    };
    if args
        .models
        .iter()
        .any(|m| crate::bench_graph::is_graph(m, &args))
    {
        return crate::bench_graph::run(&args, format, &thread_counts);
    }
    let max_test = args
        .n_prompt
        .iter()
        .chain(&args.n_gen)
        .copied()
        .chain(args.pg.iter().map(|&(p, n)| p.saturating_add(n)))
        .max();
    let ctx = max_test
        .unwrap_or(1)
        .checked_add(args.n_depth.iter().max().copied().unwrap_or(0))
        .ok_or_else(|| Error::invalid("bench", "-d is too large"))?;

    let mut infos = Vec::new();
    let mut results = Vec::new();
    let runs = args
        .models
        .iter()
        .flat_map(|m| thread_counts.iter().map(move |&t| (m, t)));
    for (run_index, (path, threads)) in runs.enumerate() {
        if run_index == 0 {
            size_rayon_pool(threads);
        }
        let rt = Runtime::new(RuntimeOptions {
            backend: Some(args.backend.clone()),
            path: ExecPath::Auto,
            cpu: Some(cyb_runtime::CpuOptions {
                threads: Some(threads),
                ..cyb_runtime::CpuOptions::from_env()?
            }),
            ..RuntimeOptions::default()
        })?;
        let model = rt.load(path)?;
        infos.push(RunInfo {
            backend: rt.dispatcher().primary().name().to_string(),
            threads,
            load_ms: model.load_ms(),
            ..describe(&model)?
        });
        let mut session = model.bench_session(ctx)?;
        for &depth in &args.n_depth {
            let tests = run_depth(&model, &mut session, depth, &args)?;
            let gpu_mem_bytes = rt.dispatcher().primary().device_memory().map(|m| m.peak);
            results.extend(tests.into_iter().map(|t| TestResult {
                run: run_index,
                gpu_mem_bytes,
                ..t
            }));
        }
    }

    let objects = || -> Vec<Value> { results.iter().map(|r| to_json(&infos[r.run], r)).collect() };
    let to_text =
        |v: &Value| serde_json::to_string(v).map_err(|e| Error::invalid("bench", e.to_string()));
    match format {
        OutputFormat::Md => print_table(&infos, &results, args.reps),
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&objects())
                .map_err(|e| Error::invalid("bench", e.to_string()))?
        ),
        OutputFormat::Jsonl => {
            for o in objects() {
                println!("{}", to_text(&o)?);
            }
        }
        OutputFormat::Csv => print!("{}", to_csv(&objects())),
    }
    Ok(())
}

/// The objects' scalar fields as CSV, as llama-bench's `-o csv`: a header of the field names
/// (the first object's, in order), then one row per object with every value in double quotes
/// (quotes inside doubled); the sample arrays are left out.
fn to_csv(objects: &[Value]) -> String {
    let Some(Value::Object(first)) = objects.first() else {
        return String::new();
    };
    let fields: Vec<&String> = first.keys().filter(|k| !first[*k].is_array()).collect();
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let mut out = fields
        .iter()
        .map(|f| f.as_str())
        .collect::<Vec<_>>()
        .join(",");
    out.push('\n');
    for o in objects {
        let row: Vec<String> = fields
            .iter()
            .map(|f| match &o[f.as_str()] {
                Value::String(s) => quote(s),
                Value::Null => quote(""),
                v => quote(&v.to_string()),
            })
            .collect();
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

/// The pp tests of every `-p` and the tg tests of every `-n` (0s skipped) after `depth`
/// tokens of context.
fn run_depth(
    model: &Model,
    session: &mut BenchSession,
    depth: usize,
    args: &BenchArgs,
) -> Result<Vec<TestResult>> {
    let vocab = model.config().vocab_size as u64;
    let bos = match (model.tokenizer().add_bos(), model.tokenizer().bos_id()) {
        (true, Some(b)) => Some(b),
        _ => None,
    };
    // A fixed seed: every run feeds the same ids, which only matters for MoE routing.
    let mut rng = SplitMix64(0x5eed_cb11);
    let mut draw = move || (rng.next() % vocab) as u32;
    // The context's first id is BOS when the model adds one: the depth's, else the test's.
    let depth_ids = token_ids(depth, bos, &mut draw);
    let first = bos.filter(|_| depth == 0);
    // The untimed context every repeat of a test starts from: prefilled in chunks of at most
    // DEPTH_CHUNK tokens (bounding the activations of a deep context).
    let fill = |session: &mut BenchSession| -> Result<()> {
        session.clear();
        for chunk in depth_ids.chunks(DEPTH_CHUNK) {
            session.feed(chunk)?;
        }
        Ok(())
    };

    let mut results = Vec::new();
    // pp: one bulk forward.
    for &n_prompt in args.n_prompt.iter().filter(|&&p| p > 0) {
        let prompt = token_ids(n_prompt, first, &mut draw);
        fill(session)?;
        session.feed(&prompt)?;
        let mut samples = Vec::with_capacity(args.reps);
        for _ in 0..args.reps {
            session.truncate(depth);
            let t0 = Instant::now();
            session.feed(&prompt)?;
            samples.push(elapsed_ns(t0));
        }
        results.push(finish(depth, n_prompt, 0, samples));
    }

    // tg: single-token forwards.
    for &n_gen in args.n_gen.iter().filter(|&&n| n > 0) {
        let start = first.unwrap_or_else(&mut draw);
        fill(session)?;
        session.feed(&[start])?;
        let mut samples = Vec::with_capacity(args.reps);
        for _ in 0..args.reps {
            session.truncate(depth);
            let ids: Vec<u32> = std::iter::once(start)
                .chain((1..n_gen).map(|_| draw()))
                .collect();
            let t0 = Instant::now();
            for &id in &ids {
                session.feed(&[id])?;
            }
            samples.push(elapsed_ns(t0));
        }
        results.push(finish(depth, 0, n_gen, samples));
    }

    // pp+tg: the prompt in one forward, then the generated tokens one at a time.
    for &(n_prompt, n_gen) in &args.pg {
        let prompt = token_ids(n_prompt, first, &mut draw);
        fill(session)?;
        session.feed(&prompt)?;
        let mut samples = Vec::with_capacity(args.reps);
        for _ in 0..args.reps {
            session.truncate(depth);
            let ids: Vec<u32> = (0..n_gen).map(|_| draw()).collect();
            let t0 = Instant::now();
            session.feed(&prompt)?;
            for &id in &ids {
                session.feed(&[id])?;
            }
            samples.push(elapsed_ns(t0));
        }
        results.push(finish(depth, n_prompt, n_gen, samples));
    }
    Ok(results)
}

/// `n` random token ids from `draw`, the first of them `first` when given (BOS).
fn token_ids(n: usize, first: Option<u32>, draw: &mut impl FnMut() -> u32) -> Vec<u32> {
    (0..n)
        .map(|i| match (i, first) {
            (0, Some(b)) => b,
            _ => draw(),
        })
        .collect()
}

/// `--pg PP,TG`: two counts, both at least 1.
fn parse_pg(s: &str) -> std::result::Result<(usize, usize), String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let [p, n] = parts[..] else {
        return Err(format!("expected PP,TG (two counts), got {s:?}"));
    };
    let count = |v: &str| v.parse::<usize>().map_err(|e| format!("{v:?}: {e}"));
    match (count(p)?, count(n)?) {
        (0, _) | (_, 0) => Err(format!("both counts of {s:?} must be at least 1")),
        pair => Ok(pair),
    }
}

/// Gives rayon's global pool (the reference backend's) `threads` workers. It can be built only
/// once, so later thread counts of a `-t` list apply to the cpu backend alone.
pub(crate) fn size_rayon_pool(threads: usize) {
    if let Err(e) = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
    {
        tracing::warn!("rayon's thread pool was already built; -t may not apply to it: {e}");
    }
}

/// Most tokens of the `-d` context prefilled in one forward.
const DEPTH_CHUNK: usize = 512;

fn finish(n_depth: usize, n_prompt: usize, n_gen: usize, samples_ns: Vec<u64>) -> TestResult {
    TestResult {
        run: 0,
        n_depth,
        n_prompt,
        n_gen,
        samples_ns,
        test_time: utc_now(),
        peak_rss_bytes: peak_rss_bytes(),
        gpu_mem_bytes: None,
    }
}

fn elapsed_ns(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Size, parameter count and a llama-bench-like type string ("llama 135M Q8_0") from the
/// file's tensor list and `general.file_type`.
fn describe(model: &Model) -> Result<RunInfo> {
    let file = Model::open_file(model.path())?;
    let tensors = file.tensors();
    let model_size: u64 = tensors.iter().map(|t| t.byte_len as u64).sum();
    let model_n_params: u64 = tensors.iter().map(|t| t.shape.numel() as u64).sum();
    let file_type = file
        .metadata_value("general.file_type")
        .and_then(|v| v.as_u64());
    // Files without `general.file_type` (Hugging Face directories) get no type word.
    let ftype = file_type.and_then(file_type_name).unwrap_or_default();
    Ok(RunInfo {
        model_filename: model.path().display().to_string(),
        model_type: format!(
            "{} {} {ftype}",
            model.config().architecture,
            params_label(model_n_params)
        )
        .trim_end()
        .to_string(),
        model_size,
        model_n_params,
        backend: String::new(),
        threads: 0,
        load_ms: 0.0,
    })
}

/// llama.cpp's names for `general.file_type` (`llama_ftype`).
fn file_type_name(ft: u64) -> Option<&'static str> {
    Some(match ft {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        32 => "BF16",
        36 => "TQ1_0 - 1.69 bpw ternary",
        37 => "TQ2_0 - 2.06 bpw ternary",
        _ => return None,
    })
}

fn params_label(n: u64) -> String {
    if n >= 1_000_000_000 {
        format!("{:.1}B", n as f64 / 1e9)
    } else if n >= 10_000_000 {
        format!("{:.0}M", n as f64 / 1e6)
    } else {
        format!("{:.2}M", n as f64 / 1e6)
    }
}

fn to_json(info: &RunInfo, r: &TestResult) -> Value {
    let ts = r.samples_ts();
    let ns: Vec<f64> = r.samples_ns.iter().map(|&x| x as f64).collect();
    json!({
        "build_commit": concat!("cyb-llm ", env!("CARGO_PKG_VERSION")),
        "cpu_info": cpu_info(),
        "backends": info.backend,
        "model_filename": info.model_filename,
        "model_type": info.model_type,
        "model_size": info.model_size,
        "model_n_params": info.model_n_params,
        "n_batch": r.n_prompt.max(1),
        "n_threads": info.threads,
        "n_prompt": r.n_prompt,
        "n_gen": r.n_gen,
        "n_depth": r.n_depth,
        "test_time": r.test_time,
        "avg_ns": mean(&ns).round() as u64,
        "stddev_ns": stddev(&ns).round() as u64,
        "avg_ts": mean(&ts),
        "stddev_ts": stddev(&ts),
        "median_ts": median(&ts),
        "load_ms": info.load_ms,
        "peak_rss_bytes": r.peak_rss_bytes,
        "gpu_mem_bytes": r.gpu_mem_bytes,
        "samples_ns": r.samples_ns,
        "samples_ts": ts,
    })
}

fn print_table(infos: &[RunInfo], results: &[TestResult], reps: usize) {
    println!("| model | size | params | backend | threads | test | t/s |");
    println!("| ----- | ---: | -----: | ------- | ------: | ---: | --: |");
    for r in results {
        let ts = r.samples_ts();
        let info = &infos[r.run];
        let size = if info.model_size < 1 << 30 {
            format!("{:.2} MiB", info.model_size as f64 / (1u64 << 20) as f64)
        } else {
            format!("{:.2} GiB", info.model_size as f64 / (1u64 << 30) as f64)
        };
        let params = if info.model_n_params < 1_000_000_000 {
            format!("{:.2} M", info.model_n_params as f64 / 1e6)
        } else {
            format!("{:.2} B", info.model_n_params as f64 / 1e9)
        };
        println!(
            "| {} | {size} | {params} | {} | {} | {} | {:.2} ± {:.2} |",
            info.model_type,
            info.backend,
            info.threads,
            r.name(),
            median(&ts),
            stddev(&ts)
        );
    }
    let rss = results
        .iter()
        .filter_map(|r| r.peak_rss_bytes)
        .max()
        .map_or_else(
            || "unknown".into(),
            |b| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        );
    let load = infos
        .iter()
        .map(|i| format!("{:.0}", i.load_ms))
        .collect::<Vec<_>>()
        .join(", ");
    let gpu = results
        .iter()
        .filter_map(|r| r.gpu_mem_bytes)
        .max()
        .map(|b| {
            format!(
                "; peak GPU memory {:.1} MiB",
                b as f64 / (1u64 << 20) as f64
            )
        })
        .unwrap_or_default();
    println!();
    println!(
        "t/s: median of {reps} runs ± sample standard deviation; load {load} ms; peak RSS \
         {rss}{gpu}"
    );
}

pub(crate) fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

/// Sample standard deviation (n - 1), 0 for fewer than two samples, as llama-bench.
pub(crate) fn stddev(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    let ss: f64 = v.iter().map(|x| (x - m) * (x - m)).sum();
    (ss / (v.len() - 1) as f64).sqrt()
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The process's peak resident set (Linux `VmHWM`); `None` where /proc is absent.
pub(crate) fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

pub(crate) fn cpu_info() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The current UTC time as ISO 8601 (`2024-05-01T12:00:00Z`), like llama-bench's `test_time`.
pub(crate) fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A tiny fixed-seed generator for token ids (statistical quality is irrelevant here).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

//! `cyb-llm bench MODEL.onnx [--input NAME=FILE.npy] [--shape NAME=1x3x640x640] [-r N]`: a
//! graph model (an ONNX file, or a `.model` holding a graph) run repeatedly on one set of
//! inputs, as onnxruntime's perf test reports it: the first run, then the median and spread of
//! `-r` timed runs, and the peak RSS. Inputs not given as `.npy` files are made: random values
//! in [-1, 1) for float inputs, zeros for integer ones, of the `--shape` given or the graph's
//! own fixed shape.

use crate::bench::{cpu_info, mean, median, peak_rss_bytes, size_rayon_pool, stddev, utc_now};
use crate::bench::{BenchArgs, OutputFormat};
use cyb_runtime::{Runtime, RuntimeOptions};
use cyb_tensor::{DType, Error, Result, Tensor};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

/// Whether `bench` takes `path` as a graph model.
pub fn is_graph(path: &Path, args: &BenchArgs) -> bool {
    !args.inputs.is_empty()
        || !args.shapes.is_empty()
        || path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

pub fn run(args: &BenchArgs, format: OutputFormat, thread_counts: &[usize]) -> Result<()> {
    let mut rows = Vec::new();
    for (run_index, &threads) in thread_counts.iter().enumerate() {
        if run_index == 0 {
            size_rayon_pool(threads);
        }
        let rt = Runtime::new(RuntimeOptions {
            backend: Some(args.backend.clone()),
            cpu: Some(cyb_runtime::CpuOptions {
                threads: Some(threads),
                ..cyb_runtime::CpuOptions::from_env()?
            }),
            ..RuntimeOptions::default()
        })?;
        for path in &args.models {
            let t0 = Instant::now();
            let model = rt.load_graph(path, true)?;
            let load_ms = t0.elapsed().as_secs_f64() * 1e3;
            let inputs = make_inputs(model.graph(), args)?;
            let t = Instant::now();
            model.run(&inputs)?;
            let first_ns = t.elapsed().as_nanos() as u64;
            let mut samples_ns = Vec::with_capacity(args.reps);
            for _ in 0..args.reps {
                let t = Instant::now();
                model.run(&inputs)?;
                samples_ns.push(t.elapsed().as_nanos() as u64);
            }
            let ns: Vec<f64> = samples_ns.iter().map(|&x| x as f64).collect();
            rows.push(json!({
                "build_commit": concat!("cyb-llm ", env!("CARGO_PKG_VERSION")),
                "cpu_info": cpu_info(),
                "backends": rt.backend_choice().name,
                "model_filename": path.display().to_string(),
                "model_type": "graph",
                "n_threads": threads,
                "test": "graph",
                "test_time": utc_now(),
                "load_ms": load_ms,
                "first_ns": first_ns,
                "avg_ns": mean(&ns).round() as u64,
                "stddev_ns": stddev(&ns).round() as u64,
                "median_ns": median(&ns).round() as u64,
                "samples_ns": samples_ns,
                "peak_rss_bytes": peak_rss_bytes(),
                "gpu_mem_bytes": rt.dispatcher().primary().device_memory().map(|m| m.peak),
            }));
        }
    }
    print_rows(&rows, format, args.reps)
}

fn print_rows(rows: &[Value], format: OutputFormat, reps: usize) -> Result<()> {
    let text =
        |v: &Value| serde_json::to_string(v).map_err(|e| Error::invalid("bench", e.to_string()));
    match format {
        OutputFormat::Json => println!("{}", text(&Value::Array(rows.to_vec()))?),
        OutputFormat::Jsonl => {
            for r in rows {
                println!("{}", text(r)?);
            }
        }
        OutputFormat::Csv => {
            let keys = [
                "model_filename",
                "backends",
                "n_threads",
                "load_ms",
                "first_ns",
                "avg_ns",
                "stddev_ns",
                "median_ns",
                "peak_rss_bytes",
            ];
            println!("{}", keys.join(","));
            for r in rows {
                let cells: Vec<String> = keys
                    .iter()
                    .map(|k| format!("\"{}\"", r[k].to_string().trim_matches('"')))
                    .collect();
                println!("{}", cells.join(","));
            }
        }
        OutputFormat::Md => {
            println!("| model | backend | threads | first run ms | ms per run |");
            println!("| ----- | ------- | ------: | -----------: | ---------: |");
            let ms = |v: &Value| v.as_u64().unwrap_or(0) as f64 / 1e6;
            for r in rows {
                println!(
                    "| {} | {} | {} | {:.2} | {:.2} ± {:.2} |",
                    r["model_filename"].as_str().unwrap_or_default(),
                    r["backends"].as_str().unwrap_or_default(),
                    r["n_threads"],
                    ms(&r["first_ns"]),
                    ms(&r["median_ns"]),
                    ms(&r["stddev_ns"]),
                );
            }
            let rss = rows
                .iter()
                .filter_map(|r| r["peak_rss_bytes"].as_u64())
                .max()
                .map_or_else(
                    || "unknown".into(),
                    |b| format!("{:.1} MiB", b as f64 / 1048576.0),
                );
            println!();
            println!(
                "ms per run: median of {reps} runs ± sample standard deviation; peak RSS {rss}"
            );
        }
    }
    Ok(())
}

/// The graph's inputs: from `--input` files, else made of `--shape` or the graph's fixed shape.
fn make_inputs(graph: &cyb_graph::Graph, args: &BenchArgs) -> Result<HashMap<String, Tensor>> {
    let mut given = crate::infer::read_inputs(&args.inputs)?;
    let mut shapes = HashMap::new();
    for spec in &args.shapes {
        let (name, dims) = spec
            .split_once('=')
            .ok_or_else(|| Error::invalid("--shape", format!("{spec:?} is not NAME=DIMS")))?;
        let dims: Vec<usize> = dims
            .split(['x', ','])
            .map(|d| d.trim().parse::<usize>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| Error::invalid("--shape", format!("{spec:?} is not NAME=1x3x640x640")))?;
        shapes.insert(name.to_string(), dims);
    }
    let names: Vec<&str> = graph
        .inputs
        .iter()
        .map(|&id| graph.values[id].name.as_str())
        .collect();
    for name in given.keys().chain(shapes.keys()) {
        if !names.contains(&name.as_str()) {
            return Err(Error::invalid(
                "bench",
                format!(
                    "the graph has no input {name:?}; its inputs: {}",
                    names.join(", ")
                ),
            ));
        }
    }
    let mut out = HashMap::new();
    for (i, &id) in graph.inputs.iter().enumerate() {
        let value = &graph.values[id];
        if let Some(t) = given.remove(&value.name) {
            out.insert(value.name.clone(), t);
            continue;
        }
        let ty = value.ty.as_ref();
        let dtype = ty.map_or(DType::F32, |t| t.dtype);
        let dims = match shapes.get(&value.name) {
            Some(d) => d.clone(),
            None => ty.and_then(|t| t.fixed_dims()).ok_or_else(|| {
                let shown = ty
                    .and_then(|t| t.dims.as_ref())
                    .map(|d| {
                        d.iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("x")
                    })
                    .unwrap_or_else(|| "unknown".into());
                Error::invalid(
                    "bench",
                    format!(
                        "input {:?} has the shape {shown}; give it with --shape {}=... or \
                         --input {}=FILE.npy",
                        value.name, value.name, value.name
                    ),
                )
            })?,
        };
        out.insert(value.name.clone(), made_input(dtype, &dims, i as u64)?);
    }
    Ok(out)
}

/// Random values in [-1, 1) for float dtypes, zeros otherwise (ids, lengths, masks).
fn made_input(dtype: DType, dims: &[usize], seed: u64) -> Result<Tensor> {
    let n = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::invalid("--shape", format!("{dims:?} has too many elements")))?;
    cyb_tensor::memory::check_tensor("bench input", dims, dtype)?;
    if dtype.is_float() {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let vals: Vec<f32> = (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect();
        return Tensor::from_f32_as(dims, &vals, dtype);
    }
    Tensor::zeros(dims, dtype)
}

//! Times one matmul `[m, k] · [n, k]ᵀ` per weight dtype on the cpu backend and prints the best
//! of several runs in GMAC/s (the best run is the least disturbed on a shared machine), the
//! rate by CPU time over a second of calls, and those calls' median.
//!
//! `cargo run --release -p cyb-cpu --example gemm_bench -- [M] [N] [K] [THREADS] [DTYPES]`
//! (defaults 128 2048 2048 1 f16,q8_0,q4_0,q4_k,q6_k); `CYB_CPU_ACT` picks the activations.

use cyb_backend::{Backend, ExecContext};
use cyb_cpu::{CpuBackend, CpuOptions};
use cyb_ops::Op;
use cyb_tensor::{DType, Shape, Storage, Tensor};
use std::sync::Arc;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (m, n, k, threads) = (num(0, 128), num(1, 2048), num(2, 2048), num(3, 1));
    let dtypes = args
        .get(4)
        .cloned()
        .unwrap_or_else(|| "f16,q8_0,q4_0,q4_k,q6_k".into());
    let backend = CpuBackend::from_options(&CpuOptions {
        threads: Some(threads),
        ..CpuOptions::from_env()?
    })?;
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut rand = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    };
    let a = Tensor::from_f32(&[m, k], &rand(m * k))?;
    let op = Op::MatMul {
        rhs_transposed: true,
    };
    for name in dtypes.split(',') {
        let dtype = match name {
            "f32" => DType::F32,
            "f16" => DType::F16,
            "bf16" => DType::BF16,
            "q8_0" => DType::Q8_0,
            "q4_0" => DType::Q4_0,
            "q4_1" => DType::Q4_1,
            "q5_0" => DType::Q5_0,
            "q4_k" => DType::Q4_K,
            "q5_k" => DType::Q5_K,
            "q5_1" => DType::Q5_1,
            "q2_k" => DType::Q2_K,
            "q3_k" => DType::Q3_K,
            "tq1_0" => DType::TQ1_0,
            "tq2_0" => DType::TQ2_0,
            "q6_k" => DType::Q6_K,
            other => return Err(format!("unknown dtype {other}").into()),
        };
        // CYB_BENCH_WEIGHTS=N cycles through N different weights, so that (with N large
        // enough) each call reads its weight from memory as a model's forward pass does.
        let copies: usize = std::env::var("CYB_BENCH_WEIGHTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
            .max(1);
        let mut weights = Vec::new();
        for _ in 0..copies {
            let host = Tensor::from_f32_as(&[n, k], &rand(n * k), dtype)?;
            let bytes = host.host_bytes().ok_or("weight not on host")?.to_vec();
            let len = bytes.len();
            let storage = Storage::Shared {
                owner: Arc::new(bytes),
                offset: 0,
                len,
            };
            weights.push(Tensor::new(Shape::new(vec![n, k])?, dtype, storage)?);
        }
        let len = weights[0].host_bytes().map_or(0, |b| b.len());
        let mut calls_made = 0usize;
        let mut inputs = [a.clone(), weights[0].clone()];
        let mut next = |inputs: &mut [Tensor; 2]| {
            calls_made += 1;
            inputs[1] = weights[calls_made % copies].clone();
        };
        for w in &weights[1..] {
            // Pack every weight once before timing.
            backend.execute(&op, &[a.clone(), w.clone()], &mut ExecContext::default())?;
        }
        // The first call repacks a quantized weight; report it apart.
        let t = Instant::now();
        backend.execute(&op, &inputs, &mut ExecContext::default())?;
        let first = t.elapsed().as_secs_f64();
        let mut best = f64::MAX;
        for _ in 0..15 {
            next(&mut inputs);
            let t = Instant::now();
            backend.execute(&op, &inputs, &mut ExecContext::default())?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        // CPU time of a ~1 s loop: steadier than wall time on a shared machine (with one
        // thread it is the work alone).
        let (t, c0) = (Instant::now(), cpu_seconds());
        let mut calls = 0;
        let mut each = Vec::new();
        while t.elapsed().as_secs_f64() < 1.0 {
            next(&mut inputs);
            let c = Instant::now();
            backend.execute(&op, &inputs, &mut ExecContext::default())?;
            each.push(c.elapsed().as_secs_f64());
            calls += 1;
        }
        each.sort_by(f64::total_cmp);
        let median = each[each.len() / 2];
        let cpu = (cpu_seconds() - c0) / f64::from(calls) / threads as f64;
        let gmac_cpu = (m * n * k) as f64 / cpu / 1e9;
        let gmac = (m * n * k) as f64 / best / 1e9;
        let gbs = len as f64 / best / 1e9;
        println!(
            "{name:>5} m={m} n={n} k={k} t={threads}: {:8.3} ms {gmac:7.1} GMAC/s {gbs:6.1} GB/s \
             of weights (first call {:.1} ms); by CPU time {gmac_cpu:7.1} GMAC/s; median \
             {:.3} ms, {:.1} GB/s",
            best * 1e3,
            first * 1e3,
            median * 1e3,
            len as f64 / median / 1e9
        );
    }
    Ok(())
}

/// User + system CPU seconds of this process so far (Linux; 0 elsewhere).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    // utime and stime are fields 14 and 15 of the line: 12th and 13th after the state field.
    f.get(10)
        .zip(f.get(11))
        .map_or(0.0, |(u, s)| (u + s) / 100.0)
}

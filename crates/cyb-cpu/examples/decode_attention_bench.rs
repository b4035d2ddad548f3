//! Times one decode step's attention (`Op::Sdpa`, one query position) on the cpu backend over
//! a KV cache of `LK` tokens: the median of many calls, each on another of `LAYERS` copies of
//! the keys and values (so they come from memory, as in a model's step), in µs and GB/s of
//! keys and values read.
//!
//! `cargo run --release -p cyb-cpu --example decode_attention_bench -- [LK] [THREADS] [HQ]
//! [HKV] [D] [LAYOUT] [LQ] [KV]` (defaults 4096 2 32 8 64 token 1 f32; LAYOUT `token` or `head`;
//! LQ query positions, which see every key when above 1: Whisper's cross-attention of its beams
//! is `1500 1 6 6 64 token 5`; KV `f32` or `f16`, the keys' and values' type).

use cyb_backend::{Backend, ExecContext};
use cyb_cpu::{CpuBackend, KernelSet};
use cyb_ops::{Op, SdpaLayout};
use cyb_tensor::{DType, Result, Tensor};
use std::time::Instant;

mod common;
use common::filled;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (lk, threads, hq, hkv, d) = (num(0, 4096), num(1, 2), num(2, 32), num(3, 8), num(4, 64));
    let tokens = args.get(5).is_none_or(|s| s != "head");
    let lq = num(6, 1);
    let half = args.get(7).is_some_and(|s| s == "f16");
    let kv_dtype = if half { DType::F16 } else { DType::F32 };
    let be = CpuBackend::with_options(KernelSet::detect()?, threads)?;
    let layers = 16;
    let (qd, kd) = match tokens {
        true => (vec![lq, hq, d], vec![lk, hkv, d]),
        false => (vec![hq, lq, d], vec![hkv, lk, d]),
    };
    let q = filled(&qd, 1)?;
    let kv: Vec<(Tensor, Tensor)> = (0..layers as u32)
        .map(|l| {
            let (k, v) = (filled(&kd, 2 + 2 * l)?, filled(&kd, 3 + 2 * l)?);
            let to = |t: Tensor| Tensor::from_f32_as(&kd, &t.to_f32_vec()?, kv_dtype);
            Ok((to(k)?, to(v)?))
        })
        .collect::<Result<_>>()?;
    let op = Op::Sdpa {
        layout: if tokens {
            SdpaLayout::TokenMajor
        } else {
            SdpaLayout::HeadMajor
        },
        scale: 1.0 / (d as f32).sqrt(),
        causal: lq == 1,
        sliding_window: None,
        softcap: None,
        alibi_max_bias: None,
    };
    let mut times = Vec::new();
    for i in 0..20 * layers {
        let (k, v) = &kv[i % layers];
        let t = Instant::now();
        let out = be.execute(
            &op,
            &[q.clone(), k.clone(), v.clone()],
            &mut ExecContext::default(),
        )?;
        times.push(t.elapsed().as_secs_f64());
        drop(out);
    }
    times.sort_by(f64::total_cmp);
    let med = times[times.len() / 2];
    let bytes = 2.0 * (lk * hkv * d * if half { 2 } else { 4 }) as f64;
    println!(
        "sdpa decode lq={lq} lk={lk} hq={hq} hkv={hkv} d={d} {} {kv_dtype} t={threads}: {:.1} µs, {:.1} GB/s of keys and values",
        if tokens { "token-major" } else { "head-major" },
        med * 1e6,
        bytes / med / 1e9
    );
    Ok(())
}

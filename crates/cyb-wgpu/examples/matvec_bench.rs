//! Decode-matvec throughput on the wgpu backend: `[1, k] · [n, k]ᵀ` per weight dtype, many
//! launches in one step, reported as µs per launch and weight bytes read per second (the figure
//! to hold against the GPU's memory bandwidth).
//!
//! `cargo run --release -p cyb-wgpu --example matvec_bench -- [N] [K] [DTYPES] [LAUNCHES]`
//! (defaults 8192 2048 f16,q8_0,q4_0,q4_k,q6_k 64). Launch merging is off, so each matvec is
//! its own launch; the launches cycle through enough copies of the weight (≥ 256 MiB together)
//! that they read it from memory, not from the GPU's cache. The best of five steps is printed.
//! With `CYB_WGPU_GPU_TIME=1` the backend also prints the GPU's own busy time per step at exit.

use cyb_backend::{Backend, ExecContext};
use cyb_ops::Op;
use cyb_tensor::{DType, Tensor};
use cyb_wgpu::WgpuBackend;
use std::time::Instant;

const CACHE_BEATING_BYTES: usize = 256 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (n, k) = (num(0, 8192), num(1, 2048));
    let dtypes = args
        .get(2)
        .cloned()
        .unwrap_or_else(|| "f16,q8_0,q4_0,q4_k,q6_k".into());
    let launches = num(3, 64).max(1);
    let gpu = WgpuBackend::new()?;
    gpu.set_launch_merging(false);
    println!("adapter: {}", gpu.adapter().summary());
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
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
    let a_host = Tensor::from_f32(&[1, k], &rand(k))?;
    let a = gpu.upload(
        a_host.host_bytes().ok_or("activation not on host")?,
        &[1, k],
        DType::F32,
    )?;
    let op = Op::MatMul {
        rhs_transposed: true,
    };
    let mut ctx = ExecContext::default();
    for name in dtypes.split(',') {
        let dtype = DType::parse(name).ok_or_else(|| format!("unknown dtype {name}"))?;
        let host = Tensor::from_f32_as(&[n, k], &rand(n * k), dtype)?;
        let bytes = host.host_bytes().ok_or("weight not on host")?;
        let copies = CACHE_BEATING_BYTES
            .div_ceil(bytes.len().max(1))
            .clamp(1, launches);
        let weights = (0..copies)
            .map(|_| gpu.upload(bytes, &[n, k], dtype))
            .collect::<cyb_tensor::Result<Vec<_>>>()?;
        let mut best = f64::INFINITY;
        // One warm-up step (pipeline compilation), then five timed ones.
        for step in 0..6 {
            let t0 = Instant::now();
            gpu.begin_step(&mut ctx)?;
            for i in 0..launches {
                gpu.execute(&op, &[a.clone(), weights[i % copies].clone()], &mut ctx)?;
            }
            gpu.end_step(&mut ctx)?;
            gpu.synchronize()?;
            if step > 0 {
                best = best.min(t0.elapsed().as_secs_f64());
            }
        }
        let per = best / launches as f64;
        println!(
            "{name:>6} [1, {k}] x [{n}, {k}]^T: {:>9.1} us/launch, {:>8.1} GB/s of weights ({} copies of {:.1} MiB)",
            per * 1e6,
            bytes.len() as f64 / per / 1e9,
            copies,
            bytes.len() as f64 / (1 << 20) as f64
        );
    }
    Ok(())
}

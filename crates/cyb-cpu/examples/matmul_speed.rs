//! Weight-streaming speed of one matmul: `matmul_speed DTYPE N K M REPEATS`.
use cyb_backend::{Backend, ExecContext};
use cyb_cpu::CpuBackend;
use cyb_ops::Op;
use cyb_tensor::{DType, Tensor};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let dtype = DType::parse(a.first().map_or("q4_1", |s| s)).ok_or("dtype")?;
    let n: usize = a.get(1).map_or(Ok(49152), |s| s.parse())?;
    let k: usize = a.get(2).map_or(Ok(576), |s| s.parse())?;
    let m: usize = a.get(3).map_or(Ok(1), |s| s.parse())?;
    let reps: usize = a.get(4).map_or(Ok(20), |s| s.parse())?;
    let vals: Vec<f32> = (0..n * k)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let w = Tensor::from_f32_as(&[n, k], &vals, dtype)?;
    let x = Tensor::from_f32(&[m, k], &vals[..m * k])?;
    let b = CpuBackend::new()?;
    let op = Op::MatMul {
        rhs_transposed: true,
    };
    let mut ctx = ExecContext::default();
    b.execute(&op, &[x.clone(), w.clone()], &mut ctx)?;
    let t = Instant::now();
    for _ in 0..reps {
        b.execute(&op, &[x.clone(), w.clone()], &mut ctx)?;
    }
    let s = t.elapsed().as_secs_f64() / reps as f64;
    println!(
        "{dtype} {n}x{k} m={m} {} threads {}: {:.3} ms, {:.2} GB/s weights, {:.1} GFLOP/s",
        b.threads(),
        b.kernel_set().name(),
        s * 1e3,
        w.byte_len() as f64 / s / 1e9,
        2.0 * (m * n * k) as f64 / s / 1e9
    );
    Ok(())
}

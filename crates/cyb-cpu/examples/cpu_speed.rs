//! Prefill and decode speed of a LlamaStyle GGUF model on the cpu backend (or the reference).
//!
//! `cargo run --release -p cyb-cpu --example cpu_speed -- MODEL [PROMPT_TOKENS] [GEN_TOKENS] [cpu|reference]`
//! prints prefill and decode tokens/s and where the ops ran. `CYB_THREADS` and
//! `CYB_CPU_KERNELS` pick threads and kernels.

use cyb_backend::{Backend, Dispatcher};
use cyb_cpu::CpuBackend;
use cyb_models::LlamaModel;
use std::sync::Arc;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: cpu_speed MODEL [PROMPT] [GEN] [cpu|reference]")?;
    let prompt: usize = args.next().map_or(Ok(32), |s| s.parse())?;
    let gen: usize = args.next().map_or(Ok(32), |s| s.parse())?;
    let chain: Vec<Arc<dyn Backend>> = match args.next().as_deref() {
        Some("reference") => Vec::new(),
        _ => vec![Arc::new(CpuBackend::new()?)],
    };
    let dispatcher = Arc::new(Dispatcher::new(chain));
    let file = cyb_format::open(&path)?;
    let model = LlamaModel::load(&file, Arc::clone(&dispatcher))?;
    let ids: Vec<u32> = (0..prompt as u32).map(|i| 1 + (i * 7919) % 1000).collect();
    let argmax = |v: &[f32]| {
        v.iter()
            .enumerate()
            .fold(
                (0, f32::NEG_INFINITY),
                |b, (i, &x)| if x > b.1 { (i, x) } else { b },
            )
            .0 as u32
    };
    // Warm-up: page in the weights and start the pool.
    let mut cache = model.new_cache(prompt + gen + 1)?;
    model.forward(&ids[..prompt.min(4)], &mut cache)?;
    let mut cache = model.new_cache(prompt + gen + 1)?;
    let t0 = Instant::now();
    let mut next = argmax(&model.forward(&ids, &mut cache)?);
    let pp = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    for _ in 0..gen {
        next = argmax(&model.forward(&[next], &mut cache)?);
    }
    let tg = t1.elapsed().as_secs_f64();
    println!(
        "{}: prefill {prompt} tokens {:.1} tok/s; decode {gen} tokens {:.1} tok/s",
        dispatcher.primary().name(),
        prompt as f64 / pp,
        gen as f64 / tg
    );
    eprintln!("{}", dispatcher.log().summary());
    Ok(())
}

//! Token-by-token forward speed of a LlamaStyle model on the CPU reference backend.
//!
//! `cargo run --release -p cyb-models --example llama_speed -- MODEL [TOKENS] [PROMPT_IDS...]`
//! prints the greedy continuation ids of the prompt and the decode rate.

use cyb_backend::Dispatcher;
use cyb_models::LlamaModel;
use std::sync::Arc;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: llama_speed MODEL [TOKENS] [PROMPT_IDS...]")?;
    let steps: usize = args.next().map_or(Ok(32), |s| s.parse())?;
    let mut prompt: Vec<u32> = args.map(|s| s.parse()).collect::<Result<_, _>>()?;
    if prompt.is_empty() {
        prompt = vec![1];
    }
    let t0 = Instant::now();
    let file = cyb_format::open(&path)?;
    let model = LlamaModel::load(&file, Arc::new(Dispatcher::reference()))?;
    eprintln!("loaded in {:.0} ms", t0.elapsed().as_secs_f64() * 1e3);
    let mut cache = model.new_cache(prompt.len() + steps)?;
    let argmax = |v: &[f32]| {
        v.iter()
            .enumerate()
            .fold(
                (0, f32::NEG_INFINITY),
                |b, (i, &x)| if x > b.1 { (i, x) } else { b },
            )
            .0 as u32
    };
    let t1 = Instant::now();
    let mut next = argmax(&model.forward(&prompt, &mut cache)?);
    let prefill = t1.elapsed().as_secs_f64();
    let mut out = vec![next];
    let t2 = Instant::now();
    for _ in 1..steps {
        next = argmax(&model.forward(&[next], &mut cache)?);
        out.push(next);
    }
    let decode = t2.elapsed().as_secs_f64();
    println!("{out:?}");
    eprintln!(
        "prefill {} tokens: {:.1} tok/s; decode {} tokens: {:.2} tok/s",
        prompt.len(),
        prompt.len() as f64 / prefill,
        steps - 1,
        (steps - 1) as f64 / decode
    );
    Ok(())
}

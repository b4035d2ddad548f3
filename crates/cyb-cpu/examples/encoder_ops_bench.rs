//! Times the non-matmul ops of a MiniLM-sized encoder layer (128 tokens, 12 heads of 32,
//! hidden 384, FFN 1536) on the cpu backend: the best of many runs, so a busy machine
//! disturbs it less. `cargo run --release -p cyb-cpu --example encoder_ops_bench [threads]`

use cyb_backend::{Backend, ExecContext};
use cyb_cpu::{CpuBackend, KernelSet};
use cyb_ops::{GeluApprox, Op, SdpaLayout};
use cyb_tensor::{Result, Tensor};
use std::time::{Duration, Instant};

mod common;
use common::filled;

fn best(be: &CpuBackend, op: &Op, inputs: &[Tensor]) -> Result<Duration> {
    let mut best = Duration::MAX;
    for _ in 0..300 {
        let t = Instant::now();
        let out = be.execute(op, inputs, &mut ExecContext::default())?;
        best = best.min(t.elapsed());
        drop(out);
    }
    Ok(best)
}

fn main() -> Result<()> {
    let threads = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let be = CpuBackend::with_options(KernelSet::detect()?, threads)?;
    let (l, h, f) = (128, 384, 1536);
    let x = filled(&[l, h], 1)?;
    let y = filled(&[l, h], 2)?;
    let wide = filled(&[l, f], 3)?;
    let (w, b, bf) = (filled(&[h], 4)?, filled(&[h], 5)?, filled(&[f], 6)?);
    let heads = filled(&[1, 12, l, 32], 7)?;
    let split = filled(&[1, l, 12, 32], 8)?;
    let mask = Tensor::from_f32(&[1, 1, 1, l], &vec![0.0; l])?;
    let sdpa = Op::Sdpa {
        layout: SdpaLayout::HeadMajor,
        scale: 0.17,
        causal: false,
        sliding_window: None,
        softcap: None,
        alibi_max_bias: None,
    };
    let cases: Vec<(&str, Op, Vec<Tensor>)> = vec![
        ("add [128,384]", Op::Add, vec![x.clone(), y.clone()]),
        (
            "add bias [128,1536]",
            Op::Add,
            vec![wide.clone(), bf.clone()],
        ),
        (
            "gelu erf [128,1536]",
            Op::Gelu {
                approx: GeluApprox::Erf,
            },
            vec![wide.clone()],
        ),
        (
            "layer_norm [128,384]",
            Op::LayerNorm { eps: 1e-12 },
            vec![x.clone(), w.clone(), b.clone()],
        ),
        (
            "add_layer_norm [128,384]",
            Op::AddLayerNorm { eps: 1e-12 },
            vec![x.clone(), y.clone(), w.clone(), b.clone()],
        ),
        (
            "permute [1,128,12,32]",
            Op::Permute {
                perm: vec![0, 2, 1, 3],
            },
            vec![split.clone()],
        ),
        (
            "sdpa 12x128x32",
            sdpa.clone(),
            vec![heads.clone(), heads.clone(), heads.clone()],
        ),
        (
            "sdpa 12x128x32 masked",
            sdpa,
            vec![heads.clone(), heads.clone(), heads, mask.clone()],
        ),
        (
            "sdpa token-major masked",
            Op::Sdpa {
                layout: SdpaLayout::TokenMajor,
                scale: 0.17,
                causal: false,
                sliding_window: None,
                softcap: None,
                alibi_max_bias: None,
            },
            vec![split.clone(), split.clone(), split, mask],
        ),
    ];
    for (name, op, inputs) in cases {
        let t = best(&be, &op, &inputs)?;
        println!("{name:28} {:8.1} us", t.as_secs_f64() * 1e6);
    }
    Ok(())
}

//! The whole SmolLM2-135M (Q4_1 GGUF) on the cpu backend: with 16-bit activations, exactly
//! transformers' greedy tokens (tests/fixtures/smollm2/greedy.json); with 8-bit activations, the
//! CPU reference's greedy tokens wherever its choice is clear, and close logits. Skipped when
//! the model is absent (fetch it with `tools/fetch_smollm2.sh`), except under CI where its
//! absence is a failure.

use cyb_backend::{Backend, Dispatcher};
use cyb_cpu::{ActPrecision, CpuBackend};
use cyb_models::LlamaModel;
use std::path::PathBuf;
use std::sync::Arc;

fn model_path() -> Option<PathBuf> {
    let p = std::env::var_os("CYB_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("CYB_CACHE")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/cyb-llm"))
                })
                .unwrap_or_default();
            home.join("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    if p.is_file() {
        return Some(p);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "SmolLM2 GGUF missing at {}",
        p.display()
    );
    eprintln!(
        "skipped: {} is absent (run tools/fetch_smollm2.sh)",
        p.display()
    );
    None
}

fn argmax(v: &[f32]) -> (u32, f32) {
    let mut best = (0usize, f32::NEG_INFINITY, f32::NEG_INFINITY);
    for (i, &x) in v.iter().enumerate() {
        if x > best.1 {
            best = (i, x, best.1);
        } else if x > best.2 {
            best.2 = x;
        }
    }
    (best.0 as u32, best.1 - best.2)
}

/// Logits after the prompt and after each of `tokens` fed one at a time.
fn logits(model: &LlamaModel, prompt: &[u32], tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut cache = model.new_cache(prompt.len() + tokens.len() + 1).unwrap();
    let mut out = vec![model.forward(prompt, &mut cache).unwrap()];
    for &t in tokens {
        out.push(model.forward(&[t], &mut cache).unwrap());
    }
    out
}

/// The reference's greedy continuation of `prompt` and its logits at every step.
fn greedy(model: &LlamaModel, prompt: &[u32], steps: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut cache = model.new_cache(prompt.len() + steps + 1).unwrap();
    let mut all = vec![model.forward(prompt, &mut cache).unwrap()];
    let mut out = Vec::new();
    for _ in 0..steps {
        let next = argmax(&all[all.len() - 1]).0;
        out.push(next);
        all.push(model.forward(&[next], &mut cache).unwrap());
    }
    (out, all)
}

/// Greedy decoding on the cpu backend follows the reference: fed the reference's own greedy
/// tokens (teacher forcing), every step picks the same token wherever the reference's choice
/// is clear (top-2 logit margin above `MARGIN`; 8-bit activations move logits by a few
/// hundredths of their range, as in llama.cpp, so genuine near-ties may flip), and 1 and 2
/// threads give bit-identical logits.
#[test]
fn greedy_tokens_follow_the_reference() {
    const MARGIN: f32 = 0.5;
    let Some(path) = model_path() else { return };
    let file = cyb_format::open(&path).unwrap();
    // "The capital of France is" in SmolLM2's vocabulary.
    let prompt = [504u32, 3575, 282, 4649, 314];
    let reference = LlamaModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    let (tokens, want) = greedy(&reference, &prompt, 16);
    let mut per_threads = Vec::new();
    for threads in [1, 2] {
        let set = cyb_cpu::KernelSet::detect().unwrap();
        let cpu: Arc<dyn Backend> =
            Arc::new(CpuBackend::with_activations(set, threads, ActPrecision::Q8).unwrap());
        let dispatcher = Arc::new(Dispatcher::new(vec![cpu]));
        let model = LlamaModel::load(&file, Arc::clone(&dispatcher)).unwrap();
        let got = logits(&model, &prompt, &tokens);
        let mut clear = 0;
        for (step, (g, w)) in got.iter().zip(&want).enumerate() {
            let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
            let diff = g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(
                diff / scale < 8e-2,
                "step {step}: logits differ by {} relative",
                diff / scale
            );
            let (want_tok, margin) = argmax(w);
            if margin > MARGIN {
                clear += 1;
                assert_eq!(argmax(g).0, want_tok, "step {step}: greedy token differs");
            }
        }
        assert!(clear >= 10, "only {clear} steps had a clear greedy choice");
        let log = dispatcher.log();
        assert!(log
            .executed
            .contains_key(&("matmul".to_string(), "cpu".to_string())));
        per_threads.push(got);
    }
    assert!(
        per_threads[0]
            .iter()
            .flatten()
            .zip(per_threads[1].iter().flatten())
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "1 and 2 threads give different logits"
    );
}

/// With 16-bit activations the cpu backend's greedy continuation of each fixture prompt is
/// exactly transformers' (32 tokens, decoding on past EOS as the fixture did), on 1 and 2
/// threads.
#[test]
fn q16_greedy_tokens_equal_transformers() {
    let Some(path) = model_path() else { return };
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/smollm2/greedy.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let cases = json["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    let file = cyb_format::open(&path).unwrap();
    let set = cyb_cpu::KernelSet::detect().unwrap();
    for threads in [1, 2] {
        let cpu: Arc<dyn Backend> =
            Arc::new(CpuBackend::with_activations(set, threads, ActPrecision::Q16).unwrap());
        let model = LlamaModel::load(&file, Arc::new(Dispatcher::new(vec![cpu]))).unwrap();
        for (i, case) in cases.iter().enumerate() {
            let (prompt, want) = (ids(&case["prompt_ids"]), ids(&case["generated_ids"]));
            let (got, _) = greedy(&model, &prompt, want.len());
            assert_eq!(
                got,
                want,
                "case {i} ({:?}) on {} with {threads} threads",
                case["generated_text"],
                set.name()
            );
        }
    }
}

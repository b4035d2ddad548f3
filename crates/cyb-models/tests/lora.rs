//! LoRA adapters applied at run time against PEFT (tests/fixtures/lora, made by
//! tools/fixtures/make_lora_fixtures.py on the llama3 model of tests/fixtures/llama_family):
//! the PEFT directory and the llama.cpp-layout GGUF adapter, each on the Hugging Face directory
//! and on the F32 GGUF model (whose q/k rows are in llama.cpp's order, so the adapter's are
//! reordered to match), at the adapter's scale and at half of it; on the reference and the cpu
//! backends, with the projections split and stacked.

use cyb_backend::{Backend, Dispatcher};
use cyb_models::{KvCache, LlamaModel};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn dir(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(sub)
}

fn floats(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn prompt() -> Vec<u32> {
    let text = std::fs::read_to_string(dir("lora/reference.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["prompt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

/// Worst per-position max|a - b| / max|b|.
fn worst_err(a: &[f32], b: &[f32], vocab: usize) -> f32 {
    assert_eq!(a.len(), b.len());
    a.chunks(vocab)
        .zip(b.chunks(vocab))
        .map(|(x, y)| {
            let d = x
                .iter()
                .zip(y)
                .map(|(p, q)| (p - q).abs())
                .fold(0f32, f32::max);
            d / y.iter().map(|q| q.abs()).fold(0f32, f32::max)
        })
        .fold(0f32, f32::max)
}

fn model(base: &str, dispatcher: Arc<Dispatcher>) -> LlamaModel {
    let file = cyb_format::open(dir("llama_family/llama3").join(base)).unwrap();
    LlamaModel::load(&file, dispatcher).unwrap()
}

fn logits(m: &LlamaModel, cache: &mut KvCache, prompt: &[u32]) -> Vec<f32> {
    m.forward_all(prompt, cache).unwrap()
}

fn cpu() -> Arc<Dispatcher> {
    let b: Arc<dyn Backend> = Arc::new(cyb_cpu::CpuBackend::new().unwrap());
    Arc::new(Dispatcher::new(vec![b]))
}

#[test]
fn adapters_equal_peft_on_both_model_layouts() {
    let prompt = prompt();
    let want = floats(&dir("lora/logits_scale1.bin"));
    let half = floats(&dir("lora/logits_scale05.bin"));
    let vocab = want.len() / prompt.len();
    for base in ["hf", "model-f32.gguf"] {
        for adapter in ["peft", "lora.gguf"] {
            let case = format!("{base} + {adapter}");
            let mut m = model(base, Arc::new(Dispatcher::reference()));
            let plain = logits(&m, &mut m.new_cache(32).unwrap(), &prompt);
            assert!(
                worst_err(&plain, &want, vocab) > 0.05,
                "{case}: the adapter should change the logits"
            );
            m.add_lora(&dir("lora").join(adapter), 1.0).unwrap();
            let err = worst_err(
                &logits(&m, &mut m.new_cache(32).unwrap(), &prompt),
                &want,
                vocab,
            );
            assert!(err <= 1e-4, "{case}: {err}");
            // A session's own scale, and 0 for none.
            let mut cache = m.new_cache(32).unwrap();
            cache.set_lora_scales(Some(vec![0.5]));
            let err = worst_err(&logits(&m, &mut cache, &prompt), &half, vocab);
            assert!(err <= 1e-4, "{case} at 0.5: {err}");
            let mut cache = m.new_cache(32).unwrap();
            cache.set_lora_scales(Some(vec![0.0]));
            assert_eq!(logits(&m, &mut cache, &prompt), plain, "{case} at 0");
            let mut cache = m.new_cache(32).unwrap();
            cache.set_lora_scales(Some(vec![1.0, 1.0]));
            let err = m.forward(&prompt, &mut cache).unwrap_err().to_string();
            assert!(err.contains("1 adapters"), "{case}: {err}");
        }
    }
}

/// Two adapters at half scale each add up to one at full scale; the cpu backend, whose small
/// projections are stacked into one weight, applies the split projections' adapters to their
/// parts of it.
#[test]
fn two_adapters_add_up_and_stacked_projections_take_them() {
    let prompt = prompt();
    let want = floats(&dir("lora/logits_scale1.bin"));
    let vocab = want.len() / prompt.len();
    for dispatcher in [Arc::new(Dispatcher::reference()), cpu()] {
        let mut m = model("model-f32.gguf", dispatcher);
        m.add_lora(&dir("lora/peft"), 0.5).unwrap();
        m.add_lora(&dir("lora/lora.gguf"), 0.5).unwrap();
        let err = worst_err(
            &logits(&m, &mut m.new_cache(32).unwrap(), &prompt),
            &want,
            vocab,
        );
        assert!(err <= 1e-4, "{err}");
    }
}

#[test]
fn bad_adapters_are_refused_by_name() {
    let mut m = model("hf", Arc::new(Dispatcher::reference()));
    let err = m
        .add_lora(&dir("llama_family/llama3/model-f32.gguf"), 1.0)
        .unwrap_err();
    assert!(err.to_string().contains("not a LoRA adapter"), "{err}");
    let err = m.add_lora(&dir("lora/missing"), 1.0).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
    // An adapter for another model: the qwen3 fixture's heads are 24 wide.
    let mut other = LlamaModel::load(
        &cyb_format::open(dir("llama_family/qwen3/hf")).unwrap(),
        Arc::new(Dispatcher::reference()),
    )
    .unwrap();
    let err = other.add_lora(&dir("lora/peft"), 1.0).unwrap_err();
    assert!(err.to_string().contains("LoRA"), "{err}");
}

//! Replayed decode steps (replay.rs) against the same steps run through the model: the
//! LlamaStyle fixture (tests/fixtures/llama_family/llama3, Llama 3 rope scaling) decoded on two
//! backends, one recording and replaying steps, one with replay off. A replay runs the same
//! kernels with the same parameters, so the logits must be equal bit for bit: a parameter word
//! not moved with the position, a stale rope table or a token written to the wrong buffer all
//! change them.

mod common;

use common::argmax;
use cyb_backend::{Backend, Dispatcher};
use cyb_models::{KvCache, LlamaModel};
use cyb_wgpu::WgpuBackend;
use std::path::Path;
use std::sync::Arc;

fn model(gpu: &Arc<WgpuBackend>, file: &str) -> LlamaModel {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/llama_family/llama3")
        .join(file);
    let chain: Vec<Arc<dyn Backend>> = vec![gpu.clone()];
    let f = cyb_format::open(path).unwrap();
    LlamaModel::load(&f, Arc::new(Dispatcher::new(chain))).unwrap()
}

/// A backend of its own (the shared one of the other tests must not have replay turned off
/// under them).
fn backend(replay: bool) -> Option<Arc<WgpuBackend>> {
    common::gpu()?;
    let b = WgpuBackend::new().unwrap();
    b.set_step_replay(replay);
    Some(Arc::new(b))
}

/// Feeds `prompt`, then `steps` tokens one at a time (each the argmax of the previous
/// logits, through `forward`), then `steps` more through `forward_argmax`; returns every
/// decode step's logits and the argmax tokens.
fn decode(
    m: &LlamaModel,
    cache: &mut KvCache,
    prompt: &[u32],
    steps: usize,
) -> (Vec<f32>, Vec<u32>) {
    let logits = m.forward(prompt, cache).unwrap();
    let mut next = argmax(&logits);
    let mut all = Vec::new();
    for _ in 0..steps {
        let l = m.forward(&[next], cache).unwrap();
        next = argmax(&l);
        all.extend(l);
    }
    let mut tokens = Vec::new();
    for _ in 0..steps {
        next = m.forward_argmax(&[next], cache).unwrap();
        tokens.push(next);
    }
    (all, tokens)
}

#[test]
fn replayed_steps_equal_steps_through_the_model() {
    let (Some(on), Some(off)) = (backend(true), backend(false)) else {
        return;
    };
    for file in ["model-f32.gguf", "model-q4_0.gguf"] {
        let (m_on, m_off) = (model(&on, file), model(&off, file));
        let mut c_on = m_on.new_cache(160).unwrap();
        let mut c_off = m_off.new_cache(160).unwrap();
        // KV lengths 13..=84 (decode): plans for the ranges up to 16, 32, 64 and 128, each
        // replayed after its first three steps.
        let prompt = [1, 17, 42, 99, 5, 63, 120, 8, 77, 31, 54, 2];
        let before = on.replayed_steps();
        let a = decode(&m_on, &mut c_on, &prompt, 36);
        let b = decode(&m_off, &mut c_off, &prompt, 36);
        let replayed = on.replayed_steps() - before;
        assert!(
            replayed >= 50,
            "{file}: only {replayed} of 72 steps replayed"
        );
        assert_eq!(off.replayed_steps(), 0);
        assert!(a.0 == b.0, "{file}: replayed logits differ");
        assert_eq!(a.1, b.1, "{file}: replayed argmax tokens differ");

        // The same cache again from a shorter prompt: the range up to 16 now starts 4 steps
        // before its plan's first recorded step, and another prompt gives other tokens.
        c_on.clear();
        c_off.clear();
        let before = on.replayed_steps();
        let a = decode(&m_on, &mut c_on, &prompt[..8], 30);
        let b = decode(&m_off, &mut c_off, &prompt[..8], 30);
        assert!(
            on.replayed_steps() - before >= 50,
            "{file}: plans not reused"
        );
        assert!(a.0 == b.0, "{file}: logits after clear differ");
        assert_eq!(a.1, b.1, "{file}: argmax tokens after clear differ");
    }
}

#[test]
fn replay_checks_token_ids() {
    let Some(on) = backend(true) else {
        return;
    };
    let m = model(&on, "model-q8_0.gguf");
    let mut c = m.new_cache(64).unwrap();
    // KV lengths 9 (the prompt), then 10..=21: the range up to 32 has a plan from 20 on.
    m.forward(&[1, 2, 3, 4, 5, 6, 7, 8, 9], &mut c).unwrap();
    for t in 10..22 {
        m.forward(&[t], &mut c).unwrap();
    }
    let before = on.replayed_steps();
    m.forward(&[3], &mut c).unwrap();
    assert_eq!(on.replayed_steps(), before + 1, "the step was not replayed");
    let len = c.len();
    let err = m.forward(&[128], &mut c).unwrap_err().to_string();
    assert!(err.contains("outside the table"), "{err}");
    assert_eq!(c.len(), len, "a refused token must not enter the cache");
}

#[test]
fn a_cache_used_with_another_model_drops_its_plans() {
    let (Some(on), Some(off)) = (backend(true), backend(false)) else {
        return;
    };
    // The same dimensions, other weights: plans made for the first must not run the second.
    let (first, second) = (model(&on, "model-f32.gguf"), model(&on, "model-q8_0.gguf"));
    let reference = model(&off, "model-q8_0.gguf");
    let prompt = [1, 17, 42, 99, 5, 63, 120, 8, 77, 31, 54, 2];
    let mut cache = first.new_cache(96).unwrap();
    decode(&first, &mut cache, &prompt, 24);
    cache.clear();
    let a = decode(&second, &mut cache, &prompt, 24);
    let mut fresh = reference.new_cache(96).unwrap();
    let b = decode(&reference, &mut fresh, &prompt, 24);
    assert!(a.0 == b.0, "logits of the second model differ");
    assert_eq!(a.1, b.1);
}

/// Past 256 keys attention is split over chunks of keys and merged: replayed steps there
/// (KV lengths 281..=360, in the range up to 512) equal the steps run through the model.
#[test]
fn replayed_steps_over_split_attention_equal_steps_through_the_model() {
    let (Some(on), Some(off)) = (backend(true), backend(false)) else {
        return;
    };
    let (m_on, m_off) = (
        model(&on, "model-q8_0.gguf"),
        model(&off, "model-q8_0.gguf"),
    );
    let mut c_on = m_on.new_cache(400).unwrap();
    let mut c_off = m_off.new_cache(400).unwrap();
    let prompt: Vec<u32> = (0..280).map(|i| (i * 37 % 120 + 1) as u32).collect();
    let before = on.replayed_steps();
    let a = decode(&m_on, &mut c_on, &prompt, 40);
    let b = decode(&m_off, &mut c_off, &prompt, 40);
    assert!(
        on.replayed_steps() - before >= 60,
        "split steps not replayed"
    );
    assert!(a.0 == b.0, "replayed logits differ");
    assert_eq!(a.1, b.1, "replayed argmax tokens differ");
}

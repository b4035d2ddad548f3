//! Speculative decoding over the tiny chat fixture: with a draft (the model itself, or its
//! Q4_0 requantization, which proposes some tokens the model refuses) greedy output equals
//! plain greedy decoding token for token, sampled output with a draft that always agrees
//! equals plain sampling with the same seed, and the limits (max tokens, context) hold. The
//! runtime is batch-invariant, so scoring several tokens in one step gives the logits of
//! scoring them one by one. The acceptance rule itself is tested in `generator.rs`.

use cyb_format::model_container::{write_model, WriteOptions};
use cyb_runtime::{FinishReason, Generator, Model, Runtime, RuntimeOptions, SamplingParams};
use cyb_tensor::DType;
use std::path::{Path, PathBuf};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

fn runtime() -> Runtime {
    let mut cpu = cyb_runtime::CpuOptions::from_env().unwrap();
    cpu.batch_invariant = true;
    Runtime::new(RuntimeOptions {
        cpu: Some(cpu),
        ..RuntimeOptions::default()
    })
    .unwrap()
}

/// The fixture requantized to Q4_0 (a `.model` in the temp directory).
fn q4_0_draft(rt: &Runtime) -> Model {
    let out = std::env::temp_dir().join(format!("cyb-spec-draft-{}.model", std::process::id()));
    let src = cyb_format::open(fixture("tiny_chat/hf")).unwrap();
    let opts = WriteOptions {
        quant: Some(DType::Q4_0),
        ..WriteOptions::default()
    };
    write_model(&src, &out, &opts).unwrap();
    let model = rt.load(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    model
}

fn params(temperature: f32, seed: u64, max_tokens: usize) -> SamplingParams {
    SamplingParams {
        temperature,
        seed: Some(seed),
        max_tokens: Some(max_tokens),
        ignore_eos: true,
        ..SamplingParams::default()
    }
}

/// Tokens, finish reason, (proposed, accepted).
fn generate(
    session: &mut Generator,
    prompt: &[u32],
    p: SamplingParams,
) -> (Vec<u32>, Option<FinishReason>, (usize, usize)) {
    let mut gen = session.generate(prompt, p).unwrap();
    let mut tokens = Vec::new();
    for piece in gen.by_ref() {
        tokens.extend(piece.unwrap().token);
    }
    let m = gen.metrics();
    (
        tokens,
        gen.finish_reason(),
        (m.draft_proposed, m.draft_accepted),
    )
}

fn prompt(model: &Model) -> Vec<u32> {
    model
        .tokenizer()
        .encode("The quick brown fox jumps over", true)
        .unwrap()
}

#[test]
fn greedy_with_a_draft_equals_greedy_alone() {
    let rt = runtime();
    let model = rt.load(fixture("tiny_chat/hf")).unwrap();
    let ids = prompt(&model);
    let mut plain = model.generator(None).unwrap();
    let (want, _, _) = generate(&mut plain, &ids, params(0.0, 1, 60));
    assert_eq!(want.len(), 60);
    let same = rt.load(fixture("tiny_chat/hf")).unwrap();
    let q4 = q4_0_draft(&rt);
    for (name, draft) in [("itself", &same), ("q4_0", &q4)] {
        for max in [1, 3, 8] {
            let mut session = model.generator(None).unwrap();
            session.set_draft(Some(draft.clone()), max).unwrap();
            let (got, finish, (proposed, accepted)) =
                generate(&mut session, &ids, params(0.0, 1, 60));
            assert_eq!(got, want, "draft {name}, {max} a step");
            assert_eq!(finish, Some(FinishReason::Length));
            assert!(
                proposed > 0 && accepted <= proposed,
                "{proposed} {accepted}"
            );
            if name == "itself" {
                assert_eq!(accepted, proposed, "the model refused its own tokens");
            }
            if name == "q4_0" && max == 8 {
                assert!(accepted < proposed, "the Q4_0 draft never missed");
                assert!(accepted > 0, "the Q4_0 draft never hit");
            }
            // The next turn reuses the cached prefix, draft included.
            let mut longer = ids.clone();
            longer.extend_from_slice(&want[..10]);
            let (again, _, _) = generate(&mut session, &longer, params(0.0, 1, 20));
            let (fresh, _, _) = generate(
                &mut model.generator(None).unwrap(),
                &longer,
                params(0.0, 1, 20),
            );
            assert_eq!(again, fresh, "draft {name}, {max} a step, next turn");
        }
    }
}

#[test]
fn sampling_with_a_draft_that_always_agrees_equals_sampling_alone() {
    // Every proposal is kept, so the draws happen in the same order as without the draft.
    let rt = runtime();
    let model = rt.load(fixture("tiny_chat/hf")).unwrap();
    let ids = prompt(&model);
    for seed in [3, 17] {
        let p = || SamplingParams {
            top_k: 20,
            ..params(0.9, seed, 40)
        };
        let (want, _, _) = generate(&mut model.generator(None).unwrap(), &ids, p());
        let mut session = model.generator(None).unwrap();
        session.set_draft(Some(model.clone()), 5).unwrap();
        let (got, _, (proposed, accepted)) = generate(&mut session, &ids, p());
        assert_eq!(got, want, "seed {seed}");
        assert_eq!(accepted, proposed);
    }
}

#[test]
fn limits_hold_with_a_draft() {
    let rt = runtime();
    let model = rt.load(fixture("tiny_chat/hf")).unwrap();
    let ids = prompt(&model);
    // max_tokens below and between the draft's steps.
    for max_tokens in [1, 2, 7] {
        let mut session = model.generator(None).unwrap();
        session.set_draft(Some(model.clone()), 4).unwrap();
        let (got, finish, _) = generate(&mut session, &ids, params(0.0, 1, max_tokens));
        assert_eq!(got.len(), max_tokens);
        assert_eq!(finish, Some(FinishReason::Length));
    }
    // A context that fills up mid-step.
    let ctx = ids.len() + 9;
    let mut session = model.generator(Some(ctx)).unwrap();
    session.set_draft(Some(model.clone()), 4).unwrap();
    let (got, finish, _) = generate(&mut session, &ids, params(0.0, 1, 100));
    let (want, _, _) = generate(
        &mut model.generator(Some(ctx)).unwrap(),
        &ids,
        params(0.0, 1, 100),
    );
    assert_eq!(got, want);
    assert_eq!(finish, Some(FinishReason::Length));
}

#[test]
fn a_draft_with_another_vocabulary_is_refused() {
    let rt = runtime();
    let model = rt.load(fixture("tiny_chat/hf")).unwrap();
    // The real default model (tools/fetch_smollm2.sh): 49152 tokens against the fixture's 320.
    let other = rt.load(cyb_runtime::default_model_path()).unwrap();
    let mut session = model.generator(None).unwrap();
    let err = session.set_draft(Some(other), 4).unwrap_err().to_string();
    assert!(err.contains("vocabulary"), "{err}");
    let err = session
        .set_draft(Some(model.clone()), 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("draft tokens per step"), "{err}");
}

#[test]
fn greedy_with_prompt_lookup_equals_greedy_alone() {
    let rt = runtime();
    let model = rt.load(fixture("tiny_chat/hf")).unwrap();
    // A prompt that repeats itself, so lookup finds n-grams to copy.
    let ids = model
        .tokenizer()
        .encode(&"one two three four five six seven eight ".repeat(4), true)
        .unwrap();
    let (want, _, _) = generate(
        &mut model.generator(None).unwrap(),
        &ids,
        params(0.0, 1, 60),
    );
    for max in [1, 4, 10] {
        let mut session = model.generator(None).unwrap();
        session.set_prompt_lookup(Some(max)).unwrap();
        let (got, finish, (proposed, accepted)) = generate(&mut session, &ids, params(0.0, 1, 60));
        assert_eq!(got, want, "lookup of {max}");
        assert_eq!(finish, Some(FinishReason::Length));
        assert!(
            proposed > 0 && accepted <= proposed,
            "{proposed} {accepted}"
        );
    }
    // Sampled: the text is the model's, whatever lookup copied (a seed gives the same tokens
    // only when every proposal is kept, so here just the limits and determinism per seed).
    let mut a = model.generator(None).unwrap();
    a.set_prompt_lookup(Some(4)).unwrap();
    let (first, _, _) = generate(&mut a, &ids, params(0.9, 5, 30));
    let mut b = model.generator(None).unwrap();
    b.set_prompt_lookup(Some(4)).unwrap();
    let (second, _, _) = generate(&mut b, &ids, params(0.9, 5, 30));
    assert_eq!((first.len(), &first), (30, &second));
    assert!(a.set_prompt_lookup(Some(0)).is_err());
    assert!(a.set_prompt_lookup(Some(65)).is_err());
}

//! The generator's constraint hook and log-probabilities, on the tiny chat fixture.

use cyb_runtime::{FinishReason, Runtime, RuntimeOptions, SamplingParams, TokenConstraint};
use cyb_tensor::Result;
use std::path::PathBuf;

fn tiny() -> cyb_runtime::Model {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny_chat/hf");
    Runtime::new(RuntimeOptions::default())
        .unwrap()
        .load(path)
        .unwrap()
}

/// Allows exactly `script`, one token at a time, then nothing.
struct Script {
    script: Vec<u32>,
    at: usize,
}

impl TokenConstraint for Script {
    fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        let allowed = self.script.get(self.at).copied();
        for (i, l) in logits.iter_mut().enumerate() {
            if Some(i as u32) != allowed {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }
    fn accept(&mut self, token: u32) -> Result<()> {
        assert_eq!(Some(token), self.script.get(self.at).copied());
        self.at += 1;
        Ok(())
    }
    fn is_finished(&self) -> bool {
        self.at >= self.script.len()
    }
}

#[test]
fn constraint_forces_tokens_and_ends_generation() {
    let model = tiny();
    let prompt = model
        .tokenizer()
        .encode("The quick brown fox", false)
        .unwrap();
    let script = model.tokenizer().encode(" jumps over", false).unwrap();
    let mut g = model.generator(Some(64)).unwrap();
    // Sampled at temperature 1: every draw must still land on the one allowed token.
    let params = SamplingParams {
        seed: Some(3),
        temperature: 1.0,
        max_tokens: Some(40),
        ..SamplingParams::default()
    };
    let mut gen = g
        .generate(&prompt, params)
        .unwrap()
        .with_constraint(Box::new(Script {
            script: script.clone(),
            at: 0,
        }));
    let mut tokens = Vec::new();
    let mut text = String::new();
    for p in gen.by_ref() {
        let p = p.unwrap();
        tokens.extend(p.token);
        text.push_str(&p.text);
    }
    assert_eq!(tokens, script);
    assert_eq!(text, " jumps over");
    assert_eq!(gen.finish_reason(), Some(FinishReason::Stop));
}

#[test]
fn logprobs_of_greedy_tokens_are_the_top_ones() {
    let model = tiny();
    let prompt = model
        .tokenizer()
        .encode("The quick brown fox", false)
        .unwrap();
    let mut g = model.generator(Some(64)).unwrap();
    let params = SamplingParams {
        max_tokens: Some(8),
        ignore_eos: true,
        ..SamplingParams::greedy()
    };
    let mut gen = g.generate(&prompt, params).unwrap().with_logprobs(3);
    let mut seen = 0;
    while let Some(p) = gen.next() {
        let p = p.unwrap();
        let Some(token) = p.token else { continue };
        let lp = gen.last_logprobs().unwrap();
        assert_eq!(lp.token, token);
        assert_eq!(lp.top.len(), 3);
        assert_eq!(lp.top[0], (token, lp.logprob));
        assert!(lp.logprob < 0.0 && lp.top[1].1 <= lp.logprob);
        seen += 1;
    }
    assert_eq!(seen, 8);
}

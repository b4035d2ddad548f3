//! The generator over a tiny random-weight chat model (tests/fixtures/tiny_chat, made with
//! transformers by tools/fixtures/make_tiny_chat_fixture.py): greedy output against
//! transformers' for the HF directory and the GGUF, prefix reuse between turns against a fresh
//! session, reset, max tokens, stop strings, seeds, eos, and the context limits.

use cyb_runtime::{
    ChatMessage, FinishReason, Generator, Model, Runtime, RuntimeOptions, SamplingParams,
};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny_chat")
        .join(rel)
}

fn reference() -> Value {
    let text = std::fs::read_to_string(fixture("reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| u32::try_from(x.as_u64().unwrap()).unwrap())
        .collect()
}

fn load(rel: &str) -> Model {
    Runtime::new(RuntimeOptions::default())
        .unwrap()
        .load(fixture(rel))
        .unwrap()
}

fn greedy(max_tokens: usize) -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        max_tokens: Some(max_tokens),
        ..SamplingParams::default()
    }
}

/// What one `generate` call produced.
#[derive(Debug)]
struct Run {
    tokens: Vec<u32>,
    /// Text of each piece, the final flush (token `None`) included.
    pieces: Vec<String>,
    finish: Option<FinishReason>,
    prefilled: usize,
    generated: usize,
}

impl Run {
    fn text(&self) -> String {
        self.pieces.concat()
    }
}

fn run(session: &mut Generator, prompt: &[u32], params: SamplingParams) -> Run {
    let mut gen = session.generate(prompt, params).unwrap();
    let (mut tokens, mut pieces) = (Vec::new(), Vec::new());
    for piece in gen.by_ref() {
        let piece = piece.unwrap();
        tokens.extend(piece.token);
        pieces.push(piece.text);
    }
    Run {
        tokens,
        pieces,
        finish: gen.finish_reason(),
        prefilled: gen.metrics().prefilled_tokens,
        generated: gen.metrics().generated_tokens,
    }
}

fn chat_prompt(model: &Model, case: &Value) -> Vec<u32> {
    let messages: Vec<ChatMessage> = case["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    let text = model.render_chat(&messages, true).unwrap();
    assert_eq!(text, case["text"].as_str().unwrap());
    let prompt = model.tokenizer().encode(&text, false).unwrap();
    assert_eq!(prompt, ids(&case["prompt_ids"]), "prompt ids of {text:?}");
    prompt
}

#[test]
fn greedy_equals_transformers_for_hf_dir_and_gguf() {
    let r = reference();
    let n = r["max_new_tokens"].as_u64().unwrap() as usize;
    let eos = r["eos_id"].as_u64().unwrap() as u32;
    for rel in ["hf", "model-f32.gguf"] {
        let model = load(rel);
        let mut s = model.generator(None).unwrap();
        let chat = chat_prompt(&model, &r["chat"]);
        // Stopping at eos: the answer without the eos token, finished by Stop.
        let want = ids(&r["chat"]["greedy_stop_at_eos"]["ids"]);
        assert_eq!(want.last(), Some(&eos));
        let got = run(&mut s, &chat, greedy(n));
        assert_eq!(got.tokens, want[..want.len() - 1], "{rel}");
        assert_eq!(got.finish, Some(FinishReason::Stop), "{rel}");
        let want_text = r["chat"]["greedy_stop_at_eos"]["text"].as_str().unwrap();
        assert_eq!(
            Some(got.text().as_str()),
            want_text.strip_suffix("<|im_end|>")
        );
        // ignore_eos: the eos token is generated and streamed like any other; max_tokens ends it.
        let got = run(
            &mut s,
            &chat,
            SamplingParams {
                ignore_eos: true,
                ..greedy(n)
            },
        );
        assert_eq!(
            got.tokens,
            ids(&r["chat"]["greedy_ignore_eos"]["ids"]),
            "{rel}"
        );
        assert_eq!(got.finish, Some(FinishReason::Length), "{rel}");
        assert_eq!(got.generated, n);
        // The raw prompt (no template).
        let raw = model
            .tokenizer()
            .encode(r["raw"]["text"].as_str().unwrap(), false)
            .unwrap();
        assert_eq!(raw, ids(&r["raw"]["prompt_ids"]));
        let got = run(
            &mut s,
            &raw,
            SamplingParams {
                ignore_eos: true,
                ..greedy(n)
            },
        );
        assert_eq!(
            got.tokens,
            ids(&r["raw"]["greedy_ignore_eos"]["ids"]),
            "{rel}"
        );
        assert_eq!(got.text(), r["raw"]["greedy_ignore_eos"]["text"]);
    }
}

#[test]
fn next_turn_reuses_the_cached_prefix_and_equals_a_fresh_session() {
    let r = reference();
    let model = load("hf");
    let mut s = model.generator(None).unwrap();
    let first = chat_prompt(&model, &r["chat"]);
    let t1 = run(&mut s, &first, greedy(24));
    assert_eq!(t1.prefilled, first.len());
    // The answer ended with eos, which is never fed: the cache holds prompt + answer.
    assert_eq!(t1.finish, Some(FinishReason::Stop));
    let held = first.len() + t1.tokens.len();
    assert_eq!(s.tokens().len(), held);

    let second = chat_prompt(&model, &r["chat_next_turn"]);
    assert!(second.starts_with(&first));
    let t2 = run(&mut s, &second, greedy(24));
    let want = ids(&r["chat_next_turn"]["greedy_stop_at_eos"]["ids"]);
    assert_eq!(t2.tokens, want[..want.len() - 1]);
    // Only the tokens after what the session held were prefilled: the template writes the
    // answer back as the same tokens, so that is everything after prompt + answer.
    assert_eq!(&second[first.len()..held], &t1.tokens[..]);
    assert_eq!(t2.prefilled, second.len() - held);

    let mut fresh = model.generator(None).unwrap();
    let f2 = run(&mut fresh, &second, greedy(24));
    assert_eq!(f2.prefilled, second.len());
    assert_eq!((f2.tokens, f2.pieces), (t2.tokens.clone(), t2.pieces));

    // The same prompt again: only its last token is fed again (its logits are needed).
    let again = run(&mut s, &second, greedy(24));
    assert_eq!(again.prefilled, 1);
    assert_eq!(again.tokens, t2.tokens);

    // A prompt that diverges inside the cached history (an edited turn) rolls back to the
    // common prefix and still equals a fresh session.
    let mut edited = first[..first.len() - 3].to_vec();
    edited.extend(model.tokenizer().encode("Hello! How", false).unwrap());
    let e = run(&mut s, &edited, greedy(12));
    assert_eq!(e.prefilled, edited.len() - (first.len() - 3));
    let mut fresh = model.generator(None).unwrap();
    let f = run(&mut fresh, &edited, greedy(12));
    assert_eq!(e.tokens, f.tokens);
}

#[test]
fn long_greedy_run_after_reuse_equals_fresh_session() {
    // Many decode steps on top of a reused cache: any off-by-one in positions shows up here.
    let r = reference();
    let model = load("model-f32.gguf");
    let raw = ids(&r["raw"]["prompt_ids"]);
    let params = || SamplingParams {
        ignore_eos: true,
        ..greedy(40)
    };
    let mut s = model.generator(Some(128)).unwrap();
    let a = run(&mut s, &raw[..5], params());
    let mut prompt = raw[..5].to_vec();
    prompt.extend(&a.tokens[..10]);
    prompt.extend(&raw[5..]);
    // Ended by max_tokens: the last of the 40 tokens was never fed.
    assert_eq!(s.tokens().len(), 5 + 39);
    let b = run(&mut s, &prompt, params());
    assert_eq!(b.prefilled, prompt.len() - 15);
    assert_eq!(s.tokens().len(), prompt.len() + 39);
    let f = run(&mut model.generator(Some(128)).unwrap(), &prompt, params());
    assert_eq!(b.tokens, f.tokens);
}

#[test]
fn dropping_a_generation_early_leaves_the_session_consistent() {
    let r = reference();
    let model = load("hf");
    let raw = ids(&r["raw"]["prompt_ids"]);
    let params = || SamplingParams {
        ignore_eos: true,
        ..greedy(24)
    };
    let mut s = model.generator(None).unwrap();
    let taken: Vec<u32> = s
        .generate(&raw, params())
        .unwrap()
        .take(5)
        .map(|p| p.unwrap().token.unwrap())
        .collect();
    // The fifth token was sampled but never fed.
    assert_eq!(s.tokens(), [&raw[..], &taken[..4]].concat());
    let mut prompt = raw.clone();
    prompt.extend(&taken);
    let resumed = run(&mut s, &prompt, params());
    assert_eq!(resumed.prefilled, 1);
    let fresh = run(&mut model.generator(None).unwrap(), &prompt, params());
    assert_eq!(resumed.tokens, fresh.tokens);
    assert_eq!(taken, ids(&r["raw"]["greedy_ignore_eos"]["ids"])[..5]);
}

#[test]
fn reset_forgets_the_conversation() {
    let r = reference();
    let model = load("hf");
    let mut s = model.generator(None).unwrap();
    let first = chat_prompt(&model, &r["chat"]);
    let a = run(&mut s, &first, greedy(8));
    assert!(!s.tokens().is_empty());
    s.reset();
    assert!(s.tokens().is_empty());
    let b = run(&mut s, &first, greedy(8));
    assert_eq!(b.prefilled, first.len());
    assert_eq!(a.tokens, b.tokens);
}

#[test]
fn max_tokens_ends_with_length() {
    let r = reference();
    let model = load("hf");
    let raw = ids(&r["raw"]["prompt_ids"]);
    let mut s = model.generator(None).unwrap();
    for n in [1, 3, 7] {
        let got = run(
            &mut s,
            &raw,
            SamplingParams {
                ignore_eos: true,
                ..greedy(n)
            },
        );
        assert_eq!(got.tokens.len(), n);
        assert_eq!(got.generated, n);
        assert_eq!(got.finish, Some(FinishReason::Length));
    }
}

#[test]
fn stop_strings_end_generation_and_are_never_streamed() {
    let r = reference();
    let model = load("hf");
    let raw = ids(&r["raw"]["prompt_ids"]);
    let mut s = model.generator(None).unwrap();
    let free_params = SamplingParams {
        ignore_eos: true,
        ..greedy(24)
    };
    let free = run(&mut s, &raw, free_params.clone());
    let text = free.text();
    let token_pieces: Vec<&String> = free.pieces.iter().take(free.tokens.len()).collect();
    assert_eq!(token_pieces.len(), 24);
    // Stop strings taken from the unconstrained text: one inside a token, one spanning the
    // end of one token and the start of the next (held back across pieces), one absent.
    let i = 6;
    let (a, b) = (token_pieces[i], token_pieces[i + 1]);
    let spanning = format!("{}{}", a.chars().last().unwrap(), b.chars().next().unwrap());
    let long = token_pieces[3..].iter().find(|p| p.len() >= 3).unwrap();
    let inside: String = long.chars().skip(1).take(2).collect();
    for stop in [spanning.as_str(), inside.as_str()] {
        let cut = text.find(stop).unwrap();
        let got = run(
            &mut s,
            &raw,
            SamplingParams {
                stop: vec![stop.to_string(), "never appears \u{1F600}".into()],
                ..free_params.clone()
            },
        );
        assert_eq!(got.text(), text[..cut], "stop {stop:?}");
        assert!(!got.text().contains(stop));
        assert_eq!(got.finish, Some(FinishReason::Stop), "stop {stop:?}");
        assert!(got.generated < 24, "stop {stop:?}: {got:?}");
    }
    // A stop string that never completes: everything is streamed, nothing held back.
    let missing = format!("{}\u{1F600}", &text[text.len() - 1..]);
    let got = run(
        &mut s,
        &raw,
        SamplingParams {
            stop: vec![missing],
            ..free_params
        },
    );
    assert_eq!(got.text(), text);
    assert_eq!(got.finish, Some(FinishReason::Length));
}

#[test]
fn seeds_make_sampling_reproducible() {
    let r = reference();
    let model = load("hf");
    let raw = ids(&r["raw"]["prompt_ids"]);
    let mut s = model.generator(None).unwrap();
    let sample = |s: &mut Generator, seed: u64| {
        run(
            s,
            &raw,
            SamplingParams {
                temperature: 1.5,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                seed: Some(seed),
                max_tokens: Some(24),
                ignore_eos: true,
                ..SamplingParams::default()
            },
        )
        .tokens
    };
    let a = sample(&mut s, 7);
    assert_eq!(a.len(), 24);
    assert_eq!(sample(&mut s, 7), a);
    // A new session, same seed: same tokens.
    assert_eq!(sample(&mut model.generator(None).unwrap(), 7), a);
    let greedy_tokens = run(
        &mut s,
        &raw,
        SamplingParams {
            ignore_eos: true,
            ..greedy(24)
        },
    )
    .tokens;
    assert_ne!(
        a, greedy_tokens,
        "temperature 1.5 sampled the greedy sequence"
    );
    let others: Vec<Vec<u32>> = (8..11).map(|seed| sample(&mut s, seed)).collect();
    assert!(
        others.iter().any(|o| *o != a),
        "seeds 8..11 all equal seed 7"
    );
}

#[test]
fn prompt_longer_than_context_is_a_clear_error_and_the_session_survives() {
    let r = reference();
    let model = load("hf");
    let raw = ids(&r["raw"]["prompt_ids"]);
    assert_eq!(raw.len(), 11);
    let mut s = model.generator(Some(8)).unwrap();
    assert_eq!(s.capacity(), 8);
    let err = s.generate(&raw, greedy(4)).err().expect("an error");
    let msg = err.to_string();
    assert!(msg.contains("11") && msg.contains('8'), "{msg}");
    // Still usable: a prompt that fits, and the context filling up during generation ends
    // with Length (not an error): 8 - 5 fed tokens + the last, never fed.
    let got = run(
        &mut s,
        &raw[..5],
        SamplingParams {
            ignore_eos: true,
            max_tokens: None,
            ..greedy(0)
        },
    );
    assert_eq!(got.finish, Some(FinishReason::Length));
    assert_eq!(got.generated, 8 - 5 + 1);
    assert_eq!(s.tokens().len(), 8);
    // The cache is full; the next prompt that shares the prefix still works.
    let got = run(&mut s, &raw[..6], greedy(2));
    assert!(got.prefilled >= 1);
    // A prompt exactly the size of the context gives one token.
    let got = run(
        &mut model.generator(Some(11)).unwrap(),
        &raw,
        SamplingParams {
            ignore_eos: true,
            ..greedy(5)
        },
    );
    assert_eq!((got.generated, got.finish), (1, Some(FinishReason::Length)));
}

#[test]
fn empty_prompt_and_zero_context_are_errors() {
    let model = load("hf");
    let mut s = model.generator(None).unwrap();
    let err = s.generate(&[], greedy(4)).err().expect("an error");
    assert!(err.to_string().contains("no tokens"), "{err}");
    let err = model.generator(Some(0)).err().expect("an error");
    assert!(err.to_string().contains("ctx"), "{err}");
}

#[test]
fn out_of_vocabulary_ids_are_an_error_and_the_session_survives() {
    let r = reference();
    let model = load("hf");
    let raw = ids(&r["raw"]["prompt_ids"]);
    let mut s = model.generator(None).unwrap();
    let before = run(&mut s, &raw, greedy(4));
    let mut bad = raw.clone();
    bad.push(u32::MAX);
    let err = s.generate(&bad, greedy(4)).err().expect("an error");
    assert!(err.to_string().contains(&u32::MAX.to_string()), "{err}");
    let after = run(&mut s, &raw, greedy(4));
    assert_eq!(after.tokens, before.tokens);
}

/// The `cases` (prompt, wanted tokens) on sessions sharing `batcher`, started together.
fn batched_run(
    model: &cyb_runtime::Model,
    batcher: &std::sync::Arc<cyb_runtime::Batcher>,
    cases: &[(Vec<u32>, Vec<u32>)],
    n: usize,
) {
    let start = std::sync::Barrier::new(cases.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = cases
            .iter()
            .map(|(prompt, want)| {
                let start = &start;
                scope.spawn(move || {
                    let mut s = model.generator(None).unwrap();
                    s.set_batcher(Some(batcher.clone())).unwrap();
                    start.wait();
                    let params = SamplingParams {
                        ignore_eos: true,
                        ..greedy(n)
                    };
                    assert_eq!(&run(&mut s, prompt, params).tokens, want);
                })
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
    });
}

/// Sessions that share a batcher (continuous batching: their steps run as one forward, prompts
/// chunked between decodes) generate what transformers generates for each alone.
#[test]
fn batched_sessions_equal_transformers() {
    let r = reference();
    let n = r["max_new_tokens"].as_u64().unwrap() as usize;
    let model = load("hf");
    let limits = cyb_runtime::BatchLimits {
        // Small steps: the prompts are fed in chunks between the others' decodes.
        step_tokens: 6,
        max_seqs: 8,
        gather_wait: std::time::Duration::from_millis(50),
    };
    let chat = ids(&r["chat"]["prompt_ids"]);
    let next_turn = ids(&r["chat_next_turn"]["prompt_ids"]);
    let raw = ids(&r["raw"]["prompt_ids"]);
    let cases = [
        (chat.clone(), ids(&r["chat"]["greedy_ignore_eos"]["ids"])),
        (raw.clone(), ids(&r["raw"]["greedy_ignore_eos"]["ids"])),
        (chat, ids(&r["chat"]["greedy_ignore_eos"]["ids"])),
        (raw, ids(&r["raw"]["greedy_ignore_eos"]["ids"])),
    ];
    // The sessions start together, so their steps overlap; on a machine busy with other tests
    // they may still run one after another, so a run whose steps never overlapped is tried
    // again (each run's answers are checked either way).
    let mut batcher = cyb_runtime::Batcher::new(model.clone(), limits).unwrap();
    for attempt in 0..3 {
        if attempt > 0 {
            let stats = batcher.stats();
            if stats.max_seqs >= 2 && stats.steps < stats.sequences {
                break;
            }
            batcher = cyb_runtime::Batcher::new(model.clone(), limits).unwrap();
        }
        batched_run(&model, &batcher, &cases, n);
    }
    let stats = batcher.stats();
    assert!(stats.max_seqs >= 2, "{stats:?}");
    assert!(stats.steps < stats.sequences, "{stats:?}");
    // The next turn's eos-stopped answer, alone through the batcher (the prefix is new).
    let mut s = model.generator(None).unwrap();
    s.set_batcher(Some(batcher.clone())).unwrap();
    let want = ids(&r["chat_next_turn"]["greedy_stop_at_eos"]["ids"]);
    let got = run(&mut s, &next_turn, greedy(n));
    assert_eq!(got.tokens, want[..want.len() - 1]);
    // A batcher belongs to one model.
    let other = load("hf");
    let mut s = other.generator(None).unwrap();
    assert!(s.set_batcher(Some(batcher)).is_err());
}

//! The sampling pipeline: each logits stage against Hugging Face transformers' processors
//! (tests/fixtures/sampling/stages.json, made by tools/fixtures/make_sampling_fixtures.py),
//! the penalties by formula, seeding, the distribution of draws, greedy ties, stop strings.

use cyb_runtime::sampling::{self, Sampler, SamplingParams, StopMatcher, StopOutcome};
use serde_json::Value;
use std::path::Path;

fn fixture() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/sampling/stages.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().map_or(f32::NEG_INFINITY, |f| f as f32))
        .collect()
}

/// Same filtered positions, and the surviving logits equal to float rounding.
fn assert_logits_eq(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w == f32::NEG_INFINITY || g == f32::NEG_INFINITY {
            assert_eq!(g, w, "{what}: token {i} filtered differently");
        } else {
            let tol = 1e-6 * w.abs().max(1.0);
            assert!((g - w).abs() <= tol, "{what}: token {i}: got {g}, want {w}");
        }
    }
}

#[test]
fn each_stage_matches_transformers() {
    let fx = fixture();
    let mut checked = 0;
    for case in fx["cases"].as_array().unwrap() {
        let logits = floats(&case["logits"]);
        let history: Vec<u32> = serde_json::from_value(case["history"].clone()).unwrap();
        for st in case["stages"].as_array().unwrap() {
            let stage = st["stage"].as_str().unwrap();
            let param = st["param"].as_f64().unwrap() as f32;
            let mut got = logits.clone();
            match stage {
                "repetition_penalty" => sampling::repetition_penalty(&mut got, &history, param),
                "temperature" => sampling::temperature(&mut got, param),
                "top_k" => sampling::top_k(&mut got, param as usize),
                "top_p" => sampling::top_p(&mut got, param),
                "min_p" => sampling::min_p(&mut got, param),
                other => panic!("unknown stage {other}"),
            }
            let what = format!("{stage}({param}) on {} logits", logits.len());
            assert_logits_eq(&got, &floats(&st["output"]), &what);
            checked += 1;
        }
    }
    assert_eq!(checked, 8 * 12);
}

#[test]
fn whole_chain_matches_transformers() {
    let fx = fixture();
    for case in fx["cases"].as_array().unwrap() {
        let c = &case["chain"]["params"];
        let params = SamplingParams {
            temperature: c["temperature"].as_f64().unwrap() as f32,
            top_k: c["top_k"].as_u64().unwrap() as usize,
            top_p: c["top_p"].as_f64().unwrap() as f32,
            min_p: c["min_p"].as_f64().unwrap() as f32,
            repetition_penalty: c["repetition_penalty"].as_f64().unwrap() as f32,
            // transformers penalizes every token of the sequence.
            penalty_last_n: usize::MAX,
            seed: Some(1),
            ..SamplingParams::default()
        };
        let history: Vec<u32> = serde_json::from_value(case["history"].clone()).unwrap();
        let mut logits = floats(&case["logits"]);
        Sampler::new(params).process(&mut logits, &history);
        assert_logits_eq(&logits, &floats(&case["chain"]["output"]), "chain");
        let want: Vec<f64> = serde_json::from_value(case["chain"]["probs"].clone()).unwrap();
        for (g, w) in sampling::softmax(&logits).iter().zip(&want) {
            assert!((g - w).abs() < 1e-6, "probability {g} vs {w}");
        }
    }
}

#[test]
fn presence_and_frequency_by_formula() {
    let mut l = [1.0, 2.0, 3.0, 4.0, -1.0];
    // Token 1 twice, token 3 once, token 9 is outside the vocabulary and ignored.
    sampling::presence_frequency_penalty(&mut l, &[1, 3, 1, 9], 0.5, 0.25);
    assert_eq!(l, [1.0, 2.0 - 0.5 - 0.5, 3.0, 4.0 - 0.5 - 0.25, -1.0]);

    // The window is the last penalty_last_n tokens of the history.
    let params = SamplingParams {
        temperature: 0.0,
        presence_penalty: 1.0,
        penalty_last_n: 2,
        ..SamplingParams::default()
    };
    let mut l = [5.0, 5.0, 5.0, 4.5];
    let tok = Sampler::new(params).sample(&mut l, &[0, 0, 1, 2]);
    assert_eq!(l, [5.0, 4.0, 4.0, 4.5]);
    assert_eq!(tok, 0);

    // Repetition penalty on a positive and a negative logit; 0 disables the window.
    let mut l = [2.0, -2.0, 1.0];
    sampling::repetition_penalty(&mut l, &[0, 1, 1], 2.0);
    assert_eq!(l, [1.0, -4.0, 1.0]);
    let params = SamplingParams {
        repetition_penalty: 2.0,
        penalty_last_n: 0,
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let mut l = [2.0, -2.0, 1.0];
    Sampler::new(params).sample(&mut l, &[0, 1]);
    assert_eq!(l, [2.0, -2.0, 1.0]);
}

fn draws(seed: u64, n: usize, logits: &[f32], params: &SamplingParams) -> Vec<u32> {
    let mut s = Sampler::new(SamplingParams {
        seed: Some(seed),
        ..params.clone()
    });
    (0..n)
        .map(|_| s.sample(&mut logits.to_vec(), &[]))
        .collect()
}

fn plain(temperature: f32) -> SamplingParams {
    SamplingParams {
        temperature,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        ..SamplingParams::default()
    }
}

#[test]
fn same_seed_same_tokens_different_seed_different() {
    let logits: Vec<f32> = (0..50).map(|i| ((i * 37 % 11) as f32) * 0.3).collect();
    let a = draws(7, 200, &logits, &plain(1.0));
    assert_eq!(a, draws(7, 200, &logits, &plain(1.0)));
    assert_ne!(a, draws(8, 200, &logits, &plain(1.0)));
    // Without a seed two samplers are seeded independently.
    let mut s1 = Sampler::new(plain(1.0));
    let mut s2 = Sampler::new(plain(1.0));
    let x: Vec<u32> = (0..200)
        .map(|_| s1.sample(&mut logits.clone(), &[]))
        .collect();
    let y: Vec<u32> = (0..200)
        .map(|_| s2.sample(&mut logits.clone(), &[]))
        .collect();
    assert_ne!(x, y);
}

/// Pearson's chi-square statistic of observed counts against expected probabilities.
fn chi_square(counts: &[usize], probs: &[f64], n: usize) -> f64 {
    counts
        .iter()
        .zip(probs)
        .filter(|(_, &p)| p > 0.0)
        .map(|(&c, &p)| {
            let e = p * n as f64;
            (c as f64 - e).powi(2) / e
        })
        .sum()
}

#[test]
fn draws_follow_softmax() {
    let logits = [0.5f32, -1.0, 2.0, 0.0, 1.2, -0.3, 0.9];
    let n = 20_000;
    for (params, what) in [
        (plain(1.0), "T=1"),
        (plain(0.6), "T=0.6"),
        (
            SamplingParams {
                top_k: 3,
                ..plain(1.0)
            },
            "top-k 3",
        ),
    ] {
        let mut filtered = logits.to_vec();
        Sampler::new(params.clone()).process(&mut filtered, &[]);
        let probs = sampling::softmax(&filtered);
        let mut counts = [0usize; 7];
        for t in draws(12345, n, &logits, &params) {
            counts[t as usize] += 1;
        }
        for (c, p) in counts.iter().zip(&probs) {
            if *p == 0.0 {
                assert_eq!(*c, 0, "{what}: a filtered token was drawn");
            }
        }
        let dof = probs.iter().filter(|&&p| p > 0.0).count() - 1;
        // 99.9% quantiles of chi-square for 6 and 2 degrees of freedom.
        let critical = if dof == 6 { 22.46 } else { 13.82 };
        let chi2 = chi_square(&counts, &probs, n);
        assert!(
            chi2 < critical,
            "{what}: chi2 {chi2} >= {critical} ({counts:?} vs {probs:?})"
        );
    }
}

#[test]
fn greedy_takes_the_first_largest() {
    let mut s = Sampler::new(SamplingParams::greedy());
    assert_eq!(s.sample(&mut [1.0, 3.0, 3.0, 2.0], &[]), 1);
    assert_eq!(s.sample(&mut [f32::NAN, -1.0, f32::NAN], &[]), 1);
    assert_eq!(s.sample(&mut [], &[]), 0);
    // A tiny temperature with top-k 1 is greedy too.
    let mut s = Sampler::new(SamplingParams {
        temperature: 0.01,
        top_k: 1,
        ..SamplingParams::default()
    });
    assert_eq!(s.sample(&mut [0.0, 9.0, 8.99], &[]), 1);
}

fn push_all(m: &mut StopMatcher, pieces: &[&str]) -> (String, bool) {
    let mut shown = String::new();
    let mut stopped = false;
    for p in pieces {
        let StopOutcome { text, stopped: s } = m.push(p);
        shown.push_str(&text);
        stopped |= s;
    }
    (shown, stopped)
}

#[test]
fn stop_strings_are_held_back_and_cut() {
    // Split across pieces: the partial "<|im" is never shown.
    let mut m = StopMatcher::new(&["<|im_end|>"]);
    assert_eq!(m.push("Hello <|i").text, "Hello ");
    assert_eq!(m.held(), "<|i");
    assert_eq!(m.push("m_"), StopOutcome::default());
    let out = m.push("end|> trailing");
    assert_eq!(
        out,
        StopOutcome {
            text: String::new(),
            stopped: true
        }
    );
    assert!(m.stopped());
    assert_eq!(m.push("more").text, "");

    // A false start is released once it cannot be a stop string.
    let mut m = StopMatcher::new(&["<|im_end|>"]);
    assert_eq!(
        push_all(&mut m, &["a <|", "x b"]),
        ("a <|x b".to_string(), false)
    );

    // The earliest of several stop strings wins; text before it is shown.
    let mut m = StopMatcher::new(&["STOP", "\n\n"]);
    assert_eq!(
        push_all(&mut m, &["one\n", "\ntwo STOP"]),
        ("one".to_string(), true)
    );

    // Held text comes out at the end of the stream.
    let mut m = StopMatcher::new(&["###"]);
    assert_eq!(push_all(&mut m, &["x #", "#"]), ("x ".to_string(), false));
    assert_eq!(m.finish(), "##");

    // Multi-byte text next to a stop string's start; no stop strings at all.
    let mut m = StopMatcher::new(&["éé!"]);
    assert_eq!(push_all(&mut m, &["ééé", "é"]), ("éé".to_string(), false));
    assert_eq!(m.held(), "éé");
    let mut m = StopMatcher::new::<&str>(&[""]);
    assert_eq!(push_all(&mut m, &["a", "b"]), ("ab".to_string(), false));
}

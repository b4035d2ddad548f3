//! The WhisperStyle family against Hugging Face transformers on tiny random-weight models
//! (tests/fixtures/whisper/{tiny80,mel128,shallow}, made by
//! tools/fixtures/make_whisper_fixtures.py): 80 and 128 mel bins, and a turbo-style decoder of
//! one layer under four encoder layers.
//!
//! For each variant, on the CPU reference and on the cpu backend: the encoder's final states
//! and the teacher-forced decoder logits within 1e-5 (relative to the largest reference value),
//! twelve greedy tokens with a KV cache equal to transformers' hand-written greedy loop (and
//! the logits each was chosen from), and the cross-attention weights of the last step.

use cyb_backend::{Backend, Dispatcher};
use cyb_format::safetensors::SafetensorsFile;
use cyb_models::WhisperModel;
use cyb_tensor::DType;
use std::path::PathBuf;
use std::sync::Arc;

const VARIANTS: [&str; 3] = ["tiny80", "mel128", "shallow"];

fn dir(variant: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/whisper")
        .join(variant)
}

struct Reference(SafetensorsFile);

impl Reference {
    fn f32(&self, name: &str) -> Vec<f32> {
        self.0.tensor(name).unwrap().to_f32_vec().unwrap()
    }

    fn ids(&self, name: &str) -> Vec<u32> {
        self.0
            .tensor(name)
            .unwrap()
            .to_i64_vec()
            .unwrap()
            .into_iter()
            .map(|v| v as u32)
            .collect()
    }
}

fn check(what: &str, got: &[f32], want: &[f32]) {
    check_within(what, got, want, 1e-5);
}

fn check_within(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let diff = got
        .iter()
        .zip(want)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    let scale = want.iter().map(|y| y.abs()).fold(0f32, f32::max);
    let e = diff / scale.max(1e-30);
    assert!(e <= tol, "{what}: relative error {e:e} > {tol:e}");
}

fn dispatchers() -> Vec<(&'static str, Arc<Dispatcher>)> {
    let cpu: Arc<dyn Backend> = Arc::new(cyb_cpu::CpuBackend::new().unwrap());
    vec![
        ("reference", Arc::new(Dispatcher::reference())),
        ("cpu", Arc::new(Dispatcher::new(vec![cpu]))),
    ]
}

fn softmax(x: &[f32]) -> Vec<f32> {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = x.iter().map(|v| (v - m).exp()).collect();
    let s: f32 = e.iter().sum();
    e.iter().map(|v| v / s).collect()
}

#[test]
fn whisper_matches_transformers() {
    for variant in VARIANTS {
        let file = cyb_format::open(dir(variant)).unwrap();
        let r =
            Reference(SafetensorsFile::open(dir(variant).join("reference.safetensors")).unwrap());
        for (backend, dispatcher) in dispatchers() {
            let what = |s: &str| format!("{variant} on {backend}: {s}");
            let model = WhisperModel::load(&file, dispatcher).unwrap();
            let c = model.config().clone();
            let audio = model.encode(&r.f32("input_features")).unwrap();
            let states = audio.states.to_f32_vec().unwrap();
            check(
                &what("encoder states"),
                &states,
                &r.f32("encoder_hidden_states"),
            );
            // The cpu backend with AVX-512 keeps the cross-attention keys and values in f16; the
            // looser bounds are their rounding (2^-11 of each value): a few 1e-5 of the logits,
            // 5e-4 of the cross-attention weights. The reference keeps them in f32.
            let half = audio.cross.layer(0).unwrap().0.dtype() == DType::F16;
            assert_eq!(
                half,
                backend == "cpu" && cyb_cpu::KernelSet::Avx512.is_available(),
                "{}",
                what("cross-attention keys and values in f16")
            );
            let check = |what: &str, got: &[f32], want: &[f32]| {
                check_within(what, got, want, if half { 1e-4 } else { 1e-5 })
            };

            let ids = r.ids("decoder_input_ids");
            let mut cache = model.new_cache().unwrap();
            let all: Vec<usize> = (0..ids.len()).collect();
            let rows = model
                .decode(&audio, &[&ids], std::slice::from_mut(&mut cache), &all)
                .unwrap()
                .remove(0);
            check(
                &what("decoder logits"),
                &rows.concat(),
                &r.f32("decoder_logits"),
            );

            // Greedy with a cache: the prefix at once, then one token a step.
            let prefix = r.ids("greedy_prefix");
            let want = r.ids("greedy_ids");
            let want_logits = r.f32("greedy_logits");
            let mut cache = model.new_cache().unwrap();
            let mut logits = model
                .decode(
                    &audio,
                    &[&prefix],
                    std::slice::from_mut(&mut cache),
                    &[prefix.len() - 1],
                )
                .unwrap()
                .remove(0)
                .remove(0);
            let mut got = Vec::new();
            for step in 0..want.len() {
                check(
                    &what(&format!("greedy logits {step}")),
                    &logits,
                    &want_logits[step * c.vocab_size..][..c.vocab_size],
                );
                let next = (0..logits.len())
                    .max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)))
                    .unwrap() as u32;
                got.push(next);
                if step + 1 < want.len() {
                    logits = model
                        .decode(&audio, &[&[next]], std::slice::from_mut(&mut cache), &[0])
                        .unwrap()
                        .remove(0)
                        .remove(0);
                }
            }
            assert_eq!(got, want, "{}", what("greedy tokens"));

            // The last greedy step's cross-attention, every layer and head.
            let mut seq = prefix.clone();
            seq.extend_from_slice(&want[..want.len() - 1]);
            let heads: Vec<(usize, usize)> = (0..c.decoder_layers)
                .flat_map(|l| (0..c.decoder_heads).map(move |h| (l, h)))
                .collect();
            let (scores, _) = model.cross_attention_scores(&audio, &seq, &heads).unwrap();
            let src = c.max_source_positions;
            let last = seq.len() - 1;
            let got: Vec<f32> = scores
                .iter()
                .flat_map(|s| softmax(&s[last * src..][..src]))
                .collect();
            check_within(
                &what("cross-attention weights"),
                &got,
                &r.f32("cross_attentions"),
                if half { 2e-3 } else { 1e-5 },
            );
        }
    }
}

/// whisper.cpp's files of the same weights (tests/fixtures/whisper_ggml/, made by its
/// converter, which rounds every weight through float16, and quantized as its `quantize` tool
/// does) run like transformers to that rounding: encoder states and teacher-forced logits.
#[test]
fn whisper_cpp_files_match_transformers() {
    for (kind, tol) in [("f32", 2e-3), ("f16", 2e-3), ("q8_0", 2e-2), ("q5_1", 0.15)] {
        let path = dir("tiny80").join(format!("../../whisper_ggml/tiny80-{kind}.bin"));
        let file = cyb_format::open(&path).unwrap();
        let r =
            Reference(SafetensorsFile::open(dir("tiny80").join("reference.safetensors")).unwrap());
        for (backend, dispatcher) in dispatchers() {
            let what = |s: &str| format!("tiny80-{kind}.bin on {backend}: {s}");
            let model = WhisperModel::load(&file, dispatcher).unwrap();
            let audio = model.encode(&r.f32("input_features")).unwrap();
            let states = audio.states.to_f32_vec().unwrap();
            check_within(
                &what("encoder states"),
                &states,
                &r.f32("encoder_hidden_states"),
                tol,
            );
            let ids = r.ids("decoder_input_ids");
            let mut cache = model.new_cache().unwrap();
            let all: Vec<usize> = (0..ids.len()).collect();
            let rows = model
                .decode(&audio, &[&ids], std::slice::from_mut(&mut cache), &all)
                .unwrap()
                .remove(0);
            check_within(
                &what("decoder logits"),
                &rows.concat(),
                &r.f32("decoder_logits"),
                tol,
            );
        }
    }
}

#[test]
fn bad_inputs_are_errors() {
    let file = cyb_format::open(dir("tiny80")).unwrap();
    let model = WhisperModel::load(&file, Arc::new(Dispatcher::reference())).unwrap();
    let err = model.encode(&[0.0; 10]).unwrap_err().to_string();
    assert!(err.contains("mel bins"), "{err}");
    let audio = model.encode(&vec![0.0; 80 * 200]).unwrap();
    let mut cache = model.new_cache().unwrap();
    let err = model
        .decode(&audio, &[&[500]], std::slice::from_mut(&mut cache), &[0])
        .unwrap_err()
        .to_string();
    assert!(err.contains("outside the vocabulary"), "{err}");
    let long = vec![1u32; 65];
    let err = model
        .decode(&audio, &[&long], std::slice::from_mut(&mut cache), &[0])
        .unwrap_err()
        .to_string();
    assert!(err.contains("positions"), "{err}");
}

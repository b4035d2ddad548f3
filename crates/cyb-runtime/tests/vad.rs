//! Silero VAD v5 (`tools/fetch_silero_vad.sh` puts it in `~/.cache/cyb-llm/silero-vad/`;
//! `CYB_SILERO_VAD` names another copy) run through the graph path, against
//! tests/fixtures/vad/reference.json (made by tools/fixtures/make_vad_fixtures.py):
//! - chunk probabilities and the carried state against onnxruntime, within 1e-4;
//! - speech spans against faster-whisper's `get_speech_timestamps` fed the same model, exact;
//! - transcripts with VAD against faster-whisper's `vad_filter=True` with Whisper tiny.en
//!   (CTranslate2; `tools/fetch_whisper_tiny_en.sh`): text equal, times within 0.1 s.
//!
//! Tests that need a model file skip, with a note, when it is absent. The span logic alone runs
//! on the fixture's probabilities without any model.

use cyb_runtime::transcribe::{
    speech_timestamps_from_probs, SileroVad, TranscribeOptions, VadOptions, VadState, VAD_WINDOW,
};
use cyb_runtime::{Model, Runtime, RuntimeOptions};
use serde_json::Value;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::OnceLock;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn reference() -> &'static Value {
    static REF: OnceLock<Value> = OnceLock::new();
    REF.get_or_init(|| {
        let text =
            std::fs::read_to_string(root().join("tests/fixtures/vad/reference.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    })
}

fn vad_path() -> PathBuf {
    std::env::var_os("CYB_SILERO_VAD")
        .map(PathBuf::from)
        .unwrap_or_else(SileroVad::default_path)
}

fn vad() -> Option<SileroVad> {
    let path = vad_path();
    if !path.is_file() {
        eprintln!(
            "skipped: {} is absent (run tools/fetch_silero_vad.sh)",
            path.display()
        );
        return None;
    }
    Some(SileroVad::load(&path).unwrap())
}

/// The file decoded by cyb-media, checked against what faster-whisper decoded.
fn audio(name: &str) -> Vec<f32> {
    let a =
        cyb_media::load_16k_mono(&root().join("tests/fixtures/whisper/speech").join(name)).unwrap();
    let want = &reference()["audio"][name];
    assert_eq!(a.len() as u64, want["samples"].as_u64().unwrap(), "{name}");
    let sum: f64 = a.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    let want_sum = want["sum_squares"].as_f64().unwrap();
    assert!(
        (sum - want_sum).abs() <= 1e-9 * want_sum,
        "{name}: {sum} vs {want_sum}"
    );
    a
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn spans(v: &Value) -> Vec<Range<usize>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s[0].as_u64().unwrap() as usize..s[1].as_u64().unwrap() as usize)
        .collect()
}

fn option_set(name: &str) -> VadOptions {
    let o = &reference()["meta"]["option_sets"][name];
    let mut v = VadOptions::default();
    if let Some(x) = o.get("threshold") {
        v.threshold = x.as_f64().unwrap();
    }
    if let Some(x) = o.get("neg_threshold") {
        v.neg_threshold = Some(x.as_f64().unwrap());
    }
    if let Some(x) = o.get("min_speech_duration_ms") {
        v.min_speech_duration_ms = x.as_u64().unwrap() as u32;
    }
    if let Some(x) = o.get("max_speech_duration_s") {
        v.max_speech_duration_s = x.as_f64().unwrap();
    }
    if let Some(x) = o.get("min_silence_duration_ms") {
        v.min_silence_duration_ms = x.as_u64().unwrap() as u32;
    }
    if let Some(x) = o.get("speech_pad_ms") {
        v.speech_pad_ms = x.as_u64().unwrap() as u32;
    }
    v
}

#[test]
fn chunks_and_state_match_onnxruntime() {
    let Some(vad) = vad() else { return };
    // Specialized to 16 kHz and one chunk, the sample-rate and shape branches are gone.
    let g = vad.graph();
    let ifs = g.nodes.iter().filter(|n| n.op.name() == "if").count();
    assert_eq!(ifs, 0, "{} nodes, {ifs} of them If", g.nodes.len());
    let g = &reference()["graph"];
    let a = audio(g["file"].as_str().unwrap());
    let first = g["first_chunk"].as_u64().unwrap() as usize;
    let want = floats(&g["probs"]);
    let mut state = VadState::default();
    for (k, &w) in want.iter().enumerate() {
        let chunk = &a[(first + k) * VAD_WINDOW..][..VAD_WINDOW];
        let p = vad.chunk_probability(&mut state, chunk).unwrap();
        assert!((p - w).abs() <= 1e-4, "chunk {k}: {p} vs onnxruntime {w}");
    }
    let got = state.lstm();
    let want = floats(&g["state"]);
    assert_eq!(got.len(), want.len());
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst <= 1e-4, "state differs by {worst}");
}

#[test]
fn whole_files_match_onnxruntime_and_faster_whisper_spans() {
    let Some(vad) = vad() else { return };
    let r = reference();
    for (name, want_probs) in r["probs"].as_object().unwrap() {
        let a = audio(name);
        let probs = vad.speech_probabilities(&a).unwrap();
        let want_probs = floats(want_probs);
        assert_eq!(probs.len(), want_probs.len(), "{name}");
        let worst = probs
            .iter()
            .zip(&want_probs)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        eprintln!(
            "{name}: {} chunks, largest difference {worst:.2e}",
            probs.len()
        );
        assert!(worst <= 1e-4, "{name}: probabilities differ by {worst}");
        for (set, want) in r["timestamps"][name].as_object().unwrap() {
            let opts = option_set(set);
            let got = speech_timestamps_from_probs(&probs, a.len(), &opts);
            assert_eq!(got, spans(want), "{name}, {set}");
        }
        assert_eq!(
            vad.speech_timestamps(&a, &VadOptions::default()).unwrap(),
            spans(&r["timestamps"][name]["default"]),
            "{name}"
        );
    }
}

/// The span logic alone, on onnxruntime's probabilities: needs no model.
#[test]
fn spans_from_reference_probabilities_match_faster_whisper() {
    let r = reference();
    for (name, probs) in r["probs"].as_object().unwrap() {
        let probs = floats(probs);
        let len = r["audio"][name]["samples"].as_u64().unwrap() as usize;
        for (set, want) in r["timestamps"][name].as_object().unwrap() {
            let got = speech_timestamps_from_probs(&probs, len, &option_set(set));
            assert_eq!(got, spans(want), "{name}, {set}");
        }
    }
}

/// An ONNX model with Silero's inputs `input`, `state`, `sr` (or others) whose outputs copy
/// `input` and `state`.
fn identity_model(inputs: [&str; 3]) -> Vec<u8> {
    use cyb_format::onnx::proto::*;
    use prost::Message;
    let vi = |name: &str, elem: i32, rank: usize| ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: elem,
                shape: Some(TensorShapeProto {
                    dim: (0..rank)
                        .map(|i| Dimension {
                            dim_value: None,
                            dim_param: Some(format!("{name}_{i}")),
                        })
                        .collect(),
                }),
            }),
            ..Default::default()
        }),
    };
    let node = |i: &str, o: &str| NodeProto {
        input: vec![i.into()],
        output: vec![o.into()],
        name: format!("copy_{i}"),
        op_type: "Identity".into(),
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 16,
        }],
        graph: Some(GraphProto {
            node: vec![node(inputs[0], "output"), node(inputs[1], "stateN")],
            name: "not_silero".into(),
            input: vec![
                vi(inputs[0], 1, 2),
                vi(inputs[1], 1, 3),
                vi(inputs[2], 7, 0),
            ],
            output: vec![vi("output", 1, 2), vi("stateN", 1, 3)],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn a_file_that_is_not_silero_vad_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("cyb-vad-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let garbage = dir.join("garbage.onnx");
    std::fs::write(&garbage, b"this is not a protobuf").unwrap();
    let e = SileroVad::load(&garbage).err().unwrap().to_string();
    assert!(
        e.contains("garbage.onnx") && e.contains("Silero VAD"),
        "{e}"
    );

    let absent = dir.join("absent.onnx");
    let e = SileroVad::load(&absent).err().unwrap().to_string();
    assert!(e.contains("fetch_silero_vad.sh"), "{e}");

    let renamed = dir.join("renamed.onnx");
    std::fs::write(&renamed, identity_model(["audio", "state", "sr"])).unwrap();
    let e = SileroVad::load(&renamed).err().unwrap().to_string();
    assert!(
        e.contains("not a Silero VAD v5 model") && e.contains("\"input\""),
        "{e}"
    );

    // Silero's inputs and outputs, but the "probability" is the whole input.
    let copies = dir.join("copies.onnx");
    std::fs::write(&copies, identity_model(["input", "state", "sr"])).unwrap();
    let e = SileroVad::load(&copies).err().unwrap().to_string();
    assert!(
        e.contains("not a Silero VAD v5 model") && e.contains("[1, 576]"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn chunks_of_the_wrong_size_are_refused() {
    let Some(vad) = vad() else { return };
    let mut state = VadState::default();
    let e = vad.chunk_probability(&mut state, &[0.0; 100]).unwrap_err();
    assert!(e.to_string().contains("512"), "{e}");
    assert_eq!(state, VadState::default());
    // Empty audio is one silent chunk, as faster-whisper pads it; no speech.
    assert_eq!(vad.speech_probabilities(&[]).unwrap().len(), 1);
    assert!(vad
        .speech_timestamps(&[], &VadOptions::default())
        .unwrap()
        .is_empty());
}

fn whisper() -> Option<Model> {
    let dir = cyb_runtime::cache_dir().join("whisper-tiny.en-ct2");
    if !dir.join("model.bin").is_file() {
        eprintln!(
            "skipped: {} is absent (run tools/fetch_whisper_tiny_en.sh)",
            dir.display()
        );
        return None;
    }
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    Some(rt.load(&dir).unwrap())
}

fn compare(what: &str, got: &cyb_runtime::Transcript, want: &Value, failures: &mut Vec<String>) {
    let close = |a: f64, b: &Value| (a - b.as_f64().unwrap()).abs() <= 0.1;
    if got.text.trim() != want["text"].as_str().unwrap() {
        failures.push(format!(
            "{what}: text {:?}, want {}",
            got.text.trim(),
            want["text"]
        ));
        return;
    }
    if !close(got.duration, &want["duration"]) {
        failures.push(format!("{what}: duration {}", got.duration));
    }
    let segs = want["segments"].as_array().unwrap();
    if segs.len() != got.segments.len() {
        failures.push(format!(
            "{what}: {} segments, want {}",
            got.segments.len(),
            segs.len()
        ));
        return;
    }
    for (g, w) in got.segments.iter().zip(segs) {
        if g.text != w["text"].as_str().unwrap()
            || !close(g.start, &w["start"])
            || !close(g.end, &w["end"])
        {
            failures.push(format!(
                "{what}: segment {} {:?} at {}–{}, want {} at {}–{}",
                g.id, g.text, g.start, g.end, w["text"], w["start"], w["end"]
            ));
        }
        if let Some(words) = w.get("words").and_then(Value::as_array) {
            let got_words = g.words.as_deref().unwrap_or_default();
            if got_words.len() != words.len() {
                failures.push(format!("{what}: segment {} word count", g.id));
                continue;
            }
            for (gw, ww) in got_words.iter().zip(words) {
                if gw.word != ww["word"].as_str().unwrap()
                    || !close(gw.start, &ww["start"])
                    || !close(gw.end, &ww["end"])
                {
                    failures.push(format!(
                        "{what}: word {:?} at {}–{}, want {} at {}–{}",
                        gw.word, gw.start, gw.end, ww["word"], ww["start"], ww["end"]
                    ));
                }
            }
        }
    }
}

#[test]
fn transcripts_with_vad_match_faster_whisper() {
    let Some(vad) = vad() else { return };
    let Some(model) = whisper() else { return };
    let speech = model.speech().unwrap();
    speech.set_vad(vad);
    let r = reference();
    let mut failures = Vec::new();
    for (name, configs) in r["transcripts"].as_object().unwrap() {
        let a = audio(name);
        for (config, want) in configs.as_object().unwrap() {
            let opts = TranscribeOptions {
                language: Some("en".into()),
                beam_size: 5,
                word_timestamps: config == "beam5_words",
                vad: Some(VadOptions::default()),
                ..TranscribeOptions::default()
            };
            let mut live = Vec::new();
            let got = model
                .transcribe(&a, &opts, &mut |s, _| {
                    live.push((s.start, s.end));
                    true
                })
                .unwrap();
            // Segments reach the callback with the times of the original audio too.
            let last: Vec<(f64, f64)> = got.segments.iter().map(|s| (s.start, s.end)).collect();
            assert_eq!(live, last, "{name} {config}");
            compare(&format!("{name} {config}"), &got, want, &mut failures);
        }
    }
    let ns = &r["no_speech"];
    let a = audio(ns["file"].as_str().unwrap());
    let head = &a[..ns["samples"].as_u64().unwrap() as usize];
    let opts = TranscribeOptions {
        language: Some("en".into()),
        vad: Some(VadOptions::default()),
        ..TranscribeOptions::default()
    };
    let got = model.transcribe(head, &opts, &mut |_, _| true).unwrap();
    compare("no speech", &got, &ns["beam5"], &mut failures);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

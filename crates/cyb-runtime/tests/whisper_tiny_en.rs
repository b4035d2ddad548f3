//! The real Whisper tiny.en (CTranslate2, fp16; `tools/fetch_whisper_tiny_en.sh` puts it in
//! `~/.cache/cyb-llm/whisper-tiny.en-ct2`) on the Piper-spoken test files
//! (tests/fixtures/whisper/speech) against faster-whisper's transcripts of the same files with
//! the same options (tests/fixtures/whisper/transcripts.json, made by
//! tools/fixtures/make_whisper_transcripts.py): greedy and beam 5, no VAD. The text must be
//! equal, segment times within 0.1 s, and the same for word times with word timestamps.
//!
//! Skipped, with a note, when the model is not in the cache.

use cyb_runtime::transcribe::TranscribeOptions;
use cyb_runtime::{Model, Runtime, RuntimeOptions};
use serde_json::Value;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/whisper")
}

fn model() -> Option<Model> {
    model_on(None)
}

fn model_on(backend: Option<&str>) -> Option<Model> {
    let dir = cyb_runtime::cache_dir().join("whisper-tiny.en-ct2");
    if !dir.join("model.bin").is_file() {
        eprintln!(
            "skipped: {} is absent (run tools/fetch_whisper_tiny_en.sh)",
            dir.display()
        );
        return None;
    }
    let rt = Runtime::new(RuntimeOptions {
        backend: backend.map(String::from),
        ..RuntimeOptions::default()
    })
    .unwrap();
    Some(rt.load(&dir).unwrap())
}

fn reference() -> Value {
    let text = std::fs::read_to_string(fixtures().join("transcripts.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn options(config: &str) -> TranscribeOptions {
    TranscribeOptions {
        language: Some("en".into()),
        beam_size: if config == "greedy" { 1 } else { 5 },
        word_timestamps: config == "beam5_words",
        ..TranscribeOptions::default()
    }
}

fn check_config(config: &str) {
    if let Some(model) = model() {
        check_model(&model, config, usize::MAX);
    }
}

fn check_model(model: &Model, config: &str, max_files: usize) {
    let reference = reference();
    let files = reference["files"].as_object().unwrap();
    let mut failures = Vec::new();
    for (name, by_config) in files.iter().take(max_files) {
        let want = &by_config[config];
        if want.is_null() {
            continue;
        }
        let audio = cyb_media::load_16k_mono(&fixtures().join("speech").join(name)).unwrap();
        let got = model
            .transcribe(&audio, &options(config), &mut |_, _| true)
            .unwrap();
        let want_text = want["text"].as_str().unwrap();
        if got.text.trim() != want_text.trim() {
            failures.push(format!(
                "{name}: text\n  got  {:?}\n  want {:?}",
                got.text.trim(),
                want_text
            ));
            continue;
        }
        let segs = want["segments"].as_array().unwrap();
        if segs.len() != got.segments.len() {
            failures.push(format!(
                "{name}: {} segments, want {}",
                got.segments.len(),
                segs.len()
            ));
            continue;
        }
        for (g, w) in got.segments.iter().zip(segs) {
            let (ws, we) = (w["start"].as_f64().unwrap(), w["end"].as_f64().unwrap());
            if (g.start - ws).abs() > 0.1 || (g.end - we).abs() > 0.1 {
                failures.push(format!(
                    "{name}: segment {} at {}–{}, want {ws}–{we}",
                    g.id, g.start, g.end
                ));
            }
            if g.text != w["text"].as_str().unwrap() {
                failures.push(format!("{name}: segment {} text {:?}", g.id, g.text));
            }
            if let Some(words) = w["words"].as_array() {
                let got_words = g.words.as_deref().unwrap_or_default();
                if got_words.len() != words.len() {
                    failures.push(format!(
                        "{name}: segment {} has {} words, want {}",
                        g.id,
                        got_words.len(),
                        words.len()
                    ));
                    continue;
                }
                for (gw, ww) in got_words.iter().zip(words) {
                    let (ws, we) = (ww["start"].as_f64().unwrap(), ww["end"].as_f64().unwrap());
                    if gw.word != ww["word"].as_str().unwrap()
                        || (gw.start - ws).abs() > 0.1
                        || (gw.end - we).abs() > 0.1
                    {
                        failures.push(format!(
                            "{name}: word {:?} {}–{}, want {:?} {ws}–{we}",
                            gw.word, gw.start, gw.end, ww["word"]
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{config}:\n{}", failures.join("\n"));
}

/// On the wgpu backend the decoder's self-attention caches stay on the device, beams copying
/// them there (lavapipe in CI: slow, so one file; every file and greedy decoding too with
/// `CYB_TEST_WGPU_FULL=1`, for a real GPU).
#[test]
fn beam_search_on_wgpu_equals_faster_whisper() {
    let Some(model) = model_on(Some("wgpu")) else {
        return;
    };
    let cache = model.speech().unwrap().model().new_cache().unwrap();
    assert!(cache.on_device(), "the wgpu backend should keep the cache");
    if std::env::var("CYB_TEST_WGPU_FULL").is_ok_and(|v| v == "1") {
        check_model(&model, "beam5", usize::MAX);
        check_model(&model, "greedy", usize::MAX);
    } else {
        check_model(&model, "beam5", 1);
    }
}

#[test]
fn greedy_equals_faster_whisper() {
    check_config("greedy");
}

#[test]
fn beam_search_equals_faster_whisper() {
    check_config("beam5");
}

#[test]
fn word_timestamps_equal_faster_whisper() {
    check_config("beam5_words");
}

#[test]
fn empty_and_silent_audio_and_bad_options() {
    let Some(model) = model() else { return };
    let opts = options("beam5");
    let t = model.transcribe(&[], &opts, &mut |_, _| true).unwrap();
    assert!(t.segments.is_empty() && t.text.is_empty(), "{t:?}");
    let t = model
        .transcribe(&[0.0; 100], &opts, &mut |_, _| true)
        .unwrap();
    assert!(t.segments.is_empty(), "shorter than one frame: {t:?}");
    // Ten seconds of silence: whatever is decoded, it is bounded and ends.
    let t = model
        .transcribe(&vec![0.0; 160_000], &opts, &mut |_, _| true)
        .unwrap();
    assert!((t.duration - 10.0).abs() < 1e-9);
    for bad in [
        TranscribeOptions {
            beam_size: 0,
            ..opts.clone()
        },
        TranscribeOptions {
            temperatures: vec![],
            ..opts.clone()
        },
        TranscribeOptions {
            temperatures: vec![f32::NAN],
            ..opts.clone()
        },
        TranscribeOptions {
            language: Some("de".into()),
            ..opts.clone()
        },
        TranscribeOptions {
            suppress_tokens: vec![999_999],
            ..opts.clone()
        },
    ] {
        let err = model.transcribe(&[0.0; 16_000], &bad, &mut |_, _| true);
        assert!(err.is_err(), "{bad:?} should be refused");
    }
    // Stopping early from the callback returns what was decoded so far.
    let audio = cyb_media::load_16k_mono(&fixtures().join("speech/long_paragraph.flac")).unwrap();
    let mut seen = 0;
    let t = model
        .transcribe(&audio, &options("greedy"), &mut |_, _| {
            seen += 1;
            false
        })
        .unwrap();
    assert_eq!((seen, t.segments.len()), (1, 1));
}

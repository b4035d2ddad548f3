//! Times Silero VAD v5 (`tools/fetch_silero_vad.sh`) over an audio file: speech probabilities
//! of every 512-sample chunk, the median of 5 runs, with the CPU reference and the cpu backend.
//!
//! cargo run --release -p cyb-runtime --example vad_timing [AUDIO] [VAD_MODEL]
//! (defaults: tests/fixtures/whisper/speech/long_paragraph.flac, the cached model)

use cyb_backend::Dispatcher;
use cyb_runtime::transcribe::{SileroVad, VAD_WINDOW};
use cyb_runtime::RuntimeOptions;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

fn main() -> cyb_tensor::Result<()> {
    let mut args = std::env::args().skip(1);
    let audio = args.next().map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/whisper/speech/long_paragraph.flac")
    });
    let model = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(SileroVad::default_path);
    let samples = cyb_media::load_16k_mono(&audio)
        .map_err(|e| cyb_tensor::Error::invalid("audio", e.to_string()))?;
    let chunks = samples.len() / VAD_WINDOW + 1;
    let chains: [(&str, Arc<Dispatcher>); 2] = [
        ("reference", Arc::new(Dispatcher::reference())),
        (
            "cpu",
            Arc::new(Dispatcher::new(vec![
                RuntimeOptions::default().cpu_backend()?
            ])),
        ),
    ];
    println!(
        "{}: {:.2} s of audio, {chunks} chunks",
        audio.display(),
        samples.len() as f64 / 16_000.0
    );
    for (name, dispatcher) in chains {
        let vad = SileroVad::load_with(&model, dispatcher)?;
        let mut times = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            vad.speech_probabilities(&samples)?;
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let t = times[2];
        println!(
            "{name:>9}: {:.3} s, {:.1} µs per chunk, real-time factor {:.4}",
            t,
            t * 1e6 / chunks as f64,
            t / (samples.len() as f64 / 16_000.0)
        );
    }
    Ok(())
}

//! `cyb-llm transcribe MODEL AUDIO... [--language L] [--task translate] [--beam-size N] [--vad]
//! [--format txt|srt|vtt|json|verbose_json] [-o FILE]`: speech to text with a Whisper model.
//! Each file is decoded (WAV, FLAC, MP3, OGG/Vorbis, M4A/AAC; `-` reads WAV or raw 16 kHz
//! s16le PCM from stdin), streamed through the model in 30 s windows, and written in the
//! chosen form. With `--vad`, Silero VAD cuts the silence out first (faster-whisper's
//! `vad_filter`). Segments are printed as they come when the output is a terminal; a progress
//! bar goes to stderr otherwise.

use crate::session_args::EngineArgs;
use cyb_runtime::transcribe::{
    audio_source, Progress, Segment, SileroVad, Task, TranscribeOptions, TranscriptFormat,
    VadOptions,
};
use cyb_tensor::{Error, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct TranscribeArgs {
    /// A Whisper model: a CTranslate2 directory (faster-whisper's), a Hugging Face directory or a
    /// `.model` file imported from either.
    pub model: String,
    /// Audio files (`-` for stdin: WAV, or raw s16le mono PCM at 16 kHz).
    #[arg(required = true)]
    pub audio: Vec<PathBuf>,
    /// Spoken language (`en`, `de`, ...); detected from the first 30 s when left out
    /// (multilingual models).
    #[arg(long)]
    pub language: Option<String>,
    /// transcribe, or translate (into English; multilingual models).
    #[arg(long, default_value = "transcribe")]
    pub task: String,
    /// Beam size at temperature 0 (1 = greedy).
    #[arg(long, default_value_t = 5)]
    pub beam_size: usize,
    /// Samples drawn at each temperature above 0.
    #[arg(long, default_value_t = 5)]
    pub best_of: usize,
    /// Beam search patience.
    #[arg(long, default_value_t = 1.0)]
    pub patience: f32,
    /// Temperatures tried in turn (comma-separated) until a result passes the thresholds.
    #[arg(long, default_value = "0,0.2,0.4,0.6,0.8,1.0")]
    pub temperature: String,
    /// Text that prompts the first window (names, spelling, style).
    #[arg(long)]
    pub initial_prompt: Option<String>,
    /// Do not prompt each window with the previous text.
    #[arg(long)]
    pub no_condition_on_previous_text: bool,
    /// Text only, one segment per 30 s window.
    #[arg(long)]
    pub without_timestamps: bool,
    /// Token ids never to produce (comma-separated); -1 stands for the model's non-speech
    /// symbols (brackets, music notes, ...).
    #[arg(long, default_value = "-1", allow_hyphen_values = true)]
    pub suppress_tokens: String,
    /// Time each word (verbose_json lists the words).
    #[arg(long)]
    pub word_timestamps: bool,
    /// Skip silence with Silero VAD v5 before decoding (faster-whisper's vad_filter); times stay
    /// those of the original audio. The model is read from the cache (tools/fetch_silero_vad.sh
    /// puts it there) unless --vad-model names it.
    #[arg(long)]
    pub vad: bool,
    /// The Silero VAD v5 model (silero_vad.onnx); implies --vad.
    #[arg(long, value_name = "PATH")]
    pub vad_model: Option<PathBuf>,
    /// VAD: a 32 ms chunk whose speech probability is at least this is speech.
    #[arg(long, default_value_t = 0.5)]
    pub vad_threshold: f64,
    /// VAD: silence this long ends a stretch of speech.
    #[arg(long, default_value_t = 2000)]
    pub vad_min_silence_ms: u32,
    /// VAD: speech shorter than this is dropped.
    #[arg(long, default_value_t = 0)]
    pub vad_min_speech_ms: u32,
    /// VAD: milliseconds of audio kept on each side of the speech.
    #[arg(long, default_value_t = 400)]
    pub vad_speech_pad_ms: u32,
    /// txt, srt, vtt, json or verbose_json.
    #[arg(long, default_value = "txt")]
    pub format: String,
    /// Write here instead of stdout (with several inputs: a directory, one file per input).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Print the real-time factor, encoder and decoder timings and peak memory to stderr.
    #[arg(long)]
    pub bench: bool,
    /// Seed of the sampler used at temperatures above 0.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl TranscribeArgs {
    fn options(&self) -> Result<TranscribeOptions> {
        let task = match self.task.as_str() {
            "transcribe" => Task::Transcribe,
            "translate" => Task::Translate,
            other => {
                return Err(Error::invalid(
                    "--task",
                    format!("{other:?} is not transcribe or translate"),
                ))
            }
        };
        let temperatures = self
            .temperature
            .split(',')
            .map(|t| {
                t.trim()
                    .parse::<f32>()
                    .map_err(|_| Error::invalid("--temperature", format!("{t:?} is not a number")))
            })
            .collect::<Result<Vec<_>>>()?;
        let suppress_tokens = self
            .suppress_tokens
            .split(',')
            .filter(|t| !t.trim().is_empty())
            .map(|t| {
                t.trim().parse::<i64>().map_err(|_| {
                    Error::invalid("--suppress-tokens", format!("{t:?} is not a token id"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let vad = (self.vad || self.vad_model.is_some()).then(|| VadOptions {
            threshold: self.vad_threshold,
            min_silence_duration_ms: self.vad_min_silence_ms,
            min_speech_duration_ms: self.vad_min_speech_ms,
            speech_pad_ms: self.vad_speech_pad_ms,
            ..VadOptions::default()
        });
        let opts = TranscribeOptions {
            language: self.language.clone(),
            task,
            beam_size: self.beam_size,
            best_of: self.best_of,
            patience: self.patience,
            temperatures,
            initial_prompt: self.initial_prompt.clone(),
            condition_on_previous_text: !self.no_condition_on_previous_text,
            without_timestamps: self.without_timestamps,
            word_timestamps: self.word_timestamps,
            suppress_tokens,
            seed: self.seed,
            vad,
            ..TranscribeOptions::default()
        };
        opts.validate()?;
        Ok(opts)
    }
}

pub fn run(args: TranscribeArgs) -> Result<()> {
    let format = TranscriptFormat::parse(&args.format).ok_or_else(|| {
        Error::invalid(
            "--format",
            format!(
                "{:?} is not one of {}",
                args.format,
                TranscriptFormat::NAMES
            ),
        )
    })?;
    let opts = args.options()?;
    let vad = match (&opts.vad, &args.vad_model) {
        (None, _) => None,
        (Some(_), path) => Some(load_vad(path.as_deref())?),
    };
    let model = args.engine.load(Some(&args.model))?;
    let speech = model.speech()?;
    if let Some(vad) = vad {
        speech.set_vad(vad);
    }
    let many = args.audio.len() > 1;
    let stdout_tty = std::io::stdout().is_terminal() && args.output.is_none();
    for input in &args.audio {
        let source = audio_source(input)?;
        let total = source.total_seconds;
        let bar = progress_bar(total, stdout_tty);
        let live = stdout_tty && format == TranscriptFormat::Text;
        let t0 = std::time::Instant::now();
        let mut on_segment = |s: &Segment, p: Progress| {
            if live {
                println!(
                    "[{} --> {}] {}",
                    cyb_runtime::transcribe::clock(s.start, true),
                    cyb_runtime::transcribe::clock(s.end, true),
                    s.text.trim()
                );
            }
            if let Some(b) = &bar {
                b.set_position((p.done * 10.0) as u64);
            }
            true
        };
        let transcript = speech.transcribe_stream(
            source.chunks,
            source.total_samples,
            &opts,
            &mut on_segment,
        )?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        let elapsed = t0.elapsed().as_secs_f64();
        if args.bench {
            let s = &transcript.stats;
            eprintln!(
                "{}: {:.2} s of audio in {:.3} s, real-time factor {:.4}; encoder {:.1} ms per \
                 30 s window ({} windows); decoder {:.1} tokens/s ({} tokens); peak RSS {} MiB",
                input.display(),
                transcript.duration,
                elapsed,
                elapsed / transcript.duration.max(1e-9),
                s.encode_seconds * 1e3 / s.windows.max(1) as f64,
                s.windows,
                s.decoded_tokens as f64 / s.decode_seconds.max(1e-9),
                s.decoded_tokens,
                peak_rss_mib().map_or("?".into(), |m| m.to_string())
            );
            tracing::debug!(
                "where the ops ran:\n{}",
                speech.model().dispatcher().log().summary()
            );
        }
        if live {
            continue;
        }
        let text = transcript.render(format);
        match &args.output {
            None => {
                print!("{text}");
                std::io::stdout().flush().ok();
            }
            Some(out) => {
                let path = if many {
                    std::fs::create_dir_all(out).map_err(|source| Error::Io {
                        path: out.clone(),
                        source,
                    })?;
                    out.join(output_name(input, &args.format))
                } else {
                    out.clone()
                };
                std::fs::write(&path, text).map_err(|source| Error::Io { path, source })?;
            }
        }
    }
    Ok(())
}

/// The VAD model at `path`, else the cached one; its absence is an error that says how to get
/// it.
fn load_vad(path: Option<&Path>) -> Result<SileroVad> {
    let (path, given) = match path {
        Some(p) => (p.to_path_buf(), true),
        None => (SileroVad::default_path(), false),
    };
    if !path.is_file() {
        let reason = if given {
            format!("{} does not exist", path.display())
        } else {
            format!(
                "the Silero VAD model is not in the cache ({}); run tools/fetch_silero_vad.sh, \
                 or pass --vad-model PATH (silero_vad.onnx of the PyPI package silero-vad 5.x)",
                path.display()
            )
        };
        return Err(Error::invalid("--vad", reason));
    }
    SileroVad::load(&path)
}

/// `talk.flac` → `talk.srt` (`stdin.txt` for `-`).
fn output_name(input: &Path, format: &str) -> String {
    let stem = input
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| *s != "-")
        .unwrap_or("stdin");
    let ext = match format {
        "text" => "txt",
        "verbose_json" => "json",
        f => f,
    };
    format!("{stem}.{ext}")
}

/// A bar over the audio's seconds (tenths) on stderr when it is a terminal and segments are not
/// printed there already.
fn progress_bar(total: Option<f64>, live: bool) -> Option<ProgressBar> {
    if live || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = match total {
        Some(t) => ProgressBar::new((t * 10.0) as u64),
        None => ProgressBar::new_spinner(),
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {percent}% audio")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    Some(bar)
}

/// Peak resident memory of this process (Linux `VmHWM`).
fn peak_rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

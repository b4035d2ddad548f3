//! Speech recognition with a WhisperStyle model: log-mel features, 30 s windows decoded with
//! the prompt, logit rules, search and temperature fallback of faster-whisper, segments with
//! timestamps, and the text forms of the result.
//!
//! [`Transcriber`] holds the model, tokenizer and feature extractor; `transcribe` takes 16 kHz
//! mono samples (or a stream of them) and reports each segment as it is decoded. With
//! [`TranscribeOptions::vad`] set, silence is cut out first by Silero VAD ([`SileroVad`]) and
//! the times are mapped back to the original audio, as faster-whisper's `vad_filter` does.

mod audio;
mod filters;
mod longform;
mod options;
mod output;
mod search;
mod speech_chunks;
mod tokens;
mod vad;
mod words;

pub use audio::{audio_error, audio_source, decode_audio_bytes, AudioSource};
pub use options::{Task, TranscribeOptions};
pub use output::{clock, Segment, TranscribeStats, Transcript, TranscriptFormat, Word};
pub use speech_chunks::{
    collect_chunks, speech_timestamps_from_probs, SpeechTimestampsMap, VadOptions,
};
pub use tokens::{SpecialTokens, LANGUAGES, TIME_PRECISION};
pub use vad::{SileroVad, VadState, VAD_CONTEXT, VAD_SAMPLE_RATE, VAD_WINDOW};

use crate::Tokenizer;
use cyb_backend::Dispatcher;
use cyb_format::ModelFile;
use cyb_media::LogMel;
use cyb_models::WhisperModel;
use cyb_tensor::Result;
use std::sync::{Arc, Mutex};

/// Mel frames per second (a hop of 160 samples at 16 kHz).
pub const FRAMES_PER_SECOND: usize = 100;
/// Audio samples per mel frame.
pub const HOP: usize = 160;
/// Mel frames per encoder output position.
const INPUT_STRIDE: usize = 2;

/// A loaded speech recognizer.
pub struct Transcriber {
    model: WhisperModel,
    tokenizer: Tokenizer,
    special: SpecialTokens,
    mel: LogMel,
    /// The model's non-speech symbols (what `-1` in `suppress_tokens` stands for).
    non_speech: Vec<u32>,
    /// A space and end of text (never the first token).
    suppress_begin: Vec<u32>,
    /// The voice activity detector for [`TranscribeOptions::vad`]: the one set with
    /// [`Transcriber::set_vad`], else [`SileroVad::default_path`] loaded on first use.
    vad: Mutex<Option<Arc<SileroVad>>>,
}

/// Progress of a transcription, reported with each segment.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Seconds of audio decoded.
    pub done: f64,
    /// Seconds of audio in all, when known.
    pub total: Option<f64>,
}

impl Transcriber {
    /// Loads the model in `file` (its config must name Whisper) with its tokenizer.
    pub fn load(file: &ModelFile, dispatcher: Arc<Dispatcher>) -> Result<Transcriber> {
        let model = WhisperModel::load(file, dispatcher)?;
        let tokenizer = Tokenizer::from_model_file(file)?;
        Transcriber::from_parts(model, tokenizer)
    }

    pub(crate) fn from_parts(model: WhisperModel, tokenizer: Tokenizer) -> Result<Transcriber> {
        let c = model.config();
        let special = SpecialTokens::find(&tokenizer, c.vocab_size)?;
        let mel = LogMel::whisper(c.num_mel_bins);
        let non_speech = tokens::non_speech_tokens(&tokenizer)?;
        let space = tokenizer.encode(" ", false)?;
        let mut suppress_begin = space;
        suppress_begin.push(special.eot);
        Ok(Transcriber {
            model,
            tokenizer,
            special,
            mel,
            non_speech,
            suppress_begin,
            vad: Mutex::new(None),
        })
    }

    /// Runs the encoder on a window of silence and the decoder for a few tokens of beam width,
    /// so the backend prepares its forms of every weight (repacked panels, quantized layouts)
    /// while loading rather than during the first transcription.
    pub fn warm_up(&self) -> Result<()> {
        let c = self.model.config();
        let audio = self
            .model
            .encode(&vec![0.0; c.num_mel_bins * c.window_frames()])?;
        let mut caches = Vec::new();
        let prompt = [self.special.sot];
        for _ in 0..2 {
            caches.push(self.model.new_cache()?);
        }
        let rows: Vec<&[u32]> = (0..caches.len()).map(|_| &prompt[..]).collect();
        self.model.decode(&audio, &rows, &mut caches, &[0])?;
        Ok(())
    }

    /// Uses `vad` to find speech when [`TranscribeOptions::vad`] is set.
    pub fn set_vad(&self, vad: SileroVad) {
        *self.vad.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(vad));
    }

    /// The voice activity detector: the one set, else [`SileroVad::default_path`], loaded now
    /// and kept (its absence is an error saying how to fetch it).
    pub fn vad(&self) -> Result<Arc<SileroVad>> {
        let mut slot = self.vad.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = slot.as_ref() {
            return Ok(v.clone());
        }
        let v = Arc::new(SileroVad::load(&SileroVad::default_path())?);
        *slot = Some(v.clone());
        Ok(v)
    }

    pub fn model(&self) -> &WhisperModel {
        &self.model
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    /// True for multilingual checkpoints.
    pub fn is_multilingual(&self) -> bool {
        self.special.multilingual
    }

    /// Transcribes `samples` (16 kHz mono), calling `on_segment` with each segment as it is
    /// decoded (return `false` to stop early).
    pub fn transcribe(
        &self,
        samples: &[f32],
        opts: &TranscribeOptions,
        on_segment: &mut dyn FnMut(&Segment, Progress) -> bool,
    ) -> Result<Transcript> {
        opts.validate()?;
        if let Some(vad_opts) = &opts.vad {
            return self.transcribe_speech(samples, opts, vad_opts, on_segment);
        }
        let source = samples
            .chunks(longform::BLOCK_SAMPLES)
            .map(|c| Ok(c.to_vec()));
        longform::run(
            self,
            Box::new(source),
            Some(samples.len()),
            opts,
            on_segment,
        )
    }

    /// As [`Transcriber::transcribe`] over a stream of 16 kHz mono chunks (a long file or
    /// stdin): memory stays bounded by a few minutes of audio whatever the length (with VAD,
    /// the whole audio is read first, as the speech spans need all of it).
    /// `total_samples` is only used for progress.
    pub fn transcribe_stream(
        &self,
        source: Box<dyn Iterator<Item = Result<Vec<f32>>> + '_>,
        total_samples: Option<usize>,
        opts: &TranscribeOptions,
        on_segment: &mut dyn FnMut(&Segment, Progress) -> bool,
    ) -> Result<Transcript> {
        opts.validate()?;
        if opts.vad.is_some() {
            let mut samples = Vec::with_capacity(total_samples.unwrap_or(0));
            for chunk in source {
                samples.extend_from_slice(&chunk?);
            }
            return self.transcribe(&samples, opts, on_segment);
        }
        longform::run(self, source, total_samples, opts, on_segment)
    }

    /// faster-whisper's `vad_filter`: transcribes the speech spans of `samples` concatenated,
    /// then puts segment and word times back on the original timeline.
    fn transcribe_speech(
        &self,
        samples: &[f32],
        opts: &TranscribeOptions,
        vad_opts: &VadOptions,
        on_segment: &mut dyn FnMut(&Segment, Progress) -> bool,
    ) -> Result<Transcript> {
        let spans = self.vad()?.speech_timestamps(samples, vad_opts)?;
        let speech = collect_chunks(samples, &spans);
        let map = SpeechTimestampsMap::new(&spans);
        // faster-whisper maps times only when there is speech (with none, nothing is decoded).
        let restore = !spans.is_empty();
        let duration = samples.len() as f64 / VAD_SAMPLE_RATE as f64;
        let mut report = |seg: &Segment, p: Progress| {
            let mut seg = seg.clone();
            if restore {
                map.restore_segment(&mut seg);
            }
            let done = if restore {
                map.original_time(p.done, None, true)
            } else {
                p.done
            };
            on_segment(
                &seg,
                Progress {
                    done: done.min(duration),
                    total: Some(duration),
                },
            )
        };
        let inner = TranscribeOptions {
            vad: None,
            ..opts.clone()
        };
        let source = speech
            .chunks(longform::BLOCK_SAMPLES)
            .map(|c| Ok(c.to_vec()));
        let mut transcript = longform::run(
            self,
            Box::new(source),
            Some(speech.len()),
            &inner,
            &mut report,
        )?;
        if restore {
            for seg in &mut transcript.segments {
                map.restore_segment(seg);
            }
        }
        transcript.duration = duration;
        Ok(transcript)
    }
}

/// Loads a Whisper checkpoint as a [`crate::Model`]. Alignment heads come from the config, or
/// from `generation_config.json` where transformers keeps them, else all heads of the last half
/// of the decoder layers.
pub(crate) fn load_model(
    path: &std::path::Path,
    file: &ModelFile,
    dispatcher: Arc<Dispatcher>,
    t0: std::time::Instant,
) -> Result<crate::Model> {
    let mut model = WhisperModel::load(file, dispatcher.clone())?;
    if model.config().alignment_heads.is_empty() {
        if let ModelFile::HuggingFace(h) = file {
            if let Some(heads) = h
                .generation_config
                .as_ref()
                .and_then(|g| g.get("alignment_heads"))
                .and_then(serde_json::Value::as_array)
            {
                let pairs: Vec<(usize, usize)> = heads
                    .iter()
                    .filter_map(|p| {
                        let p = p.as_array()?;
                        Some((p.first()?.as_u64()? as usize, p.get(1)?.as_u64()? as usize))
                    })
                    .collect();
                model.set_alignment_heads(pairs)?;
            }
        }
    }
    if model.config().alignment_heads.is_empty() {
        // What CTranslate2 uses for a model without them (a whisper.cpp file, a directory
        // without generation_config.json): every head of the last half of the decoder layers.
        let c = model.config();
        let heads = (c.decoder_layers / 2..c.decoder_layers)
            .flat_map(|l| (0..c.decoder_heads).map(move |h| (l, h)))
            .collect();
        model.set_alignment_heads(heads)?;
    }
    let tokenizer = Tokenizer::from_model_file(file)?;
    let config = model_config(model.config(), file);
    let transcriber = Transcriber::from_parts(model, tokenizer.clone())?;
    transcriber.warm_up()?;
    Ok(crate::Model::from_parts(
        path,
        config,
        crate::model::Net::Speech(Box::new(transcriber)),
        tokenizer,
        None,
        t0,
        dispatcher,
    ))
}

/// The normalized config `cyb-llm inspect` and the server show for a Whisper model.
fn model_config(c: &cyb_models::WhisperConfig, file: &ModelFile) -> cyb_format::ModelConfig {
    let meta: std::collections::BTreeMap<String, serde_json::Value> =
        file.metadata().into_iter().collect();
    let architectures = meta
        .get("architectures")
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    cyb_format::ModelConfig {
        source: file.format_name().into(),
        architecture: "whisper".into(),
        architectures,
        vocab_size: c.vocab_size,
        hidden_size: c.d_model,
        intermediate_size: Some(c.decoder_ffn_dim),
        num_layers: c.decoder_layers,
        num_heads: c.decoder_heads,
        num_kv_heads: c.decoder_heads,
        head_dim: c.d_model / c.decoder_heads,
        rope_dim: None,
        max_position: Some(c.max_target_positions),
        context_length: Some(c.max_target_positions),
        rope_theta: 0.0,
        rope_scaling: None,
        norm_eps: Some(f64::from(cyb_models::WhisperConfig::LAYER_NORM_EPS)),
        tie_word_embeddings: true,
        sliding_window: None,
        num_experts: None,
        num_experts_per_token: None,
        bos_token_id: None,
        eos_token_ids: Vec::new(),
        pad_token_id: None,
        extra: meta,
    }
}

//! What a transcription may be asked to do, with faster-whisper's defaults.

use super::VadOptions;
use cyb_tensor::{Error, Result};

/// Transcribe in the spoken language, or translate into English.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Task {
    #[default]
    Transcribe,
    Translate,
}

impl Task {
    pub fn name(self) -> &'static str {
        match self {
            Task::Transcribe => "transcribe",
            Task::Translate => "translate",
        }
    }
}

/// Options of one transcription. `Default` gives faster-whisper's `transcribe()` defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct TranscribeOptions {
    /// Language code (`"en"`, `"de"`, …); `None` detects it from the first 30 s (multilingual
    /// models; English-only models always transcribe English).
    pub language: Option<String>,
    pub task: Task,
    /// Hypotheses kept by the beam search at temperature 0 (1 = greedy).
    pub beam_size: usize,
    /// Candidates sampled at temperatures above 0, the most likely kept.
    pub best_of: usize,
    /// The beam search stops after `beam_size · patience` finished hypotheses.
    pub patience: f32,
    /// Hypotheses are ranked by `sum logprob / length^length_penalty`.
    pub length_penalty: f32,
    /// Divides positive logits (multiplies negative ones) of tokens already generated.
    pub repetition_penalty: f32,
    /// Forbids repeating any n-gram of this size (0 = off).
    pub no_repeat_ngram_size: usize,
    /// Tried in order until a result passes the thresholds below.
    pub temperatures: Vec<f32>,
    /// Retry at the next temperature when the text's gzip compression ratio is above this.
    pub compression_ratio_threshold: Option<f64>,
    /// Retry when the average log probability of the tokens is below this.
    pub log_prob_threshold: Option<f64>,
    /// A window is silence when `<|nospeech|>`'s probability is above this and the average
    /// log probability is below `log_prob_threshold`.
    pub no_speech_threshold: Option<f64>,
    /// Prompt each window with the text of the previous ones.
    pub condition_on_previous_text: bool,
    /// Forget the previous text after a window decoded at or above this temperature.
    pub prompt_reset_on_temperature: f32,
    /// Text to prompt the first window with (spelling, names, style).
    pub initial_prompt: Option<String>,
    /// Text the first window's transcript must start with.
    pub prefix: Option<String>,
    /// Forbid a blank or end of text as the first token.
    pub suppress_blank: bool,
    /// Token ids never produced; `-1` stands for the model's list of non-speech symbols.
    pub suppress_tokens: Vec<i64>,
    /// Decode text only, one segment per window.
    pub without_timestamps: bool,
    /// The first timestamp of a window is at most this many seconds.
    pub max_initial_timestamp: f64,
    /// Time each word (cross-attention alignment).
    pub word_timestamps: bool,
    /// Punctuation merged into the next word (word timestamps).
    pub prepend_punctuations: String,
    /// Punctuation merged into the previous word (word timestamps).
    pub append_punctuations: String,
    /// Seed of the sampler used at temperatures above 0.
    pub seed: u64,
    /// Cut silence out with Silero VAD before decoding (faster-whisper's `vad_filter`); times
    /// stay those of the original audio. `None` (the default here, as in faster-whisper's
    /// `WhisperModel.transcribe`): decode everything.
    pub vad: Option<VadOptions>,
}

impl Default for TranscribeOptions {
    fn default() -> TranscribeOptions {
        TranscribeOptions {
            language: None,
            task: Task::Transcribe,
            beam_size: 5,
            best_of: 5,
            patience: 1.0,
            length_penalty: 1.0,
            repetition_penalty: 1.0,
            no_repeat_ngram_size: 0,
            temperatures: vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
            compression_ratio_threshold: Some(2.4),
            log_prob_threshold: Some(-1.0),
            no_speech_threshold: Some(0.6),
            condition_on_previous_text: true,
            prompt_reset_on_temperature: 0.5,
            initial_prompt: None,
            prefix: None,
            suppress_blank: true,
            suppress_tokens: vec![-1],
            without_timestamps: false,
            max_initial_timestamp: 1.0,
            word_timestamps: false,
            prepend_punctuations: "\"'“¿([{-".into(),
            append_punctuations: "\"'.。,，!！?？:：”)]}、".into(),
            seed: 0,
            vad: None,
        }
    }
}

impl TranscribeOptions {
    /// Rejects values no decoder can run with, naming the option.
    pub fn validate(&self) -> Result<()> {
        let bad = |op: &str, reason: String| {
            Err(Error::InvalidArgument {
                op: op.into(),
                reason,
            })
        };
        if !(1..=64).contains(&self.beam_size) {
            return bad("beam_size", format!("{} is not in 1..=64", self.beam_size));
        }
        if !(1..=64).contains(&self.best_of) {
            return bad("best_of", format!("{} is not in 1..=64", self.best_of));
        }
        if !(self.patience.is_finite() && self.patience > 0.0) {
            return bad(
                "patience",
                format!("{} is not a positive number", self.patience),
            );
        }
        if !self.length_penalty.is_finite()
            || !self.repetition_penalty.is_finite()
            || self.repetition_penalty <= 0.0
        {
            return bad(
                "length_penalty / repetition_penalty",
                "must be finite (the repetition penalty positive)".into(),
            );
        }
        if self.temperatures.is_empty()
            || self
                .temperatures
                .iter()
                .any(|t| !t.is_finite() || !(0.0..=2.0).contains(t))
        {
            return bad(
                "temperature",
                format!(
                    "{:?} must be one or more values in [0, 2]",
                    self.temperatures
                ),
            );
        }
        if let Some(v) = &self.vad {
            v.validate()?;
        }
        if !(self.max_initial_timestamp.is_finite() && self.max_initial_timestamp >= 0.0) {
            return bad(
                "max_initial_timestamp",
                format!(
                    "{} is not a non-negative number",
                    self.max_initial_timestamp
                ),
            );
        }
        Ok(())
    }
}

//! From speech probabilities to speech spans, and back from the speech-only timeline to the
//! original one: faster-whisper's `get_speech_timestamps`, `collect_chunks` and
//! `SpeechTimestampsMap` (faster_whisper/vad.py, 1.2.1), line for line, so the same
//! probabilities give the same sample indices and times.

use super::vad::{VAD_SAMPLE_RATE, VAD_WINDOW};
use super::{Segment, Word};
use cyb_tensor::{Error, Result};
use std::ops::Range;

/// How probabilities become speech spans, with faster-whisper's `VadOptions` defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct VadOptions {
    /// A chunk whose probability is at or above this is speech.
    pub threshold: f64,
    /// Below this a chunk is silence; in between, it keeps the current state. `None`:
    /// `max(threshold - 0.15, 0.01)`.
    pub neg_threshold: Option<f64>,
    /// Speech spans this short or shorter are dropped.
    pub min_speech_duration_ms: u32,
    /// Longer speech is split at the last silence of more than 98 ms (or cut hard when there
    /// is none).
    pub max_speech_duration_s: f64,
    /// Silence this long ends a speech span.
    pub min_silence_duration_ms: u32,
    /// Added to each side of a span (halved between spans closer than twice this).
    pub speech_pad_ms: u32,
}

impl Default for VadOptions {
    fn default() -> VadOptions {
        VadOptions {
            threshold: 0.5,
            neg_threshold: None,
            min_speech_duration_ms: 0,
            max_speech_duration_s: f64::INFINITY,
            min_silence_duration_ms: 2000,
            speech_pad_ms: 400,
        }
    }
}

impl VadOptions {
    /// Rejects values no detector can use, naming the option.
    pub fn validate(&self) -> Result<()> {
        let prob = |name: &str, p: f64| {
            if (0.0..=1.0).contains(&p) {
                Ok(())
            } else {
                Err(Error::invalid(
                    name,
                    format!("{p} is not a probability in [0, 1]"),
                ))
            }
        };
        prob("vad threshold", self.threshold)?;
        if let Some(n) = self.neg_threshold {
            prob("vad neg_threshold", n)?;
        }
        if self.max_speech_duration_s.is_nan() || self.max_speech_duration_s <= 0.0 {
            return Err(Error::invalid(
                "vad max_speech_duration_s",
                format!("{} is not a positive duration", self.max_speech_duration_s),
            ));
        }
        Ok(())
    }
}

/// Speech spans `start..end` (samples) of audio `len` samples long from one probability per
/// [`VAD_WINDOW`] samples, as faster-whisper's `get_speech_timestamps` computes them.
pub fn speech_timestamps_from_probs(
    probs: &[f32],
    len: usize,
    opts: &VadOptions,
) -> Vec<Range<usize>> {
    let sr = VAD_SAMPLE_RATE as f64;
    let window = VAD_WINDOW;
    let min_speech_samples = sr * f64::from(opts.min_speech_duration_ms) / 1000.0;
    let speech_pad_samples = sr * f64::from(opts.speech_pad_ms) / 1000.0;
    let max_speech_samples =
        sr * opts.max_speech_duration_s - window as f64 - 2.0 * speech_pad_samples;
    let min_silence_samples = sr * f64::from(opts.min_silence_duration_ms) / 1000.0;
    let min_silence_samples_at_max_speech = sr * 98.0 / 1000.0;
    // numpy compares the float32 probabilities with the thresholds made float32.
    let threshold = opts.threshold as f32;
    let neg_threshold = opts
        .neg_threshold
        .unwrap_or_else(|| (opts.threshold - 0.15).max(0.01)) as f32;

    let mut triggered = false;
    let mut speeches: Vec<Range<usize>> = Vec::new();
    // The open span's start (Python's `current_speech` dict, empty as `None`).
    let mut current: Option<usize> = None;
    // 0 stands for "none" in these three, as in Python.
    let mut temp_end = 0usize;
    let mut prev_end = 0usize;
    let mut next_start = 0usize;

    for (i, &p) in probs.iter().enumerate() {
        let at = window * i;
        if p >= threshold && temp_end != 0 {
            temp_end = 0;
            if next_start < prev_end {
                next_start = at;
            }
        }
        if p >= threshold && !triggered {
            triggered = true;
            current = Some(at);
            continue;
        }
        if triggered {
            let start = current.unwrap_or(0);
            if at as f64 - start as f64 > max_speech_samples {
                if prev_end != 0 {
                    speeches.push(start..prev_end);
                    current = None;
                    // Silence had been reached and speech has not come back.
                    if next_start < prev_end {
                        triggered = false;
                    } else {
                        current = Some(next_start);
                    }
                    prev_end = 0;
                    next_start = 0;
                    temp_end = 0;
                } else {
                    speeches.push(start..at);
                    current = None;
                    prev_end = 0;
                    next_start = 0;
                    temp_end = 0;
                    triggered = false;
                    continue;
                }
            }
        }
        if p < neg_threshold && triggered {
            if temp_end == 0 {
                temp_end = at;
            }
            // Short silences are no place to cut a long span.
            if (at - temp_end) as f64 > min_silence_samples_at_max_speech {
                prev_end = temp_end;
            }
            if ((at - temp_end) as f64) < min_silence_samples {
                continue;
            }
            let start = current.unwrap_or(0);
            if (temp_end as f64 - start as f64) > min_speech_samples {
                speeches.push(start..temp_end);
            }
            current = None;
            prev_end = 0;
            next_start = 0;
            temp_end = 0;
            triggered = false;
            continue;
        }
    }
    if let Some(start) = current {
        if (len as f64 - start as f64) > min_speech_samples {
            speeches.push(start..len);
        }
    }

    let pad = speech_pad_samples;
    let n = speeches.len();
    for i in 0..n {
        if i == 0 {
            speeches[0].start = (speeches[0].start as f64 - pad).max(0.0) as usize;
        }
        if i + 1 < n {
            let silence = speeches[i + 1].start as i64 - speeches[i].end as i64;
            if (silence as f64) < 2.0 * pad {
                speeches[i].end = (speeches[i].end as i64 + silence.div_euclid(2)) as usize;
                speeches[i + 1].start =
                    (speeches[i + 1].start as i64 - silence.div_euclid(2)).max(0) as usize;
            } else {
                speeches[i].end = (speeches[i].end as f64 + pad).min(len as f64) as usize;
                speeches[i + 1].start = (speeches[i + 1].start as f64 - pad).max(0.0) as usize;
            }
        } else {
            speeches[i].end = (speeches[i].end as f64 + pad).min(len as f64) as usize;
        }
    }
    speeches
}

/// The speech of `samples` in `spans`, concatenated (faster-whisper's `collect_chunks` with no
/// length limit, as `transcribe` calls it); no spans give no audio.
pub fn collect_chunks(samples: &[f32], spans: &[Range<usize>]) -> Vec<f32> {
    let mut out = Vec::with_capacity(spans.iter().map(|s| s.len()).sum());
    for s in spans {
        let end = s.end.min(samples.len());
        let start = s.start.min(end);
        out.extend_from_slice(&samples[start..end]);
    }
    out
}

/// Maps times of the concatenated speech back to the original audio (faster-whisper's
/// `SpeechTimestampsMap`, 2 decimals).
#[derive(Clone, Debug, PartialEq)]
pub struct SpeechTimestampsMap {
    /// Where each span ends in the concatenated speech, in samples.
    chunk_end_sample: Vec<usize>,
    /// Seconds of silence removed before each span.
    total_silence_before: Vec<f64>,
}

impl SpeechTimestampsMap {
    pub fn new(spans: &[Range<usize>]) -> SpeechTimestampsMap {
        let mut chunk_end_sample = Vec::with_capacity(spans.len());
        let mut total_silence_before = Vec::with_capacity(spans.len());
        let mut previous_end = 0i64;
        let mut silent = 0i64;
        for s in spans {
            silent += s.start as i64 - previous_end;
            previous_end = s.end as i64;
            chunk_end_sample.push((s.end as i64 - silent).max(0) as usize);
            total_silence_before.push(silent as f64 / VAD_SAMPLE_RATE as f64);
        }
        SpeechTimestampsMap {
            chunk_end_sample,
            total_silence_before,
        }
    }

    /// The original time of `time` (seconds of the concatenated speech), rounded to 2
    /// decimals; `chunk` picks the span, else it is the one `time` falls in.
    pub fn original_time(&self, time: f64, chunk: Option<usize>, is_end: bool) -> f64 {
        let chunk = chunk.unwrap_or_else(|| self.chunk_index(time, is_end));
        let before = self.total_silence_before.get(chunk).copied().unwrap_or(0.0);
        round_decimals(before + time, 2)
    }

    /// The span `time` falls in: the first whose end is after it (an end time exactly at a
    /// span's end stays in that span), the last span for times past the end.
    pub fn chunk_index(&self, time: f64, is_end: bool) -> usize {
        // Python's int() truncates toward zero.
        let sample = (time * VAD_SAMPLE_RATE as f64) as i64;
        if is_end {
            if let Some(i) = self
                .chunk_end_sample
                .iter()
                .position(|&e| e as i64 == sample)
            {
                return i;
            }
        }
        let after = self
            .chunk_end_sample
            .partition_point(|&e| e as i64 <= sample);
        after.min(self.chunk_end_sample.len().saturating_sub(1))
    }

    /// A segment's times (and its words') on the original timeline, as faster-whisper's
    /// `restore_speech_timestamps` does: each word's start and end are mapped through the span
    /// its middle falls in, and a segment with words spans its first to its last word.
    pub fn restore_segment(&self, seg: &mut Segment) {
        let start = round_decimals(seg.start, 3);
        let end = round_decimals(seg.end, 3);
        match seg.words.as_mut().filter(|w| !w.is_empty()) {
            Some(words) => {
                for w in words.iter_mut() {
                    self.restore_word(w);
                }
                if let (Some(first), Some(last)) = (words.first(), words.last()) {
                    seg.start = first.start;
                    seg.end = last.end;
                }
            }
            None => {
                seg.start = self.original_time(start, None, false);
                seg.end = self.original_time(end, None, true);
            }
        }
    }

    fn restore_word(&self, w: &mut Word) {
        let middle = (w.start + w.end) / 2.0;
        let chunk = self.chunk_index(middle, false);
        w.start = self.original_time(w.start, Some(chunk), false);
        w.end = self.original_time(w.end, Some(chunk), false);
    }
}

/// Python's `round(x, digits)`: the nearest number of `digits` decimals, ties to even on the
/// exact binary value (Rust's fixed-precision formatting rounds the same way).
pub(crate) fn round_decimals(x: f64, digits: usize) -> f64 {
    if !x.is_finite() {
        return x;
    }
    format!("{x:.digits$}").parse().unwrap_or(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probs(pattern: &[(f32, usize)]) -> Vec<f32> {
        pattern
            .iter()
            .flat_map(|&(p, n)| std::iter::repeat_n(p, n))
            .collect()
    }

    #[test]
    fn one_utterance_is_padded_on_both_sides() {
        // 1 s of silence, 1 s of speech, 2.6 s of silence (32 ms chunks): 2 s of it end the
        // speech where the silence began.
        let p = probs(&[(0.01, 31), (0.9, 31), (0.01, 80)]);
        let len = p.len() * VAD_WINDOW - 100;
        let spans = speech_timestamps_from_probs(&p, len, &VadOptions::default());
        assert_eq!(spans, vec![31 * 512 - 6400..62 * 512 + 6400]);
        // Less than 2 s of silence after it: the speech runs to the end of the audio.
        let p = probs(&[(0.01, 31), (0.9, 31), (0.01, 62)]);
        let len = p.len() * VAD_WINDOW - 100;
        let spans = speech_timestamps_from_probs(&p, len, &VadOptions::default());
        assert_eq!(spans, vec![31 * 512 - 6400..len]);
    }

    #[test]
    fn short_silences_do_not_split_and_close_spans_share_the_gap() {
        let p = probs(&[(0.9, 10), (0.01, 20), (0.9, 10), (0.01, 100)]);
        let len = p.len() * VAD_WINDOW;
        let spans = speech_timestamps_from_probs(&p, len, &VadOptions::default());
        assert_eq!(spans, vec![0..40 * 512 + 6400]);
        let opts = VadOptions {
            min_silence_duration_ms: 300,
            ..VadOptions::default()
        };
        let spans = speech_timestamps_from_probs(&p, len, &opts);
        // 300 ms of silence end the first span at chunk 10; the 20-chunk gap (10240 samples) is
        // under two pads (12800), so each side takes half of it.
        assert_eq!(spans, vec![0..20 * 512, 20 * 512..40 * 512 + 6400]);
    }

    #[test]
    fn speech_running_to_the_end_ends_with_the_audio() {
        let p = probs(&[(0.01, 5), (0.8, 20)]);
        let len = 24 * VAD_WINDOW + 7;
        let spans = speech_timestamps_from_probs(&p, len, &VadOptions::default());
        assert_eq!(spans, vec![0..len]);
        assert!(speech_timestamps_from_probs(
            &probs(&[(0.2, 50)]),
            50 * 512,
            &VadOptions::default()
        )
        .is_empty());
    }

    #[test]
    fn the_map_restores_times_across_removed_silence() {
        let spans = vec![16_000..48_000, 80_000..96_000];
        let map = SpeechTimestampsMap::new(&spans);
        // Speech time 0.5 s is 1.5 s originally; 2.5 s is in the second span: 2.5 + 3.0.
        assert_eq!(map.original_time(0.5, None, false), 1.5);
        assert_eq!(map.original_time(2.5, None, false), 5.5);
        // The end of the first span stays in it when it is an end time.
        assert_eq!(map.original_time(2.0, None, true), 3.0);
        assert_eq!(map.original_time(2.0, None, false), 5.0);
        assert_eq!(map.original_time(9.0, None, false), 12.0);
        assert_eq!(collect_chunks(&[1.0; 100_000], &spans).len(), 48_000);
    }

    #[test]
    fn rounding_follows_python() {
        assert_eq!(round_decimals(0.125, 2), 0.12);
        assert_eq!(round_decimals(2.675, 2), 2.67);
        assert_eq!(round_decimals(12.345, 2), 12.35);
        assert_eq!(round_decimals(1.0000000001, 3), 1.0);
    }

    #[test]
    fn bad_options_are_refused() {
        let bad = VadOptions {
            threshold: 1.5,
            ..VadOptions::default()
        };
        assert!(bad.validate().is_err());
        let bad = VadOptions {
            max_speech_duration_s: 0.0,
            ..VadOptions::default()
        };
        assert!(bad.validate().is_err());
        assert!(VadOptions::default().validate().is_ok());
    }
}

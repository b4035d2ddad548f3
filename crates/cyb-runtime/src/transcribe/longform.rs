//! Long-form transcription as faster-whisper does it: 30 s windows of the log-mel features,
//! each decoded with the previous text as its prompt (with temperature fallback), cut into
//! segments at its timestamp pairs, and followed by a window that starts where its last
//! complete segment ended.
//!
//! Features come in blocks: the audio from the current window's start on, up to
//! [`BLOCK_SAMPLES`], is turned into log-mel at once (with the feature extractor's whole-input
//! normalization), so audio of any length is transcribed in bounded memory; input shorter than
//! a block gets exactly the features of the whole input.

use super::filters::LogitRules;
use super::output::TranscribeStats;
use super::search::{Decoded, Rng, Search, Strategy};
use super::tokens::TIME_PRECISION;
use super::words::{add_word_timestamps, Piece};
use super::{
    Progress, Segment, Task, TranscribeOptions, Transcriber, Transcript, HOP, INPUT_STRIDE,
};
use cyb_tensor::{Error, Result};

/// Audio turned into features at once: 20 minutes.
pub(super) const BLOCK_SAMPLES: usize = 20 * 60 * 16_000;
/// Padding appended to the audio before the features (one hop), as faster-whisper does.
const TAIL_PADDING: usize = HOP;

/// The log-mel of one block of audio.
struct Block {
    /// Global frame index of its first frame.
    start: usize,
    /// `[n_mels, frames]`.
    mel: Vec<f32>,
    frames: usize,
    /// Whether the block reaches the end of the audio.
    last: bool,
}

/// Audio still to be featurized, from global sample `start` on.
struct Pending<'a> {
    source: Box<dyn Iterator<Item = Result<Vec<f32>>> + 'a>,
    samples: Vec<f32>,
    start: usize,
    ended: bool,
}

impl Pending<'_> {
    /// Drops the samples before global sample `from`, then reads until a block is full or the
    /// audio ends.
    fn fill(&mut self, from: usize) -> Result<()> {
        let drop = from.saturating_sub(self.start).min(self.samples.len());
        self.samples.drain(..drop);
        self.start += drop;
        while !self.ended && self.samples.len() < BLOCK_SAMPLES {
            match self.source.next() {
                Some(chunk) => self.samples.extend(chunk?),
                None => self.ended = true,
            }
        }
        Ok(())
    }
}

pub(super) fn run(
    tr: &Transcriber,
    source: Box<dyn Iterator<Item = Result<Vec<f32>>> + '_>,
    total_samples: Option<usize>,
    opts: &TranscribeOptions,
    on_segment: &mut dyn FnMut(&Segment, Progress) -> bool,
) -> Result<Transcript> {
    let c = tr.model.config();
    let window = c.window_frames();
    let n_mels = c.num_mel_bins;
    let special = &tr.special;
    let language = match (&opts.language, special.multilingual) {
        (Some(l), true) => {
            special.language(l)?;
            l.to_ascii_lowercase()
        }
        (Some(l), false) if l.eq_ignore_ascii_case("en") => "en".to_string(),
        (Some(l), false) => {
            return Err(special
                .language(l)
                .err()
                .unwrap_or_else(|| Error::invalid("language", l.clone())))
        }
        (None, _) => "en".to_string(),
    };
    if opts.task == Task::Translate && !special.multilingual {
        return Err(Error::InvalidArgument {
            op: "task".into(),
            reason: "translate needs a multilingual model; this one is English-only".into(),
        });
    }
    let mut detected: Option<(String, f64)> = None;
    let suppress = suppressed(tr, &opts.suppress_tokens)?;
    let rules = LogitRules {
        special,
        suppress: &suppress,
        suppress_begin: &tr.suppress_begin,
        suppress_blank: opts.suppress_blank,
        timestamps: !opts.without_timestamps,
        max_initial_timestamp_index: Some(
            (opts.max_initial_timestamp / TIME_PRECISION).round() as u32
        ),
        repetition_penalty: opts.repetition_penalty,
        no_repeat_ngram_size: opts.no_repeat_ngram_size,
    };
    let max_length = c.max_target_positions;
    let mut all_tokens: Vec<u32> = Vec::new();
    if let Some(p) = &opts.initial_prompt {
        all_tokens.extend(tr.tokenizer.encode(&format!(" {}", p.trim()), false)?);
    }
    let mut prompt_reset_since = 0;
    let mut pending = Pending {
        source,
        samples: Vec::new(),
        start: 0,
        ended: false,
    };
    let mut block: Option<Block> = None;
    let mut seek = 0usize;
    let mut segments: Vec<Segment> = Vec::new();
    let mut rng = Rng::new(opts.seed);
    let mut total_frames_seen = 0usize;
    let mut last_speech = 0.0f64;
    let mut stats = TranscribeStats::default();
    let tokens_run = std::cell::Cell::new(0usize);
    let spare = std::cell::RefCell::new(Vec::new());
    'windows: loop {
        let stale = match &block {
            None => true,
            Some(b) => !b.last && seek + window > b.start + b.frames,
        };
        if stale {
            pending.fill(seek * HOP)?;
            let mut audio = pending.samples.clone();
            let last = pending.ended;
            if last {
                audio.extend(std::iter::repeat_n(0.0, TAIL_PADDING));
            }
            let mel = tr.mel.compute(&audio);
            let frames = mel.len() / n_mels.max(1);
            block = Some(Block {
                start: pending.start / HOP,
                mel,
                frames,
                last,
            });
        }
        let Some(b) = &block else { break };
        // faster-whisper leaves the padding frame out of the content.
        let content_end = b.start + b.frames.saturating_sub(usize::from(b.last));
        total_frames_seen = total_frames_seen.max(content_end);
        if seek >= content_end {
            if b.last {
                break;
            }
            continue;
        }
        let segment_size = window.min(content_end - seek);
        let mut mel = vec![0f32; n_mels * window];
        let off = seek - b.start;
        for m in 0..n_mels {
            let src = &b.mel[m * b.frames + off..][..segment_size];
            mel[m * window..][..segment_size].copy_from_slice(src);
        }
        let time_offset = seek as f64 * 0.01;
        let segment_duration = segment_size as f64 * 0.01;
        let t0 = std::time::Instant::now();
        let audio = tr.model.encode(&mel)?;
        stats.encode_seconds += t0.elapsed().as_secs_f64();
        stats.windows += 1;
        if detected.is_none() && opts.language.is_none() && special.multilingual {
            detected = Some(detect_language(tr, &audio)?);
        }
        let lang = detected
            .as_ref()
            .map_or(language.as_str(), |(l, _)| l.as_str());
        let prompt = prompt_for(
            tr,
            &all_tokens[prompt_reset_since..],
            lang,
            opts,
            seek == 0,
            max_length,
        )?;
        let t0 = std::time::Instant::now();
        let (decoded, avg_logprob, temperature, compression_ratio) = decode_with_fallback(
            tr,
            &audio,
            &prompt,
            &rules,
            opts,
            max_length,
            &mut rng,
            (&tokens_run, &spare),
        )?;
        stats.decode_seconds += t0.elapsed().as_secs_f64();
        if let Some(threshold) = opts.no_speech_threshold {
            let silent = decoded.no_speech_prob > threshold
                && !opts.log_prob_threshold.is_some_and(|lp| avg_logprob > lp);
            if silent {
                seek += segment_size;
                continue;
            }
        }
        let tokens = &decoded.tokens;
        let is_ts = |t: &u32| special.is_timestamp(*t);
        let ts_pos = |t: u32| (t - special.timestamp_begin) as usize;
        let single_timestamp_ending = tokens.len() >= 2
            && !is_ts(&tokens[tokens.len() - 2])
            && is_ts(&tokens[tokens.len() - 1]);
        let consecutive: Vec<usize> = (1..tokens.len())
            .filter(|&i| is_ts(&tokens[i]) && is_ts(&tokens[i - 1]))
            .collect();
        let mut pieces: Vec<(f64, f64, Vec<u32>)> = Vec::new();
        let window_seek = seek;
        if !consecutive.is_empty() {
            let mut slices = consecutive.clone();
            if single_timestamp_ending {
                slices.push(tokens.len());
            }
            let mut last_slice = 0;
            for &cur in &slices {
                let sliced = &tokens[last_slice..cur];
                if let (Some(&first), Some(&lastt)) = (sliced.first(), sliced.last()) {
                    let start = time_offset + ts_pos(first) as f64 * TIME_PRECISION;
                    let end = time_offset + ts_pos(lastt) as f64 * TIME_PRECISION;
                    pieces.push((start, end, sliced.to_vec()));
                }
                last_slice = cur;
            }
            if single_timestamp_ending {
                seek += segment_size;
            } else {
                let last_ts = ts_pos(tokens[last_slice - 1]);
                seek += last_ts * INPUT_STRIDE;
            }
        } else {
            let mut duration = segment_duration;
            if let Some(&last) = tokens.iter().rev().find(|t| is_ts(t)) {
                if last != special.timestamp_begin {
                    duration = ts_pos(last) as f64 * TIME_PRECISION;
                }
            }
            pieces.push((time_offset, time_offset + duration, tokens.clone()));
            seek += segment_size;
        }
        let mut pieces: Vec<Piece> = pieces
            .into_iter()
            .map(|(start, end, tokens)| Piece {
                start,
                end,
                tokens,
                words: Vec::new(),
            })
            .collect();
        if opts.word_timestamps {
            let sot_sequence = sot_sequence(tr, lang, opts)?;
            last_speech = add_word_timestamps(
                tr,
                &audio,
                &sot_sequence,
                &mut pieces,
                window_seek,
                segment_size,
                &opts.prepend_punctuations,
                &opts.append_punctuations,
                last_speech,
            )?;
            if !single_timestamp_ending {
                let last_end = pieces
                    .iter()
                    .rev()
                    .find_map(|p| p.words.last().map(|w| w.end))
                    .or_else(|| pieces.last().map(|p| p.end));
                if let Some(end) = last_end.filter(|&e| e > time_offset) {
                    seek = (end * super::FRAMES_PER_SECOND as f64).round() as usize;
                }
            }
        }
        for piece in pieces {
            let Piece {
                start,
                end,
                tokens: toks,
                words,
            } = piece;
            let text = decode_text(tr, &toks)?;
            if start == end || text.trim().is_empty() {
                continue;
            }
            all_tokens.extend_from_slice(&toks);
            let seg = Segment {
                id: segments.len() + 1,
                seek: window_seek,
                start,
                end,
                text,
                tokens: toks,
                temperature,
                avg_logprob,
                compression_ratio,
                no_speech_prob: decoded.no_speech_prob,
                words: opts.word_timestamps.then_some(words),
            };
            let progress = Progress {
                done: (seek as f64 / super::FRAMES_PER_SECOND as f64),
                total: total_samples.map(|n| n as f64 / 16_000.0),
            };
            let go_on = on_segment(&seg, progress);
            segments.push(seg);
            if !go_on {
                break 'windows;
            }
        }
        if !opts.condition_on_previous_text || temperature > opts.prompt_reset_on_temperature {
            prompt_reset_since = all_tokens.len();
        }
    }
    let text: String = segments.iter().map(|s| s.text.as_str()).collect();
    let (language, language_probability) = detected.unwrap_or((language, 1.0));
    Ok(Transcript {
        task: opts.task.name().into(),
        language,
        language_probability,
        duration: total_samples.map_or(
            total_frames_seen as f64 / super::FRAMES_PER_SECOND as f64,
            |n| n as f64 / 16_000.0,
        ),
        text,
        segments,
        stats: TranscribeStats {
            decoded_tokens: tokens_run.get(),
            ..stats
        },
    })
}

/// The text of `tokens` (timestamps and special tokens left out).
pub(super) fn decode_text(tr: &Transcriber, tokens: &[u32]) -> Result<String> {
    let text: Vec<u32> = tokens
        .iter()
        .copied()
        .filter(|&t| t < tr.special.eot)
        .collect();
    tr.tokenizer.decode(&text, false)
}

/// The suppressed ids: `-1` expands to the non-speech symbols; the task, start and
/// no-speech tokens are always added.
fn suppressed(tr: &Transcriber, list: &[i64]) -> Result<Vec<u32>> {
    let vocab = tr.model.config().vocab_size;
    let mut out = Vec::new();
    for &id in list {
        if id == -1 {
            out.extend_from_slice(&tr.non_speech);
        } else if id >= 0 && (id as usize) < vocab {
            out.push(id as u32);
        } else {
            return Err(Error::InvalidArgument {
                op: "suppress_tokens".into(),
                reason: format!("{id} is not -1 nor a token id below {vocab}"),
            });
        }
    }
    let s = &tr.special;
    out.extend(
        [
            Some(s.sot),
            Some(s.sot_prev),
            s.sot_lm,
            s.transcribe,
            s.translate,
            s.no_speech,
        ]
        .into_iter()
        .flatten(),
    );
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// `[<|startofprev|> previous…] <|startoftranscript|> [language task] [<|notimestamps|>]
/// [<|0.00|> prefix…]`.
fn prompt_for(
    tr: &Transcriber,
    previous: &[u32],
    language: &str,
    opts: &TranscribeOptions,
    first: bool,
    max_length: usize,
) -> Result<Vec<u32>> {
    let s = &tr.special;
    let mut prompt = Vec::new();
    if !previous.is_empty() {
        prompt.push(s.sot_prev);
        let keep = (max_length / 2).saturating_sub(1);
        prompt.extend_from_slice(&previous[previous.len().saturating_sub(keep)..]);
    }
    prompt.extend(sot_sequence(tr, language, opts)?);
    if opts.without_timestamps {
        prompt.push(s.no_timestamps);
    }
    if let Some(prefix) = opts.prefix.as_ref().filter(|_| first) {
        let mut ids = tr.tokenizer.encode(&format!(" {}", prefix.trim()), false)?;
        if ids.len() >= max_length / 2 {
            ids.truncate(max_length / 2 - 1);
        }
        if !opts.without_timestamps {
            prompt.push(s.timestamp_begin);
        }
        prompt.extend(ids);
    }
    Ok(prompt)
}

/// `<|startoftranscript|>`, then the language and task for multilingual models.
fn sot_sequence(tr: &Transcriber, language: &str, opts: &TranscribeOptions) -> Result<Vec<u32>> {
    let s = &tr.special;
    let mut seq = vec![s.sot];
    if s.multilingual {
        seq.push(s.language(language)?);
        let task = match opts.task {
            Task::Transcribe => s.transcribe,
            Task::Translate => s.translate,
        };
        seq.extend(task);
    }
    Ok(seq)
}

/// `len(text) / len(zlib(text))` of the UTF-8 bytes.
pub(super) fn compression_ratio(text: &str) -> f64 {
    use std::io::Write;
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return 0.0;
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(6));
    let compressed = z
        .write_all(bytes)
        .and_then(|()| z.finish())
        .map_or(1, |v| v.len());
    bytes.len() as f64 / compressed as f64
}

/// Decodes at each temperature in turn until the result passes the thresholds; returns it with
/// its average log probability, temperature and compression ratio.
#[allow(clippy::too_many_arguments)]
fn decode_with_fallback(
    tr: &Transcriber,
    audio: &cyb_models::EncodedAudio,
    prompt: &[u32],
    rules: &LogitRules<'_>,
    opts: &TranscribeOptions,
    max_length: usize,
    rng: &mut Rng,
    (tokens_run, spare): (
        &std::cell::Cell<usize>,
        &std::cell::RefCell<Vec<cyb_models::KvCache>>,
    ),
) -> Result<(Decoded, f64, f32, f64)> {
    let special = &tr.special;
    let search = Search {
        model: &tr.model,
        audio,
        rules,
        eot: special.eot,
        no_speech: special.no_speech,
        sot: special.sot,
        no_timestamps: special.no_timestamps,
        max_positions: max_length,
        tokens_run,
        spare,
    };
    let mut all: Vec<(Decoded, f64, f32, f64)> = Vec::new();
    let mut below_cr: Vec<usize> = Vec::new();
    let mut last_temperature = 0.0;
    for &temperature in &opts.temperatures {
        last_temperature = temperature;
        let strategy = if temperature > 0.0 {
            Strategy::Sample {
                temperature,
                best_of: opts.best_of,
                length_penalty: opts.length_penalty,
            }
        } else {
            Strategy::Beam {
                beam_size: opts.beam_size,
                patience: opts.patience,
                length_penalty: opts.length_penalty,
            }
        };
        let d = search.run(prompt, strategy, rng)?;
        let n = d.tokens.len() as f64;
        let cum_logprob = f64::from(d.score) * n.powf(f64::from(opts.length_penalty));
        let avg_logprob = cum_logprob / (n + 1.0);
        let text = decode_text(tr, &d.tokens)?;
        let cr = compression_ratio(text.trim());
        let mut needs_fallback = false;
        if let Some(t) = opts.compression_ratio_threshold {
            if cr > t {
                needs_fallback = true;
            } else {
                below_cr.push(all.len());
            }
        }
        if opts.log_prob_threshold.is_some_and(|t| avg_logprob < t) {
            needs_fallback = true;
        }
        if let (Some(ns), Some(lp)) = (opts.no_speech_threshold, opts.log_prob_threshold) {
            if d.no_speech_prob > ns && avg_logprob < lp {
                needs_fallback = false;
            }
        }
        all.push((d, avg_logprob, temperature, cr));
        if !needs_fallback {
            return all
                .pop()
                .ok_or_else(|| Error::invalid("whisper", "no result"));
        }
    }
    let pool: Vec<usize> = if below_cr.is_empty() {
        (0..all.len()).collect()
    } else {
        below_cr
    };
    let best = pool
        .into_iter()
        .max_by(|&a, &b| all[a].1.total_cmp(&all[b].1))
        .ok_or_else(|| Error::invalid("whisper", "no temperature to decode at"))?;
    let mut r = all.swap_remove(best);
    r.2 = last_temperature;
    Ok(r)
}

/// The language of the window in `audio`: the likeliest language token after
/// `<|startoftranscript|>`, with its probability among the languages.
fn detect_language(tr: &Transcriber, audio: &cyb_models::EncodedAudio) -> Result<(String, f64)> {
    let s = &tr.special;
    let mut cache = tr.model.new_cache()?;
    let mut out = tr
        .model
        .decode(audio, &[&[s.sot]], std::slice::from_mut(&mut cache), &[0])?;
    let logits = out.pop().and_then(|mut r| r.pop()).unwrap_or_default();
    let langs: Vec<f32> = s
        .languages
        .iter()
        .map(|&(_, id)| {
            logits
                .get(id as usize)
                .copied()
                .unwrap_or(f32::NEG_INFINITY)
        })
        .collect();
    let lp = super::filters::log_softmax(&langs);
    let (i, p) = lp
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .ok_or_else(|| Error::invalid("language detection", "the model has no language tokens"))?;
    Ok((s.languages[i].0.to_string(), f64::from(*p).exp()))
}

//! Word timestamps as faster-whisper computes them: the window's text is run again after
//! `<|notimestamps|>`, the cross-attention of the model's alignment heads is normalized,
//! median-filtered and averaged, dynamic time warping aligns tokens to 20 ms audio frames, and
//! the token times become word times (with punctuation merged into its word and overlong first
//! and last words trimmed to the segment).

use super::output::Word;
use super::tokens::SpecialTokens;
use super::Transcriber;
use cyb_models::EncodedAudio;
use cyb_tensor::Result;

/// Encoder positions per second.
const TOKENS_PER_SECOND: f64 = 50.0;
const MEDIAN_FILTER_WIDTH: usize = 7;
const SENTENCE_END: &str = ".。!！?？";

/// One word of the alignment before it is placed in a segment.
#[derive(Clone, Debug)]
struct Timing {
    word: String,
    tokens: Vec<u32>,
    start: f64,
    end: f64,
    probability: f64,
}

/// A segment of one window being given words: its time span (moved to its words' span where
/// they disagree little) and its tokens.
pub(super) struct Piece {
    pub start: f64,
    pub end: f64,
    pub tokens: Vec<u32>,
    pub words: Vec<Word>,
}

/// Gives each of a window's `pieces` its words. `window_seek` is the window's first mel frame,
/// `num_frames` its length in frames; `last_speech` the end of the last speech so far, returned
/// updated.
#[allow(clippy::too_many_arguments)]
pub(super) fn add_word_timestamps(
    tr: &Transcriber,
    audio: &EncodedAudio,
    sot_sequence: &[u32],
    pieces: &mut [Piece],
    window_seek: usize,
    num_frames: usize,
    prepend: &str,
    append: &str,
    mut last_speech: f64,
) -> Result<f64> {
    let special = &tr.special;
    let text: Vec<u32> = pieces
        .iter()
        .flat_map(|p| p.tokens.iter().copied())
        .filter(|&t| t < special.eot)
        .collect();
    let mut alignment = find_alignment(tr, audio, sot_sequence, &text, num_frames)?;
    let mut durations: Vec<f64> = alignment
        .iter()
        .map(|w| w.end - w.start)
        .filter(|&d| d != 0.0)
        .collect();
    let median = if durations.is_empty() {
        0.0
    } else {
        durations.sort_by(f64::total_cmp);
        let n = durations.len();
        let m = if n % 2 == 1 {
            durations[n / 2]
        } else {
            (durations[n / 2 - 1] + durations[n / 2]) / 2.0
        };
        m.min(0.7)
    };
    let max_duration = median * 2.0;
    if !durations.is_empty() {
        for i in 1..alignment.len() {
            if alignment[i].end - alignment[i].start > max_duration {
                if SENTENCE_END.contains(alignment[i].word.as_str()) {
                    alignment[i].end = alignment[i].start + max_duration;
                } else if SENTENCE_END.contains(alignment[i - 1].word.as_str()) {
                    alignment[i].start = alignment[i].end - max_duration;
                }
            }
        }
    }
    merge_punctuations(&mut alignment, prepend, append);
    let time_offset = window_seek as f64 / super::FRAMES_PER_SECOND as f64;
    let round2 = |x: f64| (x * 100.0).round() / 100.0;
    let mut index = 0;
    for piece in pieces.iter_mut() {
        let text_len = piece.tokens.iter().filter(|&&t| t < special.eot).count();
        let mut saved = 0;
        let mut words: Vec<Word> = Vec::new();
        while index < alignment.len() && saved < text_len {
            let t = &alignment[index];
            if !t.word.is_empty() {
                words.push(Word {
                    start: round2(time_offset + t.start),
                    end: round2(time_offset + t.end),
                    word: t.word.clone(),
                    probability: t.probability,
                });
            }
            saved += t.tokens.len();
            index += 1;
        }
        if let Some(first) = words.first().cloned() {
            let long_first = first.end - first.start > max_duration
                || (words.len() > 1 && words[1].end - first.start > max_duration * 2.0);
            if first.end - last_speech > median * 4.0 && long_first {
                if words.len() > 1 && words[1].end - words[1].start > max_duration {
                    let boundary = (words[1].end / 2.0).max(words[1].end - max_duration);
                    words[0].end = boundary;
                    words[1].start = boundary;
                }
                words[0].start = (words[0].end - max_duration).max(0.0);
            }
            if piece.start < words[0].end && piece.start - 0.5 > words[0].start {
                words[0].start = (words[0].end - median).min(piece.start).max(0.0);
            } else {
                piece.start = words[0].start;
            }
            let last = words.len() - 1;
            if piece.end > words[last].start && piece.end + 0.5 < words[last].end {
                words[last].end = (words[last].start + median).max(piece.end);
            } else {
                piece.end = words[last].end;
            }
            last_speech = piece.end;
        }
        piece.words = words;
    }
    Ok(last_speech)
}

/// The words of `text` with their times (seconds from the window's start) and probabilities.
fn find_alignment(
    tr: &Transcriber,
    audio: &EncodedAudio,
    sot_sequence: &[u32],
    text: &[u32],
    num_frames: usize,
) -> Result<Vec<Timing>> {
    let special = &tr.special;
    let heads = &tr.model.config().alignment_heads;
    let nf = num_frames / 2;
    if text.is_empty() || heads.is_empty() || nf == 0 {
        return Ok(Vec::new());
    }
    let mut input = sot_sequence.to_vec();
    input.push(special.no_timestamps);
    input.extend_from_slice(text);
    input.push(special.eot);
    let (scores, logits) = tr.model.cross_attention_scores(audio, &input, heads)?;
    let rows = input.len();
    let src = tr.model.config().max_source_positions;
    let eot = special.eot as usize;
    let sot_len = sot_sequence.len();
    let probs: Vec<f64> = (0..text.len())
        .map(|t| {
            let row = &logits[sot_len + t];
            let text_logits = &row[..eot.min(row.len())];
            let lp = super::filters::log_softmax(text_logits);
            lp.get(text[t] as usize)
                .map_or(0.0, |&v| f64::from(v).exp())
        })
        .collect();
    // Per head: crop to the window's frames, softmax over frames, standardize over tokens,
    // median filter over frames; then the mean over heads.
    let mut mean = vec![0f32; rows * nf];
    for head in &scores {
        let mut w = vec![0f32; rows * nf];
        for r in 0..rows {
            let row = &head[r * src..][..nf];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f32 = row.iter().map(|&v| (v - max).exp()).sum();
            for (o, &v) in w[r * nf..][..nf].iter_mut().zip(row) {
                *o = (v - max).exp() / sum;
            }
        }
        for j in 0..nf {
            let (mut m, mut sq) = (0f32, 0f32);
            for r in 0..rows {
                let v = w[r * nf + j];
                m += v;
                sq += v * v;
            }
            m /= rows as f32;
            sq /= rows as f32;
            let sd = (sq - m * m).max(0.0).sqrt();
            for r in 0..rows {
                w[r * nf + j] = (w[r * nf + j] - m) / sd;
            }
        }
        if nf > MEDIAN_FILTER_WIDTH / 2 {
            for r in 0..rows {
                let filtered = median_filter(&w[r * nf..][..nf], MEDIAN_FILTER_WIDTH);
                w[r * nf..][..nf].copy_from_slice(&filtered);
            }
        }
        for (m, v) in mean.iter_mut().zip(&w) {
            *m += v;
        }
    }
    let heads_n = scores.len() as f32;
    mean.iter_mut().for_each(|v| *v /= heads_n);
    // Rows of <|notimestamps|> and the text tokens.
    let matrix: Vec<f32> = mean[sot_len * nf..(sot_len + text.len() + 1) * nf]
        .iter()
        .map(|&v| -v)
        .collect();
    let (text_idx, time_idx) = dtw(&matrix, text.len() + 1, nf);
    let mut jump_times = Vec::new();
    for k in 0..text_idx.len() {
        if k == 0 || text_idx[k] != text_idx[k - 1] {
            jump_times.push(time_idx[k] as f64 / TOKENS_PER_SECOND);
        }
    }
    let mut with_eot = text.to_vec();
    with_eot.push(special.eot);
    let (words, word_tokens) = split_to_word_tokens(tr, &with_eot)?;
    if word_tokens.len() <= 1 {
        return Ok(Vec::new());
    }
    let mut boundaries = vec![0usize];
    for t in &word_tokens[..word_tokens.len() - 1] {
        boundaries.push(boundaries.last().copied().unwrap_or(0) + t.len());
    }
    let at = |i: usize| jump_times.get(i).copied().unwrap_or(0.0);
    Ok((0..words.len() - 1)
        .map(|i| {
            let (a, b) = (boundaries[i], boundaries[i + 1]);
            let p = &probs[a.min(probs.len())..b.min(probs.len())];
            Timing {
                word: words[i].clone(),
                tokens: word_tokens[i].clone(),
                start: at(a),
                end: at(b),
                probability: if p.is_empty() {
                    0.0
                } else {
                    p.iter().sum::<f64>() / p.len() as f64
                },
            }
        })
        .collect())
}

/// Median over a window of `width` (odd) centred on each value, reflecting at the edges
/// (`-i`, `2n-2-i`).
fn median_filter(x: &[f32], width: usize) -> Vec<f32> {
    let n = x.len() as isize;
    let half = (width / 2) as isize;
    let mut window = Vec::with_capacity(width);
    (0..n)
        .map(|i| {
            window.clear();
            for k in i - half..=i + half {
                let mut idx = k;
                if idx < 0 {
                    idx = -idx;
                }
                if idx >= n {
                    idx = 2 * n - 2 - idx;
                }
                window.push(x[idx.clamp(0, n - 1) as usize]);
            }
            window.sort_by(f32::total_cmp);
            window[half as usize]
        })
        .collect()
}

/// Dynamic time warping over `cost` (`rows × cols`): the path of (row, column) pairs from the
/// first to the last cell, preferring the diagonal, then up, then left on ties.
fn dtw(x: &[f32], rows: usize, cols: usize) -> (Vec<usize>, Vec<usize>) {
    let w = cols + 1;
    let mut cost = vec![f32::INFINITY; (rows + 1) * w];
    let mut trace = vec![-1i8; (rows + 1) * w];
    cost[0] = 0.0;
    for j in 1..=cols {
        for i in 1..=rows {
            let c0 = cost[(i - 1) * w + j - 1];
            let c1 = cost[(i - 1) * w + j];
            let c2 = cost[i * w + j - 1];
            let (c, t) = if c0 < c1 && c0 < c2 {
                (c0, 0)
            } else if c1 < c0 && c1 < c2 {
                (c1, 1)
            } else {
                (c2, 2)
            };
            cost[i * w + j] = x[(i - 1) * cols + j - 1] + c;
            trace[i * w + j] = t;
        }
    }
    trace[..=cols].fill(2);
    for i in 0..=rows {
        trace[i * w] = 1;
    }
    let (mut i, mut j) = (rows, cols);
    let (mut ti, mut tj) = (Vec::new(), Vec::new());
    while i > 0 || j > 0 {
        ti.push(i.saturating_sub(1));
        tj.push(j.saturating_sub(1));
        match trace[i * w + j] {
            0 => {
                i -= 1;
                j -= 1;
            }
            1 => i -= 1,
            _ => j -= 1,
        }
    }
    ti.reverse();
    tj.reverse();
    (ti, tj)
}

/// Words and their tokens: split where a piece of text starts with a space or is punctuation
/// (or at special tokens), or at every complete character for languages written without
/// spaces.
fn split_to_word_tokens(tr: &Transcriber, tokens: &[u32]) -> Result<(Vec<String>, Vec<Vec<u32>>)> {
    let (subwords, subword_tokens) = split_on_unicode(tr, tokens)?;
    let special: &SpecialTokens = &tr.special;
    let mut words: Vec<String> = Vec::new();
    let mut word_tokens: Vec<Vec<u32>> = Vec::new();
    const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
    for (sub, toks) in subwords.into_iter().zip(subword_tokens) {
        let is_special = toks.first().is_some_and(|&t| t >= special.eot);
        let with_space = sub.starts_with(' ');
        let punctuation = PUNCTUATION.contains(sub.trim());
        if is_special || with_space || punctuation || words.is_empty() {
            words.push(sub);
            word_tokens.push(toks);
        } else if let (Some(w), Some(t)) = (words.last_mut(), word_tokens.last_mut()) {
            w.push_str(&sub);
            t.extend(toks);
        }
    }
    Ok((words, word_tokens))
}

/// Splits `tokens` into the shortest runs that decode to whole characters.
fn split_on_unicode(tr: &Transcriber, tokens: &[u32]) -> Result<(Vec<String>, Vec<Vec<u32>>)> {
    let decode = |t: &[u32]| -> Result<String> {
        let text: Vec<u32> = t.iter().copied().filter(|&x| x < tr.special.eot).collect();
        tr.tokenizer.decode(&text, true)
    };
    let full: Vec<char> = decode(tokens)?.chars().collect();
    let (mut words, mut word_tokens, mut current) = (Vec::new(), Vec::new(), Vec::new());
    let mut offset = 0;
    for &t in tokens {
        current.push(t);
        let decoded = decode(&current)?;
        let chars: Vec<char> = decoded.chars().collect();
        let bad = chars.iter().position(|&c| c == '\u{fffd}');
        let complete = match bad {
            None => true,
            Some(p) => full.get(offset + p) == Some(&'\u{fffd}'),
        };
        if complete {
            offset += chars.len();
            words.push(decoded);
            word_tokens.push(std::mem::take(&mut current));
        }
    }
    Ok((words, word_tokens))
}

/// Merges leading punctuation (`prepend`) into the word after it and trailing punctuation
/// (`append`) into the word before it; merged-away entries keep no text and no tokens.
fn merge_punctuations(alignment: &mut [Timing], prepend: &str, append: &str) {
    let n = alignment.len();
    if n < 2 {
        return;
    }
    let mut j = n - 1;
    for i in (0..n - 1).rev() {
        let prev = alignment[i].clone();
        if prev.word.starts_with(' ') && prepend.contains(prev.word.trim()) {
            let f = &mut alignment[j];
            f.word = format!("{}{}", prev.word, f.word);
            let mut toks = prev.tokens.clone();
            toks.extend_from_slice(&f.tokens);
            f.tokens = toks;
            alignment[i].word.clear();
            alignment[i].tokens.clear();
        } else {
            j = i;
        }
    }
    let mut i = 0;
    for j in 1..n {
        let following = alignment[j].clone();
        if !alignment[i].word.ends_with(' ') && append.contains(following.word.as_str()) {
            let p = &mut alignment[i];
            p.word.push_str(&following.word);
            p.tokens.extend_from_slice(&following.tokens);
            alignment[j].word.clear();
            alignment[j].tokens.clear();
        } else {
            i = j;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtw_follows_the_cheapest_monotonic_path() {
        // Two tokens over four frames: token 0 is cheap on frames 0-1, token 1 on 2-3. Worked
        // by hand from the recurrence (cost -4): cell (2, 2) comes from above, and the three-way
        // tie at (2, 3) goes left, so the path reaches token 1 at frame 1 and keeps it.
        let x = [-1.0, -1.0, 0.0, 0.0, 0.0, 0.0, -1.0, -1.0];
        let (ti, tj) = dtw(&x, 2, 4);
        assert_eq!(ti, vec![0, 0, 1, 1, 1]);
        assert_eq!(tj, vec![0, 1, 1, 2, 3]);
    }

    #[test]
    fn median_filter_reflects_at_the_edges() {
        let x = [5.0, 1.0, 2.0, 3.0, 4.0];
        // Position 0 sees [2, 1, 5, 1, 2] (reflected) with width 5.
        assert_eq!(median_filter(&x, 5)[0], 2.0);
        assert_eq!(median_filter(&x, 5)[2], 3.0);
    }

    #[test]
    fn punctuation_joins_its_word() {
        let t = |w: &str| Timing {
            word: w.into(),
            tokens: vec![1],
            start: 0.0,
            end: 0.0,
            probability: 1.0,
        };
        let mut a = vec![t(" \""), t("Hello"), t(","), t(" world"), t(".")];
        merge_punctuations(&mut a, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、");
        let words: Vec<&str> = a.iter().map(|w| w.word.as_str()).collect();
        assert_eq!(words, vec!["", " \"Hello,", "", " world.", ""]);
        assert_eq!(a[1].tokens.len(), 3);
    }
}

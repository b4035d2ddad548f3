//! A transcription's result and its text forms: plain text, SubRip (`.srt`), WebVTT and the
//! JSON shapes of OpenAI's `/v1/audio/transcriptions` (`json`, `verbose_json`).

use serde::Serialize;

/// One word with its time span (word timestamps).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Word {
    pub start: f64,
    pub end: f64,
    /// The word as the tokens spell it, with its leading space.
    pub word: String,
    /// Mean probability of its tokens.
    pub probability: f64,
}

/// One decoded segment, times in seconds from the start of the audio.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Segment {
    pub id: usize,
    /// The mel frame (10 ms) its window started at.
    pub seek: usize,
    pub start: f64,
    pub end: f64,
    pub text: String,
    /// Its tokens, timestamps included.
    pub tokens: Vec<u32>,
    /// The sampling temperature of the attempt that was kept (0 = greedy or beam search).
    pub temperature: f32,
    pub avg_logprob: f64,
    pub compression_ratio: f64,
    pub no_speech_prob: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub words: Option<Vec<Word>>,
}

/// Everything a transcription returns.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Transcript {
    /// `"transcribe"` or `"translate"`.
    pub task: String,
    pub language: String,
    /// Probability of `language` when it was detected (1 when given).
    pub language_probability: f64,
    /// Seconds of audio.
    pub duration: f64,
    pub text: String,
    pub segments: Vec<Segment>,
    /// Where the time went.
    #[serde(skip)]
    pub stats: TranscribeStats,
}

/// Timings of a transcription (for benchmarks).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TranscribeStats {
    /// 30 s windows encoded.
    pub windows: usize,
    /// Seconds in the encoder (features included).
    pub encode_seconds: f64,
    /// Tokens the decoder ran (every hypothesis and fallback attempt, prompts included).
    pub decoded_tokens: usize,
    /// Seconds in the decoder.
    pub decode_seconds: f64,
}

/// The output forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TranscriptFormat {
    Text,
    Srt,
    Vtt,
    Json,
    VerboseJson,
}

impl TranscriptFormat {
    pub const NAMES: &'static str = "txt (or text), srt, vtt, json, verbose_json";

    /// `txt`/`text`, `srt`, `vtt`, `json`, `verbose_json`.
    pub fn parse(name: &str) -> Option<TranscriptFormat> {
        Some(match name {
            "txt" | "text" => TranscriptFormat::Text,
            "srt" => TranscriptFormat::Srt,
            "vtt" => TranscriptFormat::Vtt,
            "json" => TranscriptFormat::Json,
            "verbose_json" => TranscriptFormat::VerboseJson,
            _ => return None,
        })
    }

    /// The media type of the rendered form.
    pub fn content_type(self) -> &'static str {
        match self {
            TranscriptFormat::Text => "text/plain; charset=utf-8",
            TranscriptFormat::Srt => "application/x-subrip; charset=utf-8",
            TranscriptFormat::Vtt => "text/vtt; charset=utf-8",
            TranscriptFormat::Json | TranscriptFormat::VerboseJson => "application/json",
        }
    }
}

impl Transcript {
    /// The transcript rendered as `format`.
    pub fn render(&self, format: TranscriptFormat) -> String {
        match format {
            TranscriptFormat::Text => format!("{}\n", self.text.trim()),
            TranscriptFormat::Srt => self.subtitles(false),
            TranscriptFormat::Vtt => self.subtitles(true),
            TranscriptFormat::Json => serde_json::json!({ "text": self.text.trim() }).to_string(),
            TranscriptFormat::VerboseJson => self.verbose_json().to_string(),
        }
    }

    /// OpenAI's `verbose_json`: task, language, duration, text, segments, and the words of
    /// every segment at the top level when word timestamps were asked for.
    pub fn verbose_json(&self) -> serde_json::Value {
        let segments: Vec<serde_json::Value> = self
            .segments
            .iter()
            .map(|s| {
                serde_json::json!({
                    "id": s.id,
                    "seek": s.seek,
                    "start": s.start,
                    "end": s.end,
                    "text": s.text,
                    "tokens": s.tokens,
                    "temperature": s.temperature,
                    "avg_logprob": s.avg_logprob,
                    "compression_ratio": s.compression_ratio,
                    "no_speech_prob": s.no_speech_prob,
                })
            })
            .collect();
        let mut v = serde_json::json!({
            "task": self.task,
            "language": language_name(&self.language),
            "duration": self.duration,
            "text": self.text.trim(),
            "segments": segments,
        });
        let words: Vec<&Word> = self
            .segments
            .iter()
            .filter_map(|s| s.words.as_ref())
            .flatten()
            .collect();
        if self.segments.iter().any(|s| s.words.is_some()) {
            v["words"] = serde_json::json!(words
                .iter()
                .map(|w| serde_json::json!({"word": w.word.trim(), "start": w.start, "end": w.end}))
                .collect::<Vec<_>>());
        }
        v
    }

    fn subtitles(&self, vtt: bool) -> String {
        let mut out = String::new();
        if vtt {
            out.push_str("WEBVTT\n\n");
        }
        for (i, s) in self.segments.iter().enumerate() {
            if !vtt {
                out.push_str(&format!("{}\n", i + 1));
            }
            out.push_str(&format!(
                "{} --> {}\n{}\n\n",
                clock(s.start, vtt),
                clock(s.end, vtt),
                s.text.trim().replace("-->", "->")
            ));
        }
        out
    }
}

/// `HH:MM:SS,mmm` (SubRip) or `HH:MM:SS.mmm` (WebVTT).
pub fn clock(seconds: f64, vtt: bool) -> String {
    let ms = (seconds.max(0.0) * 1000.0).round() as u64;
    let (h, m, s, ms) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let sep = if vtt { '.' } else { ',' };
    format!("{h:02}:{m:02}:{s:02}{sep}{ms:03}")
}

/// OpenAI's verbose_json names the language in English ("english"); codes outside the list stay
/// codes.
fn language_name(code: &str) -> String {
    const NAMES: [(&str, &str); 20] = [
        ("en", "english"),
        ("zh", "chinese"),
        ("de", "german"),
        ("es", "spanish"),
        ("ru", "russian"),
        ("ko", "korean"),
        ("fr", "french"),
        ("ja", "japanese"),
        ("pt", "portuguese"),
        ("tr", "turkish"),
        ("pl", "polish"),
        ("ca", "catalan"),
        ("nl", "dutch"),
        ("ar", "arabic"),
        ("sv", "swedish"),
        ("it", "italian"),
        ("id", "indonesian"),
        ("hi", "hindi"),
        ("fi", "finnish"),
        ("uk", "ukrainian"),
    ];
    NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or_else(|| code.to_string(), |(_, n)| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Transcript {
        let seg = |id, start, end, text: &str| Segment {
            id,
            seek: 0,
            start,
            end,
            text: text.into(),
            tokens: vec![],
            temperature: 0.0,
            avg_logprob: -0.2,
            compression_ratio: 1.1,
            no_speech_prob: 0.01,
            words: None,
        };
        Transcript {
            task: "transcribe".into(),
            language: "en".into(),
            language_probability: 1.0,
            duration: 3725.5,
            text: " Hello there. General Kenobi.".into(),
            segments: vec![
                seg(0, 0.0, 1.5, " Hello there."),
                seg(1, 3661.25, 3725.5, " General --> Kenobi."),
            ],
            stats: TranscribeStats::default(),
        }
    }

    #[test]
    fn subrip_and_webvtt_number_and_clock_the_segments() {
        let t = sample();
        assert_eq!(
            t.render(TranscriptFormat::Srt),
            "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n\
             2\n01:01:01,250 --> 01:02:05,500\nGeneral -> Kenobi.\n\n"
        );
        assert_eq!(
            t.render(TranscriptFormat::Vtt),
            "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n\n\
             01:01:01.250 --> 01:02:05.500\nGeneral -> Kenobi.\n\n"
        );
    }

    #[test]
    fn json_forms_follow_openai() {
        let t = sample();
        let j: serde_json::Value = serde_json::from_str(&t.render(TranscriptFormat::Json)).unwrap();
        assert_eq!(
            j,
            serde_json::json!({"text": "Hello there. General Kenobi."})
        );
        let v: serde_json::Value =
            serde_json::from_str(&t.render(TranscriptFormat::VerboseJson)).unwrap();
        assert_eq!(v["language"], "english");
        assert_eq!(v["segments"][1]["start"], 3661.25);
        assert!(v.get("words").is_none());
        assert_eq!(TranscriptFormat::parse("xml"), None);
    }
}

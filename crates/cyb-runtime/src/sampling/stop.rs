//! Stop strings in streamed text. Tokens decode to pieces that may split a stop string, so
//! text that could still become a stop string is held back until it is known not to be one;
//! the user never sees part of a stop string, and never sees text after one.

/// What one piece of decoded text produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopOutcome {
    /// Text that is safe to show now.
    pub text: String,
    /// A stop string was found; generation should end. `text` ends right before it.
    pub stopped: bool,
}

/// Watches decoded text for any of a set of stop strings.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopMatcher {
    /// Empty stop strings are ignored.
    pub fn new<S: AsRef<str>>(stops: &[S]) -> StopMatcher {
        StopMatcher {
            stops: stops
                .iter()
                .map(|s| s.as_ref().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            held: String::new(),
            stopped: false,
        }
    }

    /// True once a stop string was seen; later pieces are ignored.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Text held back because it may be the start of a stop string.
    pub fn held(&self) -> &str {
        &self.held
    }

    /// Feeds the next decoded piece.
    pub fn push(&mut self, piece: &str) -> StopOutcome {
        if self.stopped {
            return StopOutcome {
                text: String::new(),
                stopped: true,
            };
        }
        self.held.push_str(piece);
        // The earliest occurrence of any stop string ends the text.
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(pos) = first {
            let text = self.held.get(..pos).unwrap_or_default().to_string();
            self.held.clear();
            self.stopped = true;
            return StopOutcome {
                text,
                stopped: true,
            };
        }
        let keep = self.longest_partial_suffix();
        let split = self.held.len() - keep;
        let text = self.held.get(..split).unwrap_or_default().to_string();
        self.held.drain(..split);
        StopOutcome {
            text,
            stopped: false,
        }
    }

    /// Ends the stream: whatever was held back is ordinary text after all.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Byte length of the longest suffix of `held` that is a proper prefix of a stop string.
    fn longest_partial_suffix(&self) -> usize {
        let mut best = 0;
        for (start, _) in self.held.char_indices() {
            let suffix = &self.held[start..];
            if self
                .stops
                .iter()
                .any(|s| s.len() > suffix.len() && s.starts_with(suffix))
            {
                best = best.max(suffix.len());
                // Suffixes only get shorter from here; the first hit is the longest.
                break;
            }
        }
        best
    }
}

//! Sample-rate conversion of one channel with rubato's windowed-sinc resampler.
//!
//! Filter: 256 taps, Blackman-Harris² window, cutoff from rubato's `calculate_cutoff` for that
//! length and window (0.947 of the lower Nyquist: 7.6 kHz when going to 16 kHz), the sinc
//! tabulated 1024 times per tap and interpolated linearly. Output sample `j` is the
//! band-limited input at time `j / to` (input sample 0 is time 0), and the tail is flushed, so
//! `n` input samples give exactly `ceil(n * to / from)` output samples. The same
//! [`StreamResampler`] runs both the whole-buffer [`resample`] and [`super::AudioStream`], so
//! streaming and decoding whole give identical samples.

use rubato::{
    calculate_cutoff, Resampler, SincFixedIn, SincInterpolationParameters, SincInterpolationType,
    WindowFunction,
};

use super::{AudioError, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE};

const SINC_LEN: usize = 256;
/// Sinc table entries per input sample. rubato's output lands `1 / OVERSAMPLING` of an input
/// sample late (measured, whatever the interpolation); at 1024 that is under a microsecond.
const OVERSAMPLING: usize = 1024;
/// Input frames per rubato call.
const CHUNK: usize = 1024;

/// Resamples `mono` from `from` Hz to `to` Hz; see the module doc for the filter and length.
/// Rates outside [`MIN_SAMPLE_RATE`]..=[`MAX_SAMPLE_RATE`] are errors.
pub fn resample(mono: &[f32], from: u32, to: u32) -> Result<Vec<f32>, AudioError> {
    let mut r = StreamResampler::new(from, to)?;
    let expected = output_len(mono.len() as u64, from, to);
    let mut out = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
    r.push(mono, &mut out)?;
    r.finish(&mut out)?;
    Ok(out)
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// `ceil(n * to / from)`.
fn output_len(n: u64, from: u32, to: u32) -> u64 {
    let num = u128::from(n) * u128::from(to);
    let den = u128::from(from.max(1));
    u64::try_from(num.div_ceil(den)).unwrap_or(u64::MAX)
}

/// A resampler fed a block at a time; see the module doc.
pub(crate) struct StreamResampler {
    from: u32,
    to: u32,
    /// `None` when the rates are equal: samples pass through.
    sinc: Option<Box<SincFixedIn<f32>>>,
    /// Input not yet handed to rubato (fewer than [`CHUNK`] samples between calls).
    pending: Vec<f32>,
    out_block: Vec<Vec<f32>>,
    /// Output samples still to drop (see `align`).
    skip: usize,
    /// Outputs made while aligning, handed out with the first real ones.
    early: Vec<f32>,
    total_in: u64,
    total_out: u64,
}

impl StreamResampler {
    pub(crate) fn new(from: u32, to: u32) -> Result<StreamResampler, AudioError> {
        let err = |reason: String| AudioError::Resample { from, to, reason };
        for rate in [from, to] {
            if !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&rate) {
                return Err(err(format!(
                    "{rate} Hz is outside {MIN_SAMPLE_RATE}..={MAX_SAMPLE_RATE} Hz"
                )));
            }
        }
        let (sinc, out_block, skip) = if from == to {
            (None, Vec::new(), 0)
        } else {
            let window = WindowFunction::BlackmanHarris2;
            let params = SincInterpolationParameters {
                sinc_len: SINC_LEN,
                f_cutoff: calculate_cutoff(SINC_LEN, window),
                interpolation: SincInterpolationType::Linear,
                oversampling_factor: OVERSAMPLING,
                window,
            };
            let ratio = f64::from(to) / f64::from(from);
            let sinc = SincFixedIn::<f32>::new(ratio, 1.0, params, CHUNK, 1)
                .map_err(|e| err(e.to_string()))?;
            let out_block = sinc.output_buffer_allocate(true);
            (Some(Box::new(sinc)), out_block, 0)
        };
        let mut r = StreamResampler {
            from,
            to,
            sinc,
            pending: Vec::with_capacity(CHUNK),
            out_block,
            skip,
            early: Vec::new(),
            total_in: 0,
            total_out: 0,
        };
        if r.sinc.is_some() {
            r.align()?;
        }
        Ok(r)
    }

    /// Puts output sample `j` at input time `j * from / to`.
    ///
    /// rubato's `SincFixedIn` (0.16) centres output `k` on input position `(k + 1) r - 1`,
    /// `r = from / to`: nearly in time, but a fraction of a sample off. With `from / to = M / L`
    /// in lowest terms, feeding `M - 1` zeros first and dropping the first `L - 1` outputs
    /// moves output `j` to `(j + L) r - 1 - (M - 1) = j r` exactly. That costs at most
    /// `MAX_SAMPLE_RATE` extra input samples, once. The tests against analytic sines hold
    /// this to account if rubato's placement ever changes.
    fn align(&mut self) -> Result<(), AudioError> {
        let g = gcd(self.from, self.to);
        let (l, m) = ((self.to / g) as usize, (self.from / g) as usize);
        self.skip = l - 1;
        let zeros = [0f32; CHUNK];
        let mut early = Vec::new();
        let mut left = m - 1;
        while left > 0 {
            let n = left.min(CHUNK);
            self.push(&zeros[..n], &mut early)?;
            left -= n;
        }
        // The zeros are not input; any outputs they completed past the skip are real ones.
        self.total_in = 0;
        self.early = early;
        Ok(())
    }

    /// Resamples `input`, appending what is ready to `out`.
    pub(crate) fn push(&mut self, input: &[f32], out: &mut Vec<f32>) -> Result<(), AudioError> {
        out.append(&mut self.early);
        self.total_in += input.len() as u64;
        if self.sinc.is_none() {
            out.extend_from_slice(input);
            self.total_out += input.len() as u64;
            return Ok(());
        }
        let mut rest = input;
        while !rest.is_empty() {
            let take = (CHUNK - self.pending.len()).min(rest.len());
            self.pending.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.pending.len() == CHUNK {
                self.run(false, out)?;
                self.pending.clear();
            }
        }
        Ok(())
    }

    /// Flushes the filter, appending the last samples to `out` so that the total is
    /// `ceil(n * to / from)` for the `n` samples pushed.
    pub(crate) fn finish(&mut self, out: &mut Vec<f32>) -> Result<(), AudioError> {
        let expected = output_len(self.total_in, self.from, self.to);
        if self.sinc.is_none() {
            return Ok(());
        }
        let before = out.len();
        out.append(&mut self.early);
        if !self.pending.is_empty() {
            self.run(true, out)?;
            self.pending.clear();
        }
        // The delay is under SINC_LEN input samples, so a few empty chunks flush it; the
        // bound only guards against a resampler that stops producing.
        let mut flushes = 0;
        while self.total_out < expected && flushes < 2 + SINC_LEN / CHUNK + 2 {
            self.run(true, out)?;
            flushes += 1;
        }
        let excess = usize::try_from(self.total_out.saturating_sub(expected)).unwrap_or(usize::MAX);
        let excess = excess.min(out.len() - before);
        out.truncate(out.len() - excess);
        self.total_out -= excess as u64;
        Ok(())
    }

    /// One rubato call on `pending` (zero-padded when `partial`).
    fn run(&mut self, partial: bool, out: &mut Vec<f32>) -> Result<(), AudioError> {
        let (from, to) = (self.from, self.to);
        let Some(sinc) = self.sinc.as_mut() else {
            return Ok(());
        };
        let input = [self.pending.as_slice()];
        let result = if partial {
            // An empty channel would read as "inactive"; None pads a whole chunk of zeros.
            let input = (!self.pending.is_empty()).then_some(&input[..]);
            sinc.process_partial_into_buffer(input, &mut self.out_block, None)
        } else {
            sinc.process_into_buffer(&input[..], &mut self.out_block, None)
        };
        let (_, written) = result.map_err(|e| AudioError::Resample {
            from,
            to,
            reason: e.to_string(),
        })?;
        let block = self
            .out_block
            .first()
            .map(|b| &b[..written.min(b.len())])
            .unwrap_or(&[]);
        let dropped = self.skip.min(block.len());
        self.skip -= dropped;
        out.extend_from_slice(&block[dropped..]);
        self.total_out += (block.len() - dropped) as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_length_is_the_ceiling() {
        assert_eq!(output_len(44_100, 44_100, 16_000), 16_000);
        assert_eq!(output_len(44_101, 44_100, 16_000), 16_001);
        assert_eq!(output_len(3, 48_000, 16_000), 1);
        assert_eq!(output_len(0, 48_000, 16_000), 0);
        assert_eq!(output_len(u64::MAX, 1000, 768_000), u64::MAX);
    }

    #[test]
    fn lengths_hold_for_short_and_odd_inputs() {
        for n in [0usize, 1, 5, 255, 1023, 1024, 1025, 5000] {
            let x = vec![0.25f32; n];
            for (from, to) in [(44_100, 16_000), (8_000, 16_000), (16_000, 16_000)] {
                let y = resample(&x, from, to).unwrap();
                assert_eq!(
                    y.len() as u64,
                    output_len(n as u64, from, to),
                    "{n} {from}->{to}"
                );
            }
        }
    }

    #[test]
    fn streaming_in_odd_blocks_equals_one_call() {
        let x: Vec<f32> = (0..20_000)
            .map(|i| ((i as f32) * 0.0123).sin() * 0.5)
            .collect();
        let whole = resample(&x, 48_000, 16_000).unwrap();
        let mut r = StreamResampler::new(48_000, 16_000).unwrap();
        let mut pieces = Vec::new();
        for block in x.chunks(777) {
            r.push(block, &mut pieces).unwrap();
        }
        r.finish(&mut pieces).unwrap();
        assert_eq!(whole, pieces);
    }

    #[test]
    fn rates_out_of_range_are_errors() {
        assert!(resample(&[0.0; 10], 0, 16_000).is_err());
        assert!(resample(&[0.0; 10], 16_000, 1).is_err());
        assert!(resample(&[0.0; 10], 10_000_000, 16_000).is_err());
    }
}

//! Sample-rate conversion of one channel with rubato's windowed-sinc resampler.
//!
//! Filter: 256 taps, Blackman-Harris² window, cutoff from rubato's `calculate_cutoff` for that
//! length and window (about 0.92 of the lower Nyquist: 7.4 kHz when going to 16 kHz), the sinc
//! tabulated 256 times per tap and interpolated linearly. Output sample `j` is the band-limited
//! input at time `j / to`: the filter's delay is dropped from the front, and the tail is
//! flushed, so `n` input samples give exactly `ceil(n * to / from)` output samples. The same
//! [`StreamResampler`] runs both the whole-buffer [`resample`] and [`super::AudioStream`], so
//! streaming and decoding whole give identical samples.

use rubato::{
    calculate_cutoff, Resampler, SincFixedIn, SincInterpolationParameters, SincInterpolationType,
    WindowFunction,
};

use super::{AudioError, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE};

const SINC_LEN: usize = 256;
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
    /// Output samples still to drop: the filter's delay.
    skip: usize,
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
                oversampling_factor: 256,
                window,
            };
            let ratio = f64::from(to) / f64::from(from);
            let sinc = SincFixedIn::<f32>::new(ratio, 1.0, params, CHUNK, 1)
                .map_err(|e| err(e.to_string()))?;
            let out_block = sinc.output_buffer_allocate(true);
            let skip = sinc.output_delay();
            (Some(Box::new(sinc)), out_block, skip)
        };
        Ok(StreamResampler {
            from,
            to,
            sinc,
            pending: Vec::with_capacity(CHUNK),
            out_block,
            skip,
            total_in: 0,
            total_out: 0,
        })
    }

    /// Resamples `input`, appending what is ready to `out`.
    pub(crate) fn push(&mut self, input: &[f32], out: &mut Vec<f32>) -> Result<(), AudioError> {
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

//! Whisper's log-mel spectrogram.

mod filterbank;

use std::sync::Arc;

use rayon::prelude::*;
use realfft::num_complex::Complex;
use realfft::{RealFftPlanner, RealToComplex};

pub use filterbank::{hz_to_mel, mel_to_hz, slaney_mel_filters, MelFilter};

/// Window and FFT length (25 ms at 16 kHz).
pub const N_FFT: usize = 400;
/// Frame step (10 ms at 16 kHz).
pub const HOP_LENGTH: usize = 160;
const N_FREQS: usize = N_FFT / 2 + 1;
/// Frames handed to one rayon task.
const FRAMES_PER_TASK: usize = 32;

/// A log-mel front end: a periodic Hann window of [`N_FFT`] samples, a real FFT plan and a
/// Slaney mel filter bank, all built once and shared by every call.
pub struct LogMel {
    n_mels: usize,
    window: Vec<f64>,
    filters: Vec<MelFilter>,
    fft: Arc<dyn RealToComplex<f64>>,
}

impl LogMel {
    /// Whisper's front end: n_fft 400, hop 160, 16 kHz, mel filters from 0 to 8000 Hz
    /// ([`slaney_mel_filters`]); `n_mels` is 80 for Whisper v1/v2 and 128 for v3.
    pub fn whisper(n_mels: usize) -> LogMel {
        // hann(N_FFT + 1)[:-1]: the periodic window, 0.5 - 0.5 cos(2 pi n / N_FFT).
        let window = (0..N_FFT)
            .map(|n| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * n as f64 / N_FFT as f64).cos())
            .collect();
        LogMel {
            n_mels,
            window,
            filters: slaney_mel_filters(N_FREQS, n_mels, 0.0, 8000.0, 16_000),
            fft: RealFftPlanner::<f64>::new().plan_fft_forward(N_FFT),
        }
    }

    pub fn n_mels(&self) -> usize {
        self.n_mels
    }

    /// Whisper's log-mel features of `samples` (16 kHz mono), row-major `[n_mels, n_frames]`
    /// with `n_frames = samples.len() / 160`; empty when that is 0.
    ///
    /// Math (transformers' `WhisperFeatureExtractor._np_extract_fbank_features`, equal to
    /// openai-whisper's `log_mel_spectrogram`): the samples are padded by 200 on each side by
    /// reflection (`x[-i] = x[i]`, repeatedly for inputs shorter than 201); frame `t` is the
    /// padded samples `160 t .. 160 t + 400` times the window; `P[t, k] = |rfft(frame)[k]|²`
    /// for k in 0..=200; `L[m, t] = log10(max(sum_k F[m, k] P[t, k], 1e-10))`, the FFT, power
    /// and filter sums in f64 (the reference rounds the spectrum to complex64, so the two agree
    /// to an ulp or two of f32), the log in f32. The STFT's last frame (`t = n_frames`) is
    /// dropped. Then, in f32,
    /// `L = max(L, max(L) - 8)` over the whole array and `(L + 4) / 4`. The caller pads
    /// (Whisper: with zeros to 480000 samples for 3000 frames) before calling, as the feature
    /// extractor's `padding="max_length"` does.
    pub fn compute(&self, samples: &[f32]) -> Vec<f32> {
        let n_frames = samples.len() / HOP_LENGTH;
        if n_frames == 0 || self.n_mels == 0 {
            return Vec::new();
        }
        let half = (N_FFT / 2) as isize;
        let n = samples.len() as isize;
        let at = |i: isize| {
            samples
                .get(reflect(i, samples.len()))
                .map_or(0.0, |&s| f64::from(s))
        };
        let mut padded: Vec<f64> = Vec::with_capacity(samples.len() + N_FFT);
        padded.extend((-half..0).map(at));
        padded.extend(samples.iter().map(|&s| f64::from(s)));
        padded.extend((n..n + half).map(at));

        // Frame-major while computing (each task owns whole frames), transposed at the end.
        let n_mels = self.n_mels;
        let mut by_frame = vec![0f32; n_frames * n_mels];
        by_frame
            .par_chunks_mut(FRAMES_PER_TASK * n_mels)
            .enumerate()
            .for_each_init(
                || FrameScratch::new(self.fft.as_ref()),
                |scratch, (task, out)| {
                    for (i, mel_row) in out.chunks_exact_mut(n_mels).enumerate() {
                        let start = (task * FRAMES_PER_TASK + i) * HOP_LENGTH;
                        let frame = padded.get(start..start + N_FFT).unwrap_or(&[]);
                        self.frame_log_mel(frame, scratch, mel_row);
                    }
                },
            );

        let max = by_frame.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let floor = max - 8.0;
        let mut out = vec![0f32; n_mels * n_frames];
        for (t, frame) in by_frame.chunks_exact(n_mels).enumerate() {
            for (m, &v) in frame.iter().enumerate() {
                out[m * n_frames + t] = (v.max(floor) + 4.0) / 4.0;
            }
        }
        out
    }

    /// One frame's `log10(max(mel power, 1e-10))` into `out` (`n_mels` values).
    fn frame_log_mel(&self, frame: &[f64], s: &mut FrameScratch, out: &mut [f32]) {
        for ((dst, &x), &w) in s.input.iter_mut().zip(frame).zip(&self.window) {
            *dst = x * w;
        }
        if self
            .fft
            .process_with_scratch(&mut s.input, &mut s.spectrum, &mut s.fft)
            .is_err()
        {
            // Only wrong buffer lengths fail, and FrameScratch sizes them from this plan.
            out.fill(-10.0);
            return;
        }
        for (p, c) in s.power.iter_mut().zip(&s.spectrum) {
            *p = c.re * c.re + c.im * c.im;
        }
        for (dst, filter) in out.iter_mut().zip(&self.filters) {
            let bins = s.power.get(filter.first..).unwrap_or(&[]);
            let mel: f64 = filter.weights.iter().zip(bins).map(|(w, p)| w * p).sum();
            *dst = (mel.max(1e-10) as f32).log10();
        }
    }
}

/// Per-thread buffers for one frame.
struct FrameScratch {
    input: Vec<f64>,
    spectrum: Vec<Complex<f64>>,
    power: Vec<f64>,
    fft: Vec<Complex<f64>>,
}

impl FrameScratch {
    fn new(fft: &dyn RealToComplex<f64>) -> FrameScratch {
        FrameScratch {
            input: fft.make_input_vec(),
            spectrum: fft.make_output_vec(),
            power: vec![0.0; N_FREQS],
            fft: fft.make_scratch_vec(),
        }
    }
}

/// numpy's "reflect" index for position `i` of a signal of length `n` extended both ways by
/// mirroring about its end samples (which are not repeated).
fn reflect(i: isize, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    let period = 2 * (n as isize - 1);
    let r = i.rem_euclid(period);
    (if r >= n as isize { period - r } else { r }) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflect_matches_numpy_pad() {
        // np.pad([0, 1, 2, 3], 6, mode="reflect")
        let want = [0, 1, 2, 3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2, 3];
        let got: Vec<usize> = (-6..10).map(|i| reflect(i, 4)).collect();
        assert_eq!(got, want);
        assert_eq!(reflect(-3, 1), 0);
    }

    #[test]
    fn frame_count_and_short_inputs() {
        let mel = LogMel::whisper(80);
        assert!(mel.compute(&[0.1; 159]).is_empty());
        assert_eq!(mel.compute(&[0.1; 160]).len(), 80);
        assert_eq!(mel.compute(&vec![0.0; 480_000]).len(), 80 * 3000);
    }

    #[test]
    fn silence_is_the_floor_and_a_tone_lights_its_band() {
        let mel = LogMel::whisper(80);
        assert!(mel.compute(&[0.0; 1600]).iter().all(|&v| v == -1.5));
        let tone: Vec<f32> = (0..16_000)
            .map(|i| (2.0 * std::f32::consts::PI * 1000.0 * i as f32 / 16_000.0).sin())
            .collect();
        let f = mel.compute(&tone);
        let frames = 100;
        let band_mean =
            |m: usize| f[m * frames..(m + 1) * frames].iter().sum::<f32>() / frames as f32;
        let loudest = (0..80)
            .max_by(|&a, &b| band_mean(a).total_cmp(&band_mean(b)))
            .unwrap();
        let centre = |m: usize| mel_to_hz(hz_to_mel(8000.0) * (m + 1) as f64 / 81.0);
        assert!(
            (centre(loudest) - 1000.0).abs() < 60.0,
            "band {loudest} at {} Hz",
            centre(loudest)
        );
    }
}

//! Slaney-style mel filter banks, as librosa and Hugging Face transformers build them.

/// Slaney's mel scale: linear below 1 kHz (`mel = 3 f / 200`), logarithmic above
/// (`mel = 15 + ln(f / 1000) · 27 / ln 6.4`).
pub fn hz_to_mel(hz: f64) -> f64 {
    if hz >= 1000.0 {
        15.0 + (hz / 1000.0).ln() * (27.0 / 6.4f64.ln())
    } else {
        3.0 * hz / 200.0
    }
}

/// The inverse of [`hz_to_mel`].
pub fn mel_to_hz(mel: f64) -> f64 {
    if mel >= 15.0 {
        1000.0 * ((6.4f64.ln() / 27.0) * (mel - 15.0)).exp()
    } else {
        200.0 * mel / 3.0
    }
}

/// numpy's `linspace(start, stop, num)`: `start + i * step`, the last value exactly `stop`.
fn linspace(start: f64, stop: f64, num: usize) -> Vec<f64> {
    let step = (stop - start) / (num.max(2) - 1) as f64;
    let mut v: Vec<f64> = (0..num).map(|i| i as f64 * step + start).collect();
    if let Some(last) = v.last_mut() {
        *last = stop;
    }
    v
}

/// One triangular filter: its weights over FFT bins `first..first + weights.len()` (zero
/// elsewhere).
#[derive(Clone, Debug, PartialEq)]
pub struct MelFilter {
    pub first: usize,
    pub weights: Vec<f64>,
}

/// transformers' `mel_filter_bank(num_frequency_bins, n_mels, min_hz, max_hz, sampling_rate,
/// norm="slaney", mel_scale="slaney")`, in f64: `n_mels + 2` points evenly spaced in mel from
/// `min_hz` to `max_hz` (`p[0..n_mels+2]`, in Hz); filter `m` over bin frequency `f = k · (sr/2)
/// / (bins - 1)` (with `sr/2` rounded down to whole Hz, as `sampling_rate // 2` is) is
/// `max(0, min((f - p[m]) / (p[m+1] - p[m]), (p[m+2] - f) / (p[m+2] - p[m+1])))` times the
/// Slaney area normalisation `2 / (p[m+2] - p[m])`. Stored sparsely, one [`MelFilter`] per mel.
pub fn slaney_mel_filters(
    num_frequency_bins: usize,
    n_mels: usize,
    min_hz: f64,
    max_hz: f64,
    sampling_rate: u32,
) -> Vec<MelFilter> {
    let mels = linspace(hz_to_mel(min_hz), hz_to_mel(max_hz), n_mels + 2);
    let points: Vec<f64> = mels.into_iter().map(mel_to_hz).collect();
    let fft_freqs = linspace(0.0, f64::from(sampling_rate / 2), num_frequency_bins);
    points
        .windows(3)
        .map(|p| {
            let (lo, mid, hi) = (p[0], p[1], p[2]);
            let enorm = 2.0 / (hi - lo);
            let dense: Vec<f64> = fft_freqs
                .iter()
                .map(|&f| {
                    let down = (f - lo) / (mid - lo);
                    let up = (hi - f) / (hi - mid);
                    down.min(up).max(0.0) * enorm
                })
                .collect();
            let first = dense.iter().position(|&w| w != 0.0).unwrap_or(0);
            let last = dense
                .iter()
                .rposition(|&w| w != 0.0)
                .map_or(first, |i| i + 1);
            MelFilter {
                first,
                weights: dense[first..last].to_vec(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mel_scale_round_trips_and_joins_at_1_khz() {
        for hz in [0.0, 200.0, 999.0, 1000.0, 1234.5, 8000.0] {
            assert!((mel_to_hz(hz_to_mel(hz)) - hz).abs() < 1e-9, "{hz}");
        }
        assert_eq!(hz_to_mel(1000.0), 15.0);
        assert!((hz_to_mel(999.999_999) - 15.0).abs() < 1e-7);
    }

    #[test]
    fn whisper_bank_shape_and_triangles() {
        let bank = slaney_mel_filters(201, 80, 0.0, 8000.0, 16_000);
        assert_eq!(bank.len(), 80);
        for (m, f) in bank.iter().enumerate() {
            assert!(!f.weights.is_empty(), "filter {m} is empty");
            assert!(f.first + f.weights.len() <= 201);
            // Rises then falls: a single peak.
            let peak = f.weights.iter().cloned().fold(0.0, f64::max);
            let at = f.weights.iter().position(|&w| w == peak).unwrap();
            assert!(
                f.weights[..at].windows(2).all(|w| w[0] <= w[1]),
                "filter {m}"
            );
            assert!(
                f.weights[at..].windows(2).all(|w| w[0] >= w[1]),
                "filter {m}"
            );
        }
        // The first filter's left edge is 0 Hz (bin 0, weight 0, so it starts at bin 1).
        assert_eq!(bank[0].first, 1);
    }
}

//! Down-mixing interleaved frames to one channel.

/// The mean of each frame's channels: `out[i] = (x[i*c] + ... + x[i*c + c-1]) / c` for `c`
/// channels, summed in f32 in channel order. A trailing partial frame is ignored; zero
/// channels give nothing.
pub fn mix_to_mono(interleaved: &[f32], channels: usize, out: &mut Vec<f32>) {
    out.clear();
    match channels {
        0 => {}
        1 => out.extend_from_slice(interleaved),
        2 => out.extend(interleaved.chunks_exact(2).map(|f| (f[0] + f[1]) * 0.5)),
        c => {
            let scale = c as f32;
            out.extend(
                interleaved
                    .chunks_exact(c)
                    .map(|f| f.iter().sum::<f32>() / scale),
            )
        }
    }
}

/// Replaces NaN and infinities (a float WAV can hold them) with silence, so that one bad
/// sample cannot spread through the resampler's filter and the mel's global maximum.
pub(crate) fn zero_non_finite(samples: &mut [f32]) {
    for s in samples.iter_mut().filter(|s| !s.is_finite()) {
        *s = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_channels_and_ignores_a_partial_frame() {
        let mut out = Vec::new();
        mix_to_mono(&[1.0, 0.0, 0.5, -0.5, 0.25], 2, &mut out);
        assert_eq!(out, vec![0.5, 0.0]);
        mix_to_mono(&[3.0, 6.0, 0.0, 1.0, 1.0, 1.0, 9.0], 3, &mut out);
        assert_eq!(out, vec![3.0, 1.0]);
        mix_to_mono(&[0.1, 0.2], 1, &mut out);
        assert_eq!(out, vec![0.1, 0.2]);
        mix_to_mono(&[0.1, 0.2], 0, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn non_finite_samples_become_silence() {
        let mut s = [f32::NAN, 1.0, f32::INFINITY, -0.5, f32::NEG_INFINITY];
        zero_non_finite(&mut s);
        assert_eq!(s, [0.0, 1.0, 0.0, -0.5, 0.0]);
    }
}

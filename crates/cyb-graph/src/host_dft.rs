//! ONNX DFT and STFT (opset 17): direct O(n²) transforms in f64 over real (`[.., 1]`) or
//! complex (`[.., 2]`) signals; outputs are complex `[.., 2]`.

use crate::host_op::{axis, cast_to, req, HostRun};
use cyb_tensor::memory::filled_vec;
use cyb_tensor::{DType, Error, Result, Tensor};

/// `X[k] = Σ_n x[n] · e^(∓2πi·kn/N)` for `k < bins` (`inverse`: `+`, and divided by `N`).
fn transform(re: &[f64], im: &[f64], n: usize, bins: usize, inverse: bool) -> Vec<(f64, f64)> {
    let sign = if inverse { 1.0 } else { -1.0 };
    let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
    (0..bins)
        .map(|k| {
            let (mut sr, mut si) = (0.0, 0.0);
            for t in 0..n.min(re.len()) {
                let ang = sign * std::f64::consts::TAU * (k * t % n.max(1)) as f64 / n as f64;
                let (c, s) = (ang.cos(), ang.sin());
                sr += re[t] * c - im[t] * s;
                si += re[t] * s + im[t] * c;
            }
            (sr * scale, si * scale)
        })
        .collect()
}

pub(crate) fn dft(
    r: &mut HostRun,
    inputs: &[Option<Tensor>],
    ax: i64,
    inverse: bool,
    onesided: bool,
) -> Result<Vec<Tensor>> {
    let op = "dft";
    let x = req(op, inputs, 0)?;
    let d = x.dims().to_vec();
    let rank = d.len();
    if rank < 2 || !(d[rank - 1] == 1 || d[rank - 1] == 2) {
        return Err(Error::invalid(
            op,
            format!("input {d:?} does not end in 1 (real) or 2 (complex)"),
        ));
    }
    let a = axis(op, ax, rank - 1)?;
    let len = d[a];
    let n = match inputs.get(1).and_then(Option::as_ref) {
        Some(t) => usize::try_from(*r.ints(t)?.first().unwrap_or(&(len as i64)))
            .map_err(|_| Error::invalid(op, "negative dft_length"))?,
        None => len,
    };
    let bins = if onesided { n / 2 + 1 } else { n };
    let v: Vec<f64> =
        r.d.to_host(x)?
            .to_f32_vec()?
            .iter()
            .map(|&f| f as f64)
            .collect();
    let c = d[rank - 1];
    let outer: usize = d[..a].iter().product();
    let inner: usize = d[a + 1..rank - 1].iter().product();
    let mut od = d.clone();
    od[a] = bins;
    od[rank - 1] = 2;
    let mut y = filled_vec("dft", &[outer, bins, inner, 2], 0f32)?;
    for o in 0..outer {
        for i in 0..inner {
            let at = |t: usize, part: usize| v[((o * len + t) * inner + i) * c + part];
            let re: Vec<f64> = (0..n.min(len)).map(|t| at(t, 0)).collect();
            let im: Vec<f64> = (0..n.min(len))
                .map(|t| if c == 2 { at(t, 1) } else { 0.0 })
                .collect();
            for (k, (sr, si)) in transform(&re, &im, n, bins, inverse)
                .into_iter()
                .enumerate()
            {
                let base = ((o * bins + k) * inner + i) * 2;
                y[base] = sr as f32;
                y[base + 1] = si as f32;
            }
        }
    }
    let t = Tensor::from_f32(&od, &y)?;
    Ok(vec![cast_to(r, t, x.dtype())?])
}

pub(crate) fn stft(
    r: &mut HostRun,
    inputs: &[Option<Tensor>],
    onesided: bool,
) -> Result<Vec<Tensor>> {
    let op = "stft";
    let x = req(op, inputs, 0)?;
    let d = x.dims().to_vec();
    if d.len() != 3 || !(d[2] == 1 || d[2] == 2) {
        return Err(Error::invalid(
            op,
            format!("signal {d:?} is not [batch, length, 1 or 2]"),
        ));
    }
    let step = r.ints(req(op, inputs, 1)?)?.first().copied().unwrap_or(0);
    let step = usize::try_from(step)
        .ok()
        .filter(|&s| s > 0)
        .ok_or_else(|| Error::invalid(op, format!("frame_step {step}")))?;
    let window = match inputs.get(2).and_then(Option::as_ref) {
        Some(t) => Some(r.d.to_host(t)?.to_f32_vec()?),
        None => None,
    };
    let flen = match (inputs.get(3).and_then(Option::as_ref), &window) {
        (Some(t), _) => usize::try_from(r.ints(t)?.first().copied().unwrap_or(0))
            .map_err(|_| Error::invalid(op, "negative frame_length"))?,
        (None, Some(w)) => w.len(),
        _ => return Err(Error::invalid(op, "neither window nor frame_length given")),
    };
    if flen == 0 || flen > d[1] || window.as_ref().is_some_and(|w| w.len() != flen) {
        return Err(Error::invalid(
            op,
            format!("frame length {flen} for a signal of {}", d[1]),
        ));
    }
    let frames = (d[1] - flen) / step + 1;
    let bins = if onesided { flen / 2 + 1 } else { flen };
    let v: Vec<f64> =
        r.d.to_host(x)?
            .to_f32_vec()?
            .iter()
            .map(|&f| f as f64)
            .collect();
    let c = d[2];
    let mut y = filled_vec("stft", &[d[0], frames, bins, 2], 0f32)?;
    for b in 0..d[0] {
        for f in 0..frames {
            let w = |t: usize| window.as_ref().map_or(1.0, |w| w[t] as f64);
            let at = |t: usize, part: usize| v[(b * d[1] + f * step + t) * c + part];
            let re: Vec<f64> = (0..flen).map(|t| at(t, 0) * w(t)).collect();
            let im: Vec<f64> = (0..flen)
                .map(|t| if c == 2 { at(t, 1) * w(t) } else { 0.0 })
                .collect();
            for (k, (sr, si)) in transform(&re, &im, flen, bins, false)
                .into_iter()
                .enumerate()
            {
                let base = ((b * frames + f) * bins + k) * 2;
                y[base] = sr as f32;
                y[base + 1] = si as f32;
            }
        }
    }
    let t = Tensor::from_f32(&[d[0], frames, bins, 2], &y)?;
    Ok(vec![cast_to(r, t, x.dtype())?])
}

/// ONNX MelWeightMatrix: `[dft_length / 2 + 1, num_mel_bins]` triangular filters whose edges
/// are `num_mel_bins + 2` points evenly spaced on the mel scale (`2595·log10(1 + f/700)`)
/// between the lower and upper edge, mapped to whole DFT bins.
pub(crate) fn mel_weight_matrix(
    r: &mut HostRun,
    inputs: &[Option<Tensor>],
    dtype: DType,
) -> Result<Vec<Tensor>> {
    let name = "mel_weight_matrix";
    let scalar = |r: &HostRun, i: usize| -> Result<f64> {
        r.d.to_host(req(name, inputs, i)?)?
            .to_f64_vec()?
            .first()
            .copied()
            .ok_or_else(|| Error::invalid(name, format!("input {i} is empty")))
    };
    let (mels, dft_len, rate) = (scalar(r, 0)?, scalar(r, 1)?, scalar(r, 2)?);
    let (lo, hi) = (scalar(r, 3)?, scalar(r, 4)?);
    if !(mels >= 1.0 && dft_len >= 1.0 && rate > 0.0 && mels * dft_len <= 1e8) {
        return Err(Error::invalid(
            name,
            format!("num_mel_bins {mels}, dft_length {dft_len}, sample_rate {rate}"),
        ));
    }
    let (mels, dft_len) = (mels as usize, dft_len as i64);
    let bins = dft_len as usize / 2 + 1;
    let mel = |f: f64| 2595.0 * (1.0 + f / 700.0).log10();
    let (mlo, mhi) = (mel(lo), mel(hi));
    let step = (mhi - mlo) / (mels + 2) as f64;
    let edges: Vec<i64> = (0..mels + 2)
        .map(|k| {
            let hz = 700.0 * (10f64.powf((k as f64 * step + mlo) / 2595.0) - 1.0);
            (((dft_len + 1) as f64 * hz) / rate).floor() as i64
        })
        .collect();
    let mut w = filled_vec("mel_weight_matrix", &[bins, mels], 0f64)?;
    let mut set = |j: i64, m: usize, v: f64| {
        if let Some(x) = usize::try_from(j).ok().filter(|&j| j < bins) {
            w[x * mels + m] = v;
        }
    };
    for m in 0..mels {
        let (left, center, right) = (edges[m], edges[m + 1], edges[m + 2]);
        let rise = center - left;
        if rise == 0 {
            set(center, m, 1.0);
        } else {
            for j in left..=center {
                set(j, m, (j - left) as f64 / rise as f64);
            }
        }
        let fall = right - center;
        if fall > 0 {
            for j in center..right {
                set(j, m, (right - j) as f64 / fall as f64);
            }
        }
    }
    Ok(vec![Tensor::from_f64_as(&[bins, mels], &w, dtype)?])
}

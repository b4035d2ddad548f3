//! ONNX DFT and STFT (opset 17): direct O(n²) transforms in f64 over real (`[.., 1]`) or
//! complex (`[.., 2]`) signals; outputs are complex `[.., 2]`.

use crate::host_op::{axis, cast_to, req, HostRun};
use cyb_tensor::{Error, Result, Tensor};

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
    let mut y = vec![0f32; outer * bins * inner * 2];
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
    let mut y = vec![0f32; d[0] * frames * bins * 2];
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

//! ONNX recurrent layers (RNN, GRU, LSTM), one or two directions, computed on the host in f32
//! step by step with ONNX's gate order (LSTM `i o f c`, GRU `z r h`).

use crate::host_op::{cast_to, req, HostRun};
use cyb_tensor::memory::filled_vec;
use cyb_tensor::{Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RnnCell {
    Rnn,
    Gru { linear_before_reset: bool },
    Lstm { input_forget: bool },
}

/// An activation with its ONNX name and optional alpha/beta.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RnnActivation {
    pub name: String,
    pub alpha: Option<f32>,
    pub beta: Option<f32>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RnnSpec {
    pub cell: RnnCell,
    pub hidden: usize,
    /// 1 forward, -1 reverse, 0 bidirectional.
    pub direction: i8,
    /// Per direction: the cell's activations (RNN 1, GRU 2, LSTM 3).
    pub activations: Vec<RnnActivation>,
    pub clip: Option<f32>,
    /// Batch-first tensors (`layout = 1`).
    pub batch_first: bool,
}

/// An activation resolved from its ONNX name once per run.
#[derive(Clone, Copy)]
enum Act {
    Tanh,
    Sigmoid,
    Relu,
    LeakyRelu(f32),
    ThresholdedRelu(f32),
    ScaledTanh(f32, f32),
    HardSigmoid(f32, f32),
    Elu(f32),
    Softsign,
    Softplus,
    Affine(f32, f32),
}

impl Act {
    fn resolve(a: &RnnActivation) -> Result<Act> {
        let (al, be) = (a.alpha, a.beta);
        Ok(match a.name.to_ascii_lowercase().as_str() {
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            "relu" => Act::Relu,
            "leakyrelu" => Act::LeakyRelu(al.unwrap_or(0.01)),
            "thresholdedrelu" => Act::ThresholdedRelu(al.unwrap_or(1.0)),
            "scaledtanh" => Act::ScaledTanh(al.unwrap_or(1.0), be.unwrap_or(1.0)),
            "hardsigmoid" => Act::HardSigmoid(al.unwrap_or(0.2), be.unwrap_or(0.5)),
            "elu" => Act::Elu(al.unwrap_or(1.0)),
            "softsign" => Act::Softsign,
            "softplus" => Act::Softplus,
            "affine" => Act::Affine(al.unwrap_or(1.0), be.unwrap_or(0.0)),
            n => return Err(Error::invalid("rnn", format!("activation {n}"))),
        })
    }

    fn apply(self, x: f32) -> f32 {
        match self {
            Act::Tanh => x.tanh(),
            Act::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Act::Relu => x.max(0.0),
            Act::LeakyRelu(al) => {
                if x >= 0.0 {
                    x
                } else {
                    al * x
                }
            }
            Act::ThresholdedRelu(al) => {
                if x > al {
                    x
                } else {
                    0.0
                }
            }
            Act::ScaledTanh(al, be) => al * (be * x).tanh(),
            Act::HardSigmoid(al, be) => (al * x + be).clamp(0.0, 1.0),
            Act::Elu(al) => {
                if x >= 0.0 {
                    x
                } else {
                    al * x.exp_m1()
                }
            }
            Act::Softsign => x / (1.0 + x.abs()),
            Act::Softplus => x.exp().ln_1p(),
            Act::Affine(al, be) => al * x + be,
        }
    }
}

/// `out[g] += Σ_k x[k] · w[(g0 + g) * n + k]` for `g` in `0..len`, through the widest vectors
/// this CPU has (the same sums in the same order whatever the width: no fused multiply-add).
fn matvec(w: &[f32], g0: usize, len: usize, n: usize, x: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return unsafe { matvec_avx512(w, g0, len, n, x, out) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            return unsafe { matvec_avx2(w, g0, len, n, x, out) };
        }
    }
    matvec_any(w, g0, len, n, x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn matvec_avx512(w: &[f32], g0: usize, len: usize, n: usize, x: &[f32], out: &mut [f32]) {
    matvec_any(w, g0, len, n, x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn matvec_avx2(w: &[f32], g0: usize, len: usize, n: usize, x: &[f32], out: &mut [f32]) {
    matvec_any(w, g0, len, n, x, out)
}

/// Four rows at a time (four independent chains of sums), each row's dot as [`dot`]'s.
#[inline(always)]
fn matvec_any(w: &[f32], g0: usize, len: usize, n: usize, x: &[f32], out: &mut [f32]) {
    let out = &mut out[..len];
    let mut quads = out.chunks_exact_mut(ROWS);
    for (q, o) in (&mut quads).enumerate() {
        let g = g0 + q * ROWS;
        let row = |r: usize| &w[(g + r) * n..(g + r + 1) * n];
        let rows = [row(0), row(1), row(2), row(3)];
        for (o, s) in o.iter_mut().zip(dots(rows, x)) {
            *o += s;
        }
    }
    let done = len - quads.into_remainder().len();
    for g in done..len {
        out[g] += dot(&w[(g0 + g) * n..(g0 + g + 1) * n], x);
    }
}

/// Rows [`matvec_any`] sums at once.
const ROWS: usize = 4;
/// Interleaved partial sums per dot product (lane `k mod LANES`, so the loop vectorizes).
const LANES: usize = 16;

/// [`dot`] of each row with `b`, the rows' sums interleaved.
#[inline(always)]
fn dots(a: [&[f32]; ROWS], b: &[f32]) -> [f32; ROWS] {
    let n = b.len() / LANES * LANES;
    let (mut s0, mut s1, mut s2, mut s3) =
        ([0f32; LANES], [0f32; LANES], [0f32; LANES], [0f32; LANES]);
    let chunks = |r: usize| a[r][..n].chunks_exact(LANES);
    let all = b[..n]
        .chunks_exact(LANES)
        .zip(chunks(0))
        .zip(chunks(1))
        .zip(chunks(2))
        .zip(chunks(3));
    for ((((y, x0), x1), x2), x3) in all {
        for i in 0..LANES {
            s0[i] += x0[i] * y[i];
            s1[i] += x1[i] * y[i];
            s2[i] += x2[i] * y[i];
            s3[i] += x3[i] * y[i];
        }
    }
    let (y, tail) = (&b[n..], |r: usize| &a[r][n..]);
    [
        finish(&s0, tail(0), y),
        finish(&s1, tail(1), y),
        finish(&s2, tail(2), y),
        finish(&s3, tail(3), y),
    ]
}

/// `Σ a[k] · b[k]` in [`LANES`] interleaved partial sums, added in lane order, then the tail:
/// the same order on every machine.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = b.len() / LANES * LANES;
    let mut acc = [0f32; LANES];
    for k in (0..n).step_by(LANES) {
        for i in 0..LANES {
            acc[i] += a[k + i] * b[k + i];
        }
    }
    finish(&acc, &a[n..], &b[n..])
}

/// The partial sums added in lane order, then the tail's products one by one.
#[inline(always)]
fn finish(acc: &[f32; LANES], a: &[f32], b: &[f32]) -> f32 {
    let mut s = acc.iter().sum::<f32>();
    for (x, y) in a.iter().zip(b) {
        s += x * y;
    }
    s
}

pub(crate) fn rnn(r: &mut HostRun, s: &RnnSpec, inputs: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let op = "rnn";
    let opt = |i: usize| inputs.get(i).and_then(Option::as_ref);
    let host = |r: &HostRun, t: &Tensor| r.d.to_host(t)?.to_f32_vec();
    let x_t = req(op, inputs, 0)?;
    // The input and the weights in place where they are F32 host tensors (no copy per call).
    let (x_h, w_h, r_h) = (
        r.d.to_host(x_t)?,
        r.d.to_host(req(op, inputs, 1)?)?,
        r.d.to_host(req(op, inputs, 2)?)?,
    );
    use cyb_ops::reference::floats;
    let (x, w, rr) = (floats(&x_h)?, floats(&w_h)?, floats(&r_h)?);
    let xd = x_t.dims();
    if xd.len() != 3 {
        return Err(Error::invalid(op, format!("input {xd:?} is not 3-D")));
    }
    let (seq, batch, inp) = if s.batch_first {
        (xd[1], xd[0], xd[2])
    } else {
        (xd[0], xd[1], xd[2])
    };
    let h = s.hidden;
    let gates = match s.cell {
        RnnCell::Rnn => 1,
        RnnCell::Gru { .. } => 3,
        RnnCell::Lstm { .. } => 4,
    };
    let nd = if s.direction == 0 { 2 } else { 1 };
    let per_dir = match s.cell {
        RnnCell::Rnn => 1,
        RnnCell::Gru { .. } => 2,
        RnnCell::Lstm { .. } => 3,
    };
    if w.len() != nd * gates * h * inp
        || rr.len() != nd * gates * h * h
        || s.activations.len() != nd * per_dir
    {
        return Err(Error::invalid(
            op,
            "W, R or activations do not match hidden_size and direction",
        ));
    }
    let bias = match opt(3) {
        Some(t) => host(r, t)?,
        None => vec![0.0; nd * 2 * gates * h],
    };
    let lens: Vec<usize> = match opt(4) {
        Some(t) => {
            r.d.to_host(t)?
                .to_i64_vec()?
                .iter()
                .map(|&l| l.clamp(0, seq as i64) as usize)
                .collect()
        }
        None => vec![seq; batch],
    };
    let init = |r: &HostRun, i: usize| -> Result<Vec<f32>> {
        match opt(i) {
            Some(t) => {
                let v = host(r, t)?;
                // [nd, batch, h], or [batch, nd, h] when batch-first: bring to [nd, batch, h].
                Ok(if s.batch_first {
                    (0..nd * batch * h)
                        .map(|k| v[((k / h) % batch * nd + k / (batch * h)) * h + k % h])
                        .collect()
                } else {
                    v
                })
            }
            None => Ok(vec![0.0; nd * batch * h]),
        }
    };
    let (h0, c0) = (init(r, 5)?, init(r, 6)?);
    let peep = match opt(7) {
        Some(t) => host(r, t)?,
        None => vec![0.0; nd * 3 * h],
    };
    if bias.len() != nd * 2 * gates * h
        || lens.len() != batch
        || peep.len() != nd * 3 * h
        || h0.len() != nd * batch * h
    {
        return Err(Error::invalid(
            op,
            "B, sequence_lens, P or initial states have wrong sizes",
        ));
    }
    let mut y = filled_vec("rnn", &[seq, nd, batch, h], 0f32)?;
    let (mut yh, mut yc) = (vec![0f32; nd * batch * h], vec![0f32; nd * batch * h]);
    let clip = |v: f32| s.clip.map_or(v, |c| v.clamp(-c, c));
    for d in 0..nd {
        let reverse = s.direction == -1 || d == 1;
        let (wd, rd) = (
            &w[d * gates * h * inp..(d + 1) * gates * h * inp],
            &rr[d * gates * h * h..(d + 1) * gates * h * h],
        );
        let (wb, rb) = (
            &bias[d * 2 * gates * h..d * 2 * gates * h + gates * h],
            &bias[d * 2 * gates * h + gates * h..(d + 1) * 2 * gates * h],
        );
        let p = &peep[d * 3 * h..(d + 1) * 3 * h];
        let acts = s.activations[d * per_dir..(d + 1) * per_dir]
            .iter()
            .map(Act::resolve)
            .collect::<Result<Vec<_>>>()?;
        for b in 0..batch {
            let mut hs = h0[(d * batch + b) * h..(d * batch + b + 1) * h].to_vec();
            let mut cs = c0[(d * batch + b) * h..(d * batch + b + 1) * h].to_vec();
            for step in 0..lens[b] {
                let t = if reverse { lens[b] - 1 - step } else { step };
                let xo = if s.batch_first {
                    (b * seq + t) * inp
                } else {
                    (t * batch + b) * inp
                };
                let xt = &x[xo..xo + inp];
                let mut xw = wb.to_vec();
                matvec(wd, 0, gates * h, inp, xt, &mut xw);
                let mut hr = rb.to_vec();
                matvec(rd, 0, gates * h, h, &hs, &mut hr);
                match s.cell {
                    RnnCell::Rnn => {
                        for k in 0..h {
                            hs[k] = acts[0].apply(clip(xw[k] + hr[k]));
                        }
                    }
                    RnnCell::Gru {
                        linear_before_reset,
                    } => {
                        let mut z = vec![0f32; h];
                        let mut rg = vec![0f32; h];
                        for k in 0..h {
                            z[k] = acts[0].apply(clip(xw[k] + hr[k]));
                            rg[k] = acts[0].apply(clip(xw[h + k] + hr[h + k]));
                        }
                        let cand: Vec<f32> = if linear_before_reset {
                            (0..h)
                                .map(|k| xw[2 * h + k] + rg[k] * hr[2 * h + k])
                                .collect()
                        } else {
                            let rh: Vec<f32> = (0..h).map(|k| rg[k] * hs[k]).collect();
                            let mut v = vec![0f32; h];
                            matvec(rd, 2 * h, h, h, &rh, &mut v);
                            (0..h)
                                .map(|k| xw[2 * h + k] + v[k] + rb[2 * h + k])
                                .collect()
                        };
                        for k in 0..h {
                            let hh = acts[1].apply(clip(cand[k]));
                            hs[k] = (1.0 - z[k]) * hh + z[k] * hs[k];
                        }
                    }
                    RnnCell::Lstm { input_forget } => {
                        for k in 0..h {
                            let g = |i: usize| xw[i * h + k] + hr[i * h + k];
                            let i_g = acts[0].apply(clip(g(0) + p[k] * cs[k]));
                            let f_g = if input_forget {
                                1.0 - i_g
                            } else {
                                acts[0].apply(clip(g(2) + p[2 * h + k] * cs[k]))
                            };
                            let c_g = acts[1].apply(clip(g(3)));
                            cs[k] = f_g * cs[k] + i_g * c_g;
                            let o_g = acts[0].apply(clip(g(1) + p[h + k] * cs[k]));
                            hs[k] = o_g * acts[2].apply(cs[k]);
                        }
                    }
                }
                let yo = if s.batch_first {
                    ((b * seq + t) * nd + d) * h
                } else {
                    ((t * nd + d) * batch + b) * h
                };
                y[yo..yo + h].copy_from_slice(&hs);
            }
            let so = if s.batch_first {
                (b * nd + d) * h
            } else {
                (d * batch + b) * h
            };
            yh[so..so + h].copy_from_slice(&hs);
            yc[so..so + h].copy_from_slice(&cs);
        }
    }
    let dt = x_t.dtype();
    let ydims = if s.batch_first {
        [batch, seq, nd, h]
    } else {
        [seq, nd, batch, h]
    };
    let sdims = if s.batch_first {
        [batch, nd, h]
    } else {
        [nd, batch, h]
    };
    let mut out = vec![
        cast_to(r, Tensor::from_f32(&ydims, &y)?, dt)?,
        cast_to(r, Tensor::from_f32(&sdims, &yh)?, dt)?,
    ];
    if matches!(s.cell, RnnCell::Lstm { .. }) {
        out.push(cast_to(r, Tensor::from_f32(&sdims, &yc)?, dt)?);
    }
    Ok(out)
}

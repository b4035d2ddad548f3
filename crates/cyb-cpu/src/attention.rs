//! Fused scaled dot-product attention: scores, softcap, additive mask, causal and
//! sliding-window masking, softmax and the weighted sum of values in one pass per query row,
//! with query rows (batch × heads × positions) split across the pool. Grouped-query heads read
//! their shared KV head in place. ALiBi falls back to the reference.
//!
//! When many query rows share a KV head (prefill, encoders) each thread copies that head's
//! keys once into blocks of `KB` keys × `d` (key index fastest), so a row's scores are
//! `KB`-wide multiply-adds held in registers instead of one horizontal dot product per key;
//! decode rows (few per head) take dot products on the keys in place.

use crate::math::exp;
use crate::par::{f32_tensor, wide, Par};
use crate::pool::{split, DisjointOut};
use crate::KernelSet;
use cyb_ops::Op;
use cyb_tensor::{AlignedBuf, DType, Error, Result, Tensor, TensorInfo};

/// Keys per block of the transposed layout (eight AVX-512 registers of scores).
const KB: usize = 128;
/// Output values per register block of the weighted sum.
const VB: usize = 32;
/// Query rows per KV head from which transposing the keys pays.
const TRANSPOSE_MIN_ROWS: usize = 16;
const LANES: usize = 16;

pub(crate) fn supports(op: &Op, inputs: &[TensorInfo]) -> bool {
    let Op::Sdpa { alibi_max_bias, .. } = op else {
        return false;
    };
    if alibi_max_bias.is_some()
        || !(3..=4).contains(&inputs.len())
        || inputs.iter().any(|i| i.dtype != DType::F32)
    {
        return false;
    }
    match inputs.get(3) {
        Some(m) => mask_strides(m.shape.dims(), &score_dims(inputs)).is_some(),
        None => true,
    }
}

/// `[.., hq, lq, lk]`: the scores the mask is added to.
fn score_dims(inputs: &[TensorInfo]) -> Vec<usize> {
    let (qd, kd) = (inputs[0].shape.dims(), inputs[1].shape.dims());
    let mut dims = qd[..qd.len().saturating_sub(1)].to_vec();
    dims.push(kd.get(kd.len().wrapping_sub(2)).copied().unwrap_or(0));
    dims
}

/// Element strides of a mask of `mask` dims broadcast (right-aligned) onto `scores`, 0 along
/// broadcast axes; `None` when it does not broadcast.
fn mask_strides(mask: &[usize], scores: &[usize]) -> Option<Vec<usize>> {
    if mask.len() > scores.len() {
        return None;
    }
    let lead = scores.len() - mask.len();
    let mut strides = vec![0usize; scores.len()];
    let mut step = 1usize;
    for i in (0..mask.len()).rev() {
        let (m, s) = (mask[i], scores[lead + i]);
        if m == s {
            strides[lead + i] = if m == 1 { 0 } else { step };
        } else if m != 1 {
            return None;
        }
        step *= m;
    }
    Some(strides)
}

/// Σ a·b in `LANES` partial sums.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    for ((s, x), y) in acc.iter_mut().zip(ar).zip(br) {
        *s += x * y;
    }
    fold_lanes(acc, |a, b| a + b)
}

#[inline(always)]
fn fold_lanes(mut acc: [f32; LANES], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            acc[l] = f(acc[l], acc[l + width]);
        }
    }
    acc[0]
}

/// Copies `lk` keys of width `d` into blocks of `KB` keys, key index fastest, zero-padded.
#[inline(always)]
fn transpose_keys(k: &[f32], lk: usize, d: usize, kt: &mut Vec<f32>) {
    let blocks = lk.div_ceil(KB);
    kt.clear();
    kt.resize(blocks * d * KB, 0.0);
    for (j, key) in k.chunks_exact(d).take(lk).enumerate() {
        let base = (j / KB) * d * KB + j % KB;
        for (c, &x) in key.iter().enumerate() {
            kt[base + c * KB] = x;
        }
    }
}

/// `a·b + c`, fused when `F` (one rounding instead of two).
#[inline(always)]
fn madd<const F: bool>(a: f32, b: f32, c: f32) -> f32 {
    if F {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// Raw scores `q·k_j` of keys `lo..hi` from the blocked keys (`KB` independent sums).
#[inline(always)]
fn scores_blocked<const F: bool>(
    q: &[f32],
    kt: &[f32],
    d: usize,
    (lo, hi): (usize, usize),
    scores: &mut [f32],
) {
    for jb in lo / KB..hi.div_ceil(KB) {
        let mut acc = [0f32; KB];
        let block = &kt[jb * d * KB..(jb + 1) * d * KB];
        for (&qc, kc) in q.iter().zip(block.chunks_exact(KB)) {
            for l in 0..KB {
                acc[l] = madd::<F>(qc, kc[l], acc[l]);
            }
        }
        let dst = &mut scores[jb * KB..];
        let n = dst.len().min(KB);
        dst[..n].copy_from_slice(&acc[..n]);
    }
}

/// `y = Σ_j p_j v_j` over `lo..hi`, a register block of `W` outputs at `off`, the keys dealt
/// round-robin to four partial sums (`4 × W` independent additions). Keys weighted 0
/// (excluded) are skipped, so a non-finite value there cannot leak in.
#[inline(always)]
fn weighted<const F: bool, const W: usize>(
    y: &mut [f32],
    p: &[f32],
    v: &[f32],
    dv: usize,
    off: usize,
    (lo, hi): (usize, usize),
) {
    #[inline(always)]
    fn add<const F: bool, const W: usize>(a: &mut [f32; W], pj: f32, vr: &[f32]) {
        if pj != 0.0 {
            let vr = &vr[..W];
            for l in 0..W {
                a[l] = madd::<F>(pj, vr[l], a[l]);
            }
        }
    }
    let (mut a0, mut a1, mut a2, mut a3) = ([0f32; W], [0f32; W], [0f32; W], [0f32; W]);
    let row = |j: usize| &v[j * dv + off..];
    let mut j = lo;
    while j + 4 <= hi {
        add::<F, W>(&mut a0, p[j], row(j));
        add::<F, W>(&mut a1, p[j + 1], row(j + 1));
        add::<F, W>(&mut a2, p[j + 2], row(j + 2));
        add::<F, W>(&mut a3, p[j + 3], row(j + 3));
        j += 4;
    }
    for (a, jj) in [&mut a0, &mut a1, &mut a2].into_iter().zip(j..hi) {
        add::<F, W>(a, p[jj], row(jj));
    }
    for l in 0..W {
        y[off + l] = (a0[l] + a1[l]) + (a2[l] + a3[l]);
    }
}

/// [`weighted`] over all `dv` outputs: register blocks of `VB`, then 8, then 1.
#[inline(always)]
fn weighted_row<const F: bool>(y: &mut [f32], p: &[f32], v: &[f32], span: (usize, usize)) {
    let dv = y.len();
    let mut off = 0;
    while off + VB <= dv {
        weighted::<F, VB>(y, p, v, dv, off, span);
        off += VB;
    }
    while off + 8 <= dv {
        weighted::<F, 8>(y, p, v, dv, off, span);
        off += 8;
    }
    while off < dv {
        weighted::<F, 1>(y, p, v, dv, off, span);
        off += 1;
    }
}

/// Where query row `row` reads: its KV head and the visible keys `[lo, hi)`.
struct Geometry {
    lq: usize,
    hq: usize,
    hkv: usize,
    lk: usize,
    group: usize,
    causal: bool,
    sliding_window: Option<usize>,
}

impl Geometry {
    #[inline(always)]
    fn visible(&self, row: usize) -> (usize, usize, usize) {
        let i = row % self.lq;
        let h = (row / self.lq) % self.hq;
        let batch = row / (self.lq * self.hq);
        let kv = batch * self.hkv + h / self.group;
        let lk = self.lk as i64;
        let pos = lk - self.lq as i64 + i as i64;
        let hi = if self.causal {
            (pos + 1).clamp(0, lk) as usize
        } else {
            self.lk
        };
        let lo = match self.sliding_window {
            Some(w) => (pos - w as i64 + 1).clamp(0, lk) as usize,
            None => 0,
        };
        (kv, lo, hi)
    }
}

struct Params<'a> {
    scale: f32,
    softcap: Option<f32>,
    mask: Option<(&'a [f32], Vec<usize>)>,
    /// `[.., hq, lq]`: the dims of query rows.
    row_dims: Vec<usize>,
}

impl Params<'_> {
    /// The mask values of query row `row` and their stride along the keys.
    fn mask_row(&self, row: usize) -> Option<(&[f32], usize)> {
        let (m, strides) = self.mask.as_ref()?;
        let mut rest = row;
        let mut off = 0usize;
        for (ax, &n) in self.row_dims.iter().enumerate().rev() {
            off += (rest % n.max(1)) * strides[ax];
            rest /= n.max(1);
        }
        Some((&m[off..], strides[self.row_dims.len()]))
    }
}

/// Softmax weights of keys `lo..hi` in place (raw scores in, `p_j` out, 0 for excluded keys);
/// false when every key is excluded.
#[inline(always)]
fn softmax(p: &Params<'_>, mask: Option<(&[f32], usize)>, s: &mut [f32]) -> bool {
    for x in s.iter_mut() {
        *x *= p.scale;
    }
    if let Some(c) = p.softcap {
        for x in s.iter_mut() {
            *x = c * (*x / c).tanh();
        }
    }
    match mask {
        Some((m, 1)) => {
            for (x, &mv) in s.iter_mut().zip(m) {
                *x += mv;
            }
        }
        Some((m, _)) => {
            let mv = m[0];
            for x in s.iter_mut() {
                *x += mv;
            }
        }
        None => {}
    }
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = s.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            lanes[l] = if c[l] > lanes[l] { c[l] } else { lanes[l] };
        }
    }
    for (a, &x) in lanes.iter_mut().zip(rest) {
        *a = if x > *a { x } else { *a };
    }
    let max = fold_lanes(lanes, |a, b| if b > a { b } else { a });
    if max == f32::NEG_INFINITY {
        return false;
    }
    let mut sums = [0f32; LANES];
    let mut chunks = s.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            c[l] = exp(c[l] - max);
            sums[l] += c[l];
        }
    }
    for (a, x) in sums.iter_mut().zip(chunks.into_remainder()) {
        *x = exp(*x - max);
        *a += *x;
    }
    let sum = fold_lanes(sums, |a, b| a + b);
    // One division: a multiply per weight rounds differently from `e / sum` by at most 1 ulp.
    let inv = 1.0 / sum;
    for x in s.iter_mut() {
        *x *= inv;
    }
    true
}

pub(crate) fn sdpa(op: &Op, par: Par<'_>, inputs: &[Tensor]) -> Result<Tensor> {
    let Op::Sdpa {
        scale,
        causal,
        sliding_window,
        softcap,
        ..
    } = *op
    else {
        return Err(Error::invalid("sdpa", "not an sdpa op"));
    };
    let (q, k, v) = (
        inputs[0].as_f32()?,
        inputs[1].as_f32()?,
        inputs[2].as_f32()?,
    );
    let mask_data = inputs.get(3).map(Tensor::as_f32).transpose()?;
    let infos: Vec<TensorInfo> = inputs.iter().map(Tensor::info).collect();
    let sdims = score_dims(&infos);
    let mask = match (&mask_data, inputs.get(3)) {
        (Some(m), Some(t)) => {
            let strides = mask_strides(t.dims(), &sdims)
                .ok_or_else(|| Error::invalid("sdpa", "the mask does not broadcast"))?;
            Some((&**m, strides))
        }
        _ => None,
    };
    let (qd, kd, vd) = (inputs[0].dims(), inputs[1].dims(), inputs[2].dims());
    let r = qd.len();
    let (hq, lq, d) = (qd[r - 3], qd[r - 2], qd[r - 1]);
    let (hkv, lk, dv) = (kd[r - 3], kd[r - 2], vd[r - 1]);
    let group = (hq / hkv.max(1)).max(1);
    let rows = q.len().checked_div(d).unwrap_or(0);
    let mut dims = qd.to_vec();
    dims[r - 1] = dv;
    let p = Params {
        scale,
        softcap,
        mask,
        row_dims: qd[..r - 1].to_vec(),
    };
    let mut buf = AlignedBuf::for_overwrite(rows * dv * 4);
    if rows > 0 && dv > 0 && d > 0 {
        let y: &mut [f32] = bytemuck::cast_slice_mut(buf.as_bytes_mut());
        let out = DisjointOut::new(y);
        let threads = par.pool.threads().min(rows);
        let transpose = lq * group >= TRANSPOSE_MIN_ROWS;
        // Fused multiply-adds where the kernel set has them (the portable build would call
        // libm's software fma); each set stays deterministic across thread counts.
        let fma = par.set != KernelSet::Portable && par.set.is_available();
        let (q, k, v, p) = (&*q, &*k, &*v, &p);
        let g = &Geometry {
            lq,
            hq,
            hkv,
            lk,
            group,
            causal,
            sliding_window,
        };
        let set = par.set;
        let job = |t: usize| {
            if t >= threads {
                return;
            }
            let range = split(rows, threads, t);
            // SAFETY: output rows `range` belong to this thread only.
            let y = unsafe { out.slice(range.start * dv..range.end * dv) };
            wide(
                set,
                #[inline(always)]
                || {
                    let mut scores = vec![0f32; lk.div_ceil(KB) * KB];
                    let mut kt = Vec::new();
                    let mut kt_head = usize::MAX;
                    for (row, y_row) in range.zip(y.chunks_exact_mut(dv)) {
                        let (kv, lo, hi) = g.visible(row);
                        if lo >= hi {
                            y_row.fill(0.0);
                            continue;
                        }
                        let q_row = &q[row * d..(row + 1) * d];
                        let keys = &k[kv * lk * d..(kv + 1) * lk * d];
                        if transpose {
                            if kt_head != kv {
                                transpose_keys(keys, lk, d, &mut kt);
                                kt_head = kv;
                            }
                            if fma {
                                scores_blocked::<true>(q_row, &kt, d, (lo, hi), &mut scores);
                            } else {
                                scores_blocked::<false>(q_row, &kt, d, (lo, hi), &mut scores);
                            }
                        } else {
                            for (s, key) in scores[lo..hi]
                                .iter_mut()
                                .zip(keys[lo * d..].chunks_exact(d))
                            {
                                *s = dot(q_row, key);
                            }
                        }
                        let mask_row =
                            p.mask_row(row).map(
                                |(m, st)| {
                                    if st == 1 {
                                        (&m[lo..], 1)
                                    } else {
                                        (m, st)
                                    }
                                },
                            );
                        if !softmax(p, mask_row, &mut scores[lo..hi]) {
                            y_row.fill(0.0);
                            continue;
                        }
                        let vals = &v[kv * lk * dv..(kv + 1) * lk * dv];
                        if fma {
                            weighted_row::<true>(y_row, &scores, vals, (lo, hi));
                        } else {
                            weighted_row::<false>(y_row, &scores, vals, (lo, hi));
                        }
                    }
                },
            );
        };
        if threads == 1 {
            job(0);
        } else {
            par.pool.run(&job);
        }
    }
    f32_tensor(&dims, buf)
}

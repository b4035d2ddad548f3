//! Fused scaled dot-product attention: scores, softcap, additive mask, causal and
//! sliding-window masking, softmax and the weighted sum of values, with query rows (batch ×
//! heads × positions) split across the pool. Grouped-query heads read their shared KV head in
//! place. ALiBi falls back to the reference.
//!
//! When many query rows share a KV head (prefill, encoders) each thread copies that head's
//! keys once into blocks of `KB` keys × `d` (key index fastest) and takes consecutive rows of
//! the head as a group: with AVX-512 a group of up to 12 rows is two small GEMMs on the packed
//! GEMM's register tile (scores against each block of 32 keys, then the weights against the
//! values packed into 32-column panels), elsewhere up to 4 rows share each key and value load.
//! Every score is one running sum over `d` and every output one over the keys in order, so a
//! row's result does not depend on its group (nor on the thread count).
//!
//! Decode rows (few per KV head) read the keys and values in place, in either layout (a KV
//! cache hands attention its token-major prefix without copying it): a head's keys are taken
//! in fixed chunks spread over the threads, each chunk read once for all of the head's query
//! rows, and each row's chunks merged in key order (`decode_rows`).

#[cfg(target_arch = "x86_64")]
mod avx512;

use crate::features::KernelSet;
use crate::math::exp;
use crate::par::pool::{split, DisjointOut};
use crate::par::{f32_tensor, wide, Par};
#[cfg(target_arch = "x86_64")]
use avx512::{scores16_rows_avx512, weighted_avx512};
use cyb_ops::{Op, SdpaLayout};
use cyb_tensor::{AlignedBuf, DType, Error, Result, Tensor, TensorInfo};

/// Keys per block of the transposed layout: a panel of the packed GEMM's tile (`sgemm::tile::NR`).
const KB: usize = 32;
/// Output values per register block of the weighted sum.
const VB: usize = 32;
/// Query rows per KV head from which transposing the keys pays.
const TRANSPOSE_MIN_ROWS: usize = 16;
const LANES: usize = 16;

/// Whether [`sdpa`] takes `op` on `inputs`: f32 throughout, or (with AVX-512, whose decode
/// kernels widen them as they read) keys and values both in f16.
pub(crate) fn supports(set: KernelSet, op: &Op, inputs: &[TensorInfo]) -> bool {
    let Op::Sdpa {
        alibi_max_bias,
        layout,
        ..
    } = op
    else {
        return false;
    };
    let half_kv = set == KernelSet::Avx512
        && set.is_available()
        && inputs.len() >= 3
        && inputs[1].dtype == DType::F16
        && inputs[2].dtype == DType::F16;
    if alibi_max_bias.is_some()
        || !(3..=4).contains(&inputs.len())
        || inputs
            .iter()
            .enumerate()
            .any(|(i, t)| t.dtype != DType::F32 && !(half_kv && (i == 1 || i == 2)))
    {
        return false;
    }
    match (inputs.get(3), score_dims(*layout, inputs)) {
        (Some(m), Some(scores)) => mask_strides(m.shape.dims(), &scores).is_some(),
        (Some(_), None) => false,
        (None, _) => true,
    }
}

/// `[.., hq, lq, lk]`: the scores the mask is added to (`None` below rank 3).
fn score_dims(layout: SdpaLayout, inputs: &[TensorInfo]) -> Option<Vec<usize>> {
    let (qd, kd) = (inputs[0].shape.dims(), inputs[1].shape.dims());
    let r = qd.len();
    let (h, l) = match layout {
        SdpaLayout::HeadMajor => (r.checked_sub(3)?, r - 2),
        SdpaLayout::TokenMajor => (r.checked_sub(2)?, r - 3),
    };
    let mut dims = qd[..r - 3].to_vec();
    dims.extend([qd[h], qd[l], *kd.get(l)?]);
    Some(dims)
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

/// What the decode path reads keys and values as, in place: f32, or the bits of f16 values (a
/// half-precision cache), widened to f32 as they are read.
pub(crate) trait KvElem: bytemuck::Pod + Send + Sync {
    /// Half precision: the AVX-512 kernels widen 16 lanes with `vcvtph2ps`.
    const HALF: bool;
    /// `x` as f32: itself, or widened into `buf`.
    fn row<'a>(x: &'a [Self], buf: &'a mut Vec<f32>) -> &'a [f32];
}

impl KvElem for f32 {
    const HALF: bool = false;
    #[inline(always)]
    fn row<'a>(x: &'a [f32], _: &'a mut Vec<f32>) -> &'a [f32] {
        x
    }
}

impl KvElem for u16 {
    const HALF: bool = true;
    #[inline(always)]
    fn row<'a>(x: &'a [u16], buf: &'a mut Vec<f32>) -> &'a [f32] {
        buf.clear();
        buf.extend(x.iter().map(|&b| half::f16::from_bits(b).to_f32()));
        buf
    }
}

/// The `LANES` partial sums of `Σ a·b` over whole chunks of `LANES` (the caller folds them).
#[inline(always)]
fn dot_lanes<const F: bool>(a: &[f32], b: &[f32]) -> [f32; LANES] {
    let mut acc = [0f32; LANES];
    for (x, y) in a.chunks_exact(LANES).zip(b.chunks_exact(LANES)) {
        let (x, y) = (*lanes(x), *lanes(y));
        for l in 0..LANES {
            acc[l] = madd::<F>(x[l], y[l], acc[l]);
        }
    }
    acc
}

/// A `LANES`-long chunk as an array (`chunks_exact` hands out exactly that length).
#[inline(always)]
fn lanes(x: &[f32]) -> &[f32; LANES] {
    x.try_into().expect("a chunk of LANES values")
}

/// `acc += w · x` over `acc.len()` values (`x` at least as long): `LANES` at a time.
#[inline(always)]
fn axpy<const F: bool>(acc: &mut [f32], w: f32, x: &[f32]) {
    let x = &x[..acc.len()];
    let mut ac = acc.chunks_exact_mut(LANES);
    let mut xc = x.chunks_exact(LANES);
    for (a, x) in (&mut ac).zip(&mut xc) {
        // Loaded into locals before the store: the compiler cannot tell the two slices apart,
        // and would otherwise keep the lanes' order scalar.
        let a: &mut [f32; LANES] = a.try_into().expect("a chunk of LANES values");
        let (x, mut s) = (*lanes(x), *a);
        for l in 0..LANES {
            s[l] = madd::<F>(w, x[l], s[l]);
        }
        *a = s;
    }
    for (a, &x) in ac.into_remainder().iter_mut().zip(xc.remainder()) {
        *a = madd::<F>(w, x, *a);
    }
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
fn transpose_keys(k: &[f32], lk: usize, d: usize, ld: usize, kt: &mut Vec<f32>) {
    let blocks = lk.div_ceil(KB);
    kt.clear();
    kt.resize(blocks * d * KB, 0.0);
    for (b, block) in kt.chunks_exact_mut(d * KB).enumerate() {
        for j in 0..KB.min(lk - b * KB) {
            let key = &k[(b * KB + j) * ld..][..d];
            for (c, &x) in key.iter().enumerate() {
                block[c * KB + j] = x;
            }
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

/// Raw scores `q_r·k_j` of `R` query rows (`qs`, `d` apart) for keys `lo..hi` from the
/// blocked keys, row `r`'s into `scores[r * stride..]` at the key index. Each score is one
/// running sum over `d` in order, so a row's scores do not depend on `R`; the `R` rows share
/// every key load (`R × KB` sums in registers).
#[inline(always)]
fn scores_rows<const F: bool, const R: usize>(
    qs: &[f32],
    kt: &[f32],
    d: usize,
    (lo, hi): (usize, usize),
    scores: &mut [f32],
    stride: usize,
) {
    for jb in lo / KB..hi.div_ceil(KB) {
        let keys = &kt[jb * d * KB..(jb + 1) * d * KB];
        let mut acc = [[0f32; KB]; R];
        for (c, kc) in keys.chunks_exact(KB).enumerate() {
            for r in 0..R {
                let qc = qs[r * d + c];
                for l in 0..KB {
                    acc[r][l] = madd::<F>(qc, kc[l], acc[r][l]);
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            scores[r * stride + jb * KB..][..KB].copy_from_slice(a);
        }
    }
}

/// `y_r = Σ_j p_rj v_j` over `lo..hi` for `R` rows (`y` rows `dv` apart, weights `stride`
/// apart, value rows `vs` apart), a register block of `W` outputs at `off`: one running sum
/// per output in key order, so a row's result does not depend on `R`. Keys weighted 0
/// (excluded) are skipped, so a non-finite value there cannot leak in.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn weighted_rows<const F: bool, const R: usize, const W: usize>(
    y: &mut [f32],
    p: &[f32],
    stride: usize,
    (v, vs): (&[f32], usize),
    dv: usize,
    off: usize,
    (lo, hi): (usize, usize),
) {
    let mut acc = [[0f32; W]; R];
    for j in lo..hi {
        let vr = &v[j * vs + off..][..W];
        for r in 0..R {
            let pj = p[r * stride + j];
            if pj != 0.0 {
                for l in 0..W {
                    acc[r][l] = madd::<F>(pj, vr[l], acc[r][l]);
                }
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        y[r * dv + off..][..W].copy_from_slice(a);
    }
}

/// [`weighted_rows`] over all `dv` outputs: register blocks of `VB`, then 8, then 1.
#[inline(always)]
fn weighted_group<const F: bool, const R: usize>(
    y: &mut [f32],
    p: &[f32],
    stride: usize,
    v: (&[f32], usize),
    span: (usize, usize),
) {
    let dv = y.len() / R;
    let mut off = 0;
    while off + VB <= dv {
        weighted_rows::<F, R, VB>(y, p, stride, v, dv, off, span);
        off += VB;
    }
    while off + 8 <= dv {
        weighted_rows::<F, R, 8>(y, p, stride, v, dv, off, span);
        off += 8;
    }
    while off < dv {
        weighted_rows::<F, R, 1>(y, p, stride, v, dv, off, span);
        off += 1;
    }
}

/// Query rows per group of the transposed path (they share each key and value load).
const GROUP: usize = 4;

/// [`scores_rows`] for `n ≤ GROUP` rows.
#[inline(always)]
fn group_scores<const F: bool>(
    n: usize,
    qs: &[f32],
    kt: &[f32],
    d: usize,
    span: (usize, usize),
    scores: &mut [f32],
    stride: usize,
) {
    match n {
        1 => scores_rows::<F, 1>(qs, kt, d, span, scores, stride),
        2 => scores_rows::<F, 2>(qs, kt, d, span, scores, stride),
        3 => scores_rows::<F, 3>(qs, kt, d, span, scores, stride),
        _ => scores_rows::<F, GROUP>(qs, kt, d, span, scores, stride),
    }
}

/// [`weighted_group`] for `n ≤ GROUP` rows.
#[inline(always)]
fn group_weighted<const F: bool>(
    n: usize,
    y: &mut [f32],
    p: &[f32],
    stride: usize,
    v: (&[f32], usize),
    span: (usize, usize),
) {
    match n {
        1 => weighted_group::<F, 1>(y, p, stride, v, span),
        2 => weighted_group::<F, 2>(y, p, stride, v, span),
        3 => weighted_group::<F, 3>(y, p, stride, v, span),
        _ => weighted_group::<F, GROUP>(y, p, stride, v, span),
    }
}

/// Query rows per group on the packed GEMM's tile.
const TILE_GROUP: usize = crate::matmul::sgemm::tile::MR;

/// One KV head as a thread's groups read it: keys in blocks of `KB` (key index fastest) and,
/// for the GEMM tile, values in panels of `NR` columns (`[dv / NR][lk][NR]`, zero-padded).
#[derive(Default)]
struct Head {
    kv: Option<usize>,
    kt: Vec<f32>,
    vp: Vec<f32>,
    /// Whether every value is finite: the tile multiplies excluded keys' values by 0 instead
    /// of skipping them, which is exact only then.
    finite: bool,
}

impl Head {
    /// Loads `lk` keys of `d` and values of `dv` from `keys` and `vals`, rows `heads` times
    /// their width apart (1 when contiguous, more when the heads of each position sit side
    /// by side), and packs the values into panels when `panels`.
    #[inline(always)]
    fn load(
        &mut self,
        (keys, vals, heads): (&[f32], &[f32], usize),
        lk: usize,
        d: usize,
        dv: usize,
        panels: bool,
    ) {
        transpose_keys(keys, lk, d, heads * d, &mut self.kt);
        self.finite = false;
        if !panels {
            return;
        }
        use crate::matmul::sgemm::tile::NR;
        self.vp.clear();
        self.vp.resize(dv.div_ceil(NR) * lk * NR, 0.0);
        let mut special = 0u32;
        for j in 0..lk {
            let row = &vals[j * heads * dv..][..dv];
            for (p, c0) in (0..dv).step_by(NR).enumerate() {
                let nc = NR.min(dv - c0);
                self.vp[(p * lk + j) * NR..][..nc].copy_from_slice(&row[c0..c0 + nc]);
            }
            // Exponent bits all set: infinite or NaN (a fold, not `all`, so it vectorizes).
            special = row.iter().fold(special, |acc, x| {
                acc | u32::from(x.to_bits() & 0x7f80_0000 == 0x7f80_0000)
            });
        }
        self.finite = special == 0;
    }
}

/// [`scores_rows`] on the GEMM tile: `n` query rows against each block of `KB` keys.
///
/// # Safety
/// `tile` must be the F32 tile of an available kernel set.
#[allow(clippy::too_many_arguments)]
unsafe fn tile_scores(
    tile: crate::matmul::sgemm::tile::Tile,
    n: usize,
    (qs, lda): (&[f32], usize),
    kt: &[f32],
    d: usize,
    (lo, hi): (usize, usize),
    scores: &mut [f32],
    stride: usize,
) {
    assert!(n <= TILE_GROUP && scores.len() >= (n - 1) * stride + hi.div_ceil(KB) * KB);
    for jb in lo / KB..hi.div_ceil(KB) {
        let panel = bytemuck::cast_slice(&kt[jb * d * KB..(jb + 1) * d * KB]);
        // SAFETY: per this fn's contract; the tile checks its inputs, and `scores` holds its
        // `n` rows of `KB` (asserted: `stride` is a multiple of `KB`).
        unsafe {
            tile(
                panel,
                qs,
                lda,
                d,
                n,
                scores[jb * KB..].as_mut_ptr(),
                stride,
                true,
                None,
            )
        };
    }
}

/// [`weighted_group`] on the GEMM tile: the weights of `n` rows (`stride` apart) over keys
/// `lo..hi` times each panel of values; `put(row, column, values)` stores the `dv` outputs of
/// each row a panel at a time. Each output is one running sum in key order, as in
/// [`weighted_rows`]; excluded keys add `0 · v`, exact for finite values.
///
/// # Safety
/// As [`tile_scores`].
#[allow(clippy::too_many_arguments)]
unsafe fn tile_weighted(
    tile: crate::matmul::sgemm::tile::Tile,
    n: usize,
    (dv, mut put): (usize, impl FnMut(usize, usize, &[f32])),
    p: &[f32],
    stride: usize,
    vp: &[f32],
    lk: usize,
    (lo, hi): (usize, usize),
) {
    use crate::matmul::sgemm::tile::NR;
    let mut res: crate::matmul::sgemm::tile::TileOut = [[0.0; NR]; TILE_GROUP];
    for c0 in (0..dv).step_by(NR) {
        let nc = NR.min(dv - c0);
        let panel = &vp[(c0 / NR) * lk * NR..][lo * NR..hi * NR];
        // SAFETY: per this fn's contract; the tile checks its bounds.
        unsafe {
            let out = res[0].as_mut_ptr();
            tile(
                bytemuck::cast_slice(panel),
                &p[lo..],
                stride,
                hi - lo,
                n,
                out,
                NR,
                true,
                None,
            );
        }
        for (r, a) in res.iter().enumerate().take(n) {
            put(r, c0, &a[..nc]);
        }
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
    /// Token-major inputs and output (`[.., l, h, d]`); rows are still taken head-major.
    tokens: bool,
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

    /// The row of `q` and of the output that head-major query row `row` is.
    #[inline(always)]
    fn q_at(&self, row: usize) -> usize {
        if !self.tokens {
            return row;
        }
        let i = row % self.lq;
        let h = (row / self.lq) % self.hq;
        let batch = row / (self.lq * self.hq);
        (batch * self.lq + i) * self.hq + h
    }

    /// The row of `k` and `v` holding key `j` of KV head `kv` (`batch · hkv + head`).
    #[inline(always)]
    fn k_at(&self, kv: usize, j: usize) -> usize {
        if !self.tokens {
            return kv * self.lk + j;
        }
        let (batch, h) = (kv / self.hkv, kv % self.hkv);
        (batch * self.lk + j) * self.hkv + h
    }

    /// Asks for the keys, values and query rows of KV head `kv` (when there is one) to be
    /// brought into L2 while the current head runs: token-major heads are short strided rows,
    /// which the hardware prefetchers do not follow as they follow a contiguous head.
    fn prefetch_head(
        &self,
        kv: usize,
        (q, k, v): (&[f32], &[f32], &[f32]),
        out: &DisjointOut<'_>,
        d: usize,
        dv: usize,
    ) {
        let row = |x: &[f32], at: usize, w: usize| {
            if let Some(r) = x.get(at * w..(at + 1) * w) {
                crate::matmul::sgemm::prefetch_l2(bytemuck::cast_slice(r), w * 4);
            }
        };
        for j in 0..self.lk {
            let at = self.k_at(kv, j);
            row(k, at, d);
            row(v, at, dv);
        }
        // Head-major query rows of `kv`'s query heads.
        let (batch, h) = (kv / self.hkv, kv % self.hkv);
        let first = (batch * self.hq + h * self.group) * self.lq;
        for r in first..first + self.group * self.lq {
            let at = self.q_at(r);
            row(q, at, d);
            out.prefetch_write(at * dv..(at + 1) * dv);
        }
    }
}

/// Copies rows `at(0), at(1), ..` of `width` values from `x` into `buf`, one after another.
#[inline(always)]
fn gather<'b>(
    buf: &'b mut Vec<f32>,
    x: &[f32],
    n: usize,
    width: usize,
    at: impl Fn(usize) -> usize,
) -> &'b [f32] {
    buf.clear();
    for r in 0..n {
        let s = at(r) * width;
        buf.extend_from_slice(&x[s..s + width]);
    }
    buf
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

/// The unnormalized softmax of keys `lo..hi` in place (raw scores in, `exp(x_j - max)` out, 0
/// for excluded keys) and its `(max, Σ)`; `None` when every key is excluded.
#[inline(always)]
fn softmax_partial(
    p: &Params<'_>,
    mask: Option<(&[f32], usize)>,
    s: &mut [f32],
) -> Option<(f32, f32)> {
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
        return None;
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
    Some((max, fold_lanes(sums, |a, b| a + b)))
}

/// Softmax weights of keys `lo..hi` in place (raw scores in, `p_j` out, 0 for excluded keys);
/// false when every key is excluded.
#[inline(always)]
fn softmax(p: &Params<'_>, mask: Option<(&[f32], usize)>, s: &mut [f32]) -> bool {
    let Some((_, sum)) = softmax_partial(p, mask, s) else {
        return false;
    };
    // One division: a multiply per weight rounds differently from `e / sum` by at most 1 ulp.
    let inv = 1.0 / sum;
    for x in s.iter_mut() {
        *x *= inv;
    }
    true
}

/// Keys per chunk of the decode path: a KV head's keys are taken a chunk at a time, the
/// chunks spread over the threads, and each row's chunks merged in key order, so results do
/// not depend on the thread count (one chunk: the plain softmax).
const CHUNK: usize = 256;

thread_local! {
    /// Scratch of the decode path, kept per thread between calls so that a decode step
    /// allocates nothing once they have grown: an item's scores and sums (every thread), the
    /// chunks' partial results (the calling thread).
    static ITEM_SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    static PART_SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `f` on `len` values of this thread's `cell` (grown when short; a fresh buffer if the cell
/// is in use). The values are whatever the last user left.
fn scratch<R>(
    cell: &'static std::thread::LocalKey<std::cell::RefCell<Vec<f32>>>,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> R,
) -> R {
    cell.with(|c| match c.try_borrow_mut() {
        Ok(mut b) => {
            if b.len() < len {
                b.resize(len, 0.0);
            }
            f(&mut b[..len])
        }
        Err(_) => f(&mut vec![0f32; len]),
    })
}

/// Attention of rows with few query rows per KV head (decode: `lq · group` below
/// [`TRANSPOSE_MIN_ROWS`]), keys and values read in place in either layout. Work items are
/// (chunk, KV head) pairs, chunk-major, split into contiguous ranges over the threads: with
/// token-major inputs a thread walks its part of the cache in address order. Each item reads
/// every key and value of its chunk once for all of the head's query rows. With more than
/// one chunk, an item leaves each row's `(max, Σ, Σ p·v)` over its keys, and the rows are
/// merged afterwards (`y = Σ_c e^(m_c - M) acc_c / Σ_c e^(m_c - M) l_c`, chunks in order).
#[inline(always)]
fn decode_rows<const F: bool, T: KvElem>(
    g: &Geometry,
    p: &Params<'_>,
    par: Par<'_>,
    (q, k, v): (&[f32], &[T], &[T]),
    (d, dv): (usize, usize),
    y: &mut [f32],
) {
    let n = g.group * g.lq;
    let rows = y.len() / dv;
    let heads = rows / n.max(1);
    let chunks = g.lk.div_ceil(CHUNK).max(1);
    let items = heads * chunks;
    // Per row and chunk: max, Σ, then dv sums.
    let width = dv + 2;
    let len = if chunks > 1 { rows * chunks * width } else { 0 };
    scratch(&PART_SCRATCH, len, |parts| {
        let threads = par.pool.threads().min(items).max(1);
        let avx512 =
            cfg!(target_arch = "x86_64") && par.set == KernelSet::Avx512 && par.set.is_available();
        {
            let (yout, pout) = (DisjointOut::new(y), DisjointOut::new(parts));
            let (yout, pout) = (&yout, &pout);
            let job = |t: usize| {
                if t >= threads {
                    return;
                }
                let range = split(items, threads, t);
                // The scratch first, then the widened body: a closure handed to `scratch`
                // (through `LocalKey::with`) is compiled on its own, without the wide features.
                scratch(&ITEM_SCRATCH, n * (CHUNK + dv), |buf| {
                    wide(
                        par.set,
                        #[inline(always)]
                        || {
                            let (sc, acc) = buf.split_at_mut(n * CHUNK);
                            for item in range {
                                let (c, kv) = (item / heads, item % heads);
                                let stats = decode_chunk::<F, _>(
                                    g,
                                    p,
                                    (q, k, v),
                                    (d, dv),
                                    (c, kv * n, n),
                                    (chunks == 1, avx512),
                                    sc,
                                    acc,
                                );
                                for (r, (a, st)) in
                                    acc.chunks_exact(dv).zip(stats).take(n).enumerate()
                                {
                                    let row = kv * n + r;
                                    if chunks == 1 {
                                        let at = g.q_at(row) * dv;
                                        // SAFETY: query row `row` belongs to this item only.
                                        let dst = unsafe { yout.slice(at..at + dv) };
                                        match st {
                                            Some(_) => dst.copy_from_slice(a),
                                            None => dst.fill(0.0),
                                        }
                                        continue;
                                    }
                                    let at = (row * chunks + c) * width;
                                    // SAFETY: row `row` of chunk `c` belongs to this item only.
                                    put_partial(unsafe { pout.slice(at..at + width) }, st, a);
                                }
                            }
                        },
                    );
                });
            };
            if threads == 1 {
                job(0);
            } else {
                par.pool.run(&job);
            }
        }
        if chunks == 1 {
            return;
        }
        for row in 0..rows {
            let dst = &mut y[g.q_at(row) * dv..][..dv];
            merge_chunks::<F>(&mut parts[row * chunks * width..][..chunks * width], dst);
        }
    })
}

/// One row's partial result of one chunk into `dst`: its max, Σ, then `acc` (`Σ p·v`); a
/// chunk with no visible key leaves `(-inf, 0, 0…)`.
#[inline(always)]
fn put_partial(dst: &mut [f32], stats: Option<(f32, f32)>, acc: &[f32]) {
    let (m, l) = stats.unwrap_or((f32::NEG_INFINITY, 0.0));
    dst[0] = m;
    dst[1] = l;
    dst[2..].copy_from_slice(acc);
}

/// One row's output from its chunks' `(max, Σ, Σ p·v)` (`parts`: `dst.len() + 2` values a
/// chunk, chunks in key order): `y = Σ_c e^(m_c - M) acc_c / Σ_c e^(m_c - M) l_c`; zeros when
/// no key is visible. A chunk with no visible key adds exact zeros.
#[inline(always)]
fn merge_chunks<const F: bool>(parts: &mut [f32], dst: &mut [f32]) {
    let width = dst.len() + 2;
    let top = parts
        .chunks_exact(width)
        .fold(f32::NEG_INFINITY, |m, pc| m.max(pc[0]));
    dst.fill(0.0);
    if top == f32::NEG_INFINITY {
        return;
    }
    // Each chunk's scale `e^(m_c - M)` (0 for a chunk with no visible key), once.
    let mut sum = 0f32;
    for pc in parts.chunks_exact_mut(width) {
        pc[0] = match pc[0] {
            f32::NEG_INFINITY => 0.0,
            m => exp(m - top),
        };
        sum += pc[0] * pc[1];
    }
    let inv = 1.0 / sum;
    for pc in parts.chunks_exact(width) {
        if pc[0] == 0.0 {
            continue;
        }
        let w = pc[0] * inv;
        for (o, &a) in dst.iter_mut().zip(&pc[2..]) {
            *o = madd::<F>(w, a, *o);
        }
    }
}

/// Attention whose every row is computed the same way whatever the other rows
/// (`CpuOptions::batch_invariant`): a query row's keys are taken in chunks of [`CHUNK`] at fixed
/// positions, each chunk's unnormalized softmax and weighted values merged in key order
/// ([`merge_chunks`]), even where there is one chunk, so a row's result depends only on its
/// query and the keys it sees, not on how many rows came with it (one decode token, a prompt
/// chunk, a whole prompt). Work items are groups of up to [`TRANSPOSE_MIN_ROWS`] rows of one KV
/// head, split over the threads.
#[inline(always)]
fn invariant_rows<const F: bool>(
    g: &Geometry,
    p: &Params<'_>,
    par: Par<'_>,
    (q, k, v): (&[f32], &[f32], &[f32]),
    (d, dv): (usize, usize),
    y: &mut [f32],
) {
    const R: usize = TRANSPOSE_MIN_ROWS;
    let n = g.group * g.lq;
    let rows = y.len() / dv;
    let heads = rows / n.max(1);
    let groups = n.div_ceil(R);
    let items = heads * groups;
    let chunks = g.lk.div_ceil(CHUNK).max(1);
    let width = dv + 2;
    let threads = par.pool.threads().min(items).max(1);
    let avx512 =
        cfg!(target_arch = "x86_64") && par.set == KernelSet::Avx512 && par.set.is_available();
    let yout = DisjointOut::new(y);
    let yout = &yout;
    let job = |t: usize| {
        if t >= threads {
            return;
        }
        let range = split(items, threads, t);
        // Scores, weighted values, then every chunk's partial result of the rows; the scratch
        // outside the widened body, as in `decode_rows`.
        let len = R * (CHUNK + dv) + R * chunks * width;
        scratch(&ITEM_SCRATCH, len, |buf| {
            wide(
                par.set,
                #[inline(always)]
                || {
                    let (sc, rest) = buf.split_at_mut(R * CHUNK);
                    let (acc, parts) = rest.split_at_mut(R * dv);
                    for item in range {
                        let (kv, gi) = (item / groups, item % groups);
                        let (row0, nr) = (kv * n + gi * R, (n - gi * R).min(R));
                        for c in 0..chunks {
                            let stats = decode_chunk::<F, _>(
                                g,
                                p,
                                (q, k, v),
                                (d, dv),
                                (c, row0, nr),
                                (false, avx512),
                                sc,
                                acc,
                            );
                            for (r, (a, st)) in acc.chunks_exact(dv).zip(stats).take(nr).enumerate()
                            {
                                put_partial(&mut parts[(r * chunks + c) * width..][..width], st, a);
                            }
                        }
                        for r in 0..nr {
                            let at = g.q_at(row0 + r) * dv;
                            // SAFETY: query row `row0 + r` belongs to this item only.
                            let dst = unsafe { yout.slice(at..at + dv) };
                            merge_chunks::<F>(
                                &mut parts[r * chunks * width..][..chunks * width],
                                dst,
                            );
                        }
                    }
                },
            );
        });
    };
    if threads == 1 {
        job(0);
    } else {
        par.pool.run(&job);
    }
}

/// One decode item: the `n` query rows from head-major row `row0` (rows of one KV head) against
/// the keys of chunk `c`. Leaves
/// each row's `Σ p·v` in `acc` (rows `dv` apart) and returns its `(max, Σ)` (`None`: no key
/// visible); with `whole` (the only chunk) the weights are normalized, so `acc` is the output.
/// With `avx512` the scores come from [`scores16_rows_avx512`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn decode_chunk<const F: bool, T: KvElem>(
    g: &Geometry,
    p: &Params<'_>,
    (q, k, v): (&[f32], &[T], &[T]),
    (d, dv): (usize, usize),
    (c, row0, n): (usize, usize, usize),
    (whole, avx512): (bool, bool),
    sc: &mut [f32],
    acc: &mut [f32],
) -> [Option<(f32, f32)>; TRANSPOSE_MIN_ROWS] {
    // Only x86-64 has the AVX-512 kernels.
    #[cfg(not(target_arch = "x86_64"))]
    let _ = avx512;
    let kv = row0 / (g.group * g.lq).max(1);
    let (c0, c1) = (c * CHUNK, ((c + 1) * CHUNK).min(g.lk));
    let mut stats = [None; TRANSPOSE_MIN_ROWS];
    // Each row's visible keys in the chunk, and their union.
    let mut spans = [(0, 0); TRANSPOSE_MIN_ROWS];
    let (mut lo, mut hi) = (c1, c0);
    for (r, span) in spans.iter_mut().enumerate().take(n) {
        let (_, l, h) = g.visible(row0 + r);
        let (l, h) = (l.max(c0), h.min(c1));
        if l < h {
            (lo, hi) = (lo.min(l), hi.max(h));
        }
        *span = (l, h);
    }
    acc[..n * dv].fill(0.0);
    if lo >= hi {
        return stats;
    }
    // Key `j` of the head is row `base + j · step` of `k` and `v`.
    let base = g.k_at(kv, 0);
    let step = if g.tokens { g.hkv } else { 1 };
    // Scores a block of `LANES` keys at a time: each key's lanes of partial sums first, then
    // their folds, in separate loops (a fold next to the products keeps the compiler from
    // widening them); the block's keys stay in L1 for all rows.
    let mut part = [[0f32; LANES]; LANES];
    let full = d / LANES * LANES;
    // Rows of one head are `step` rows apart in a token-major cache, a pattern the hardware
    // prefetchers follow poorly: the next block's keys and values are asked for ahead.
    let ahead = |x: &[T], j: usize, w: usize| {
        if j < hi {
            crate::matmul::sgemm::prefetch_l2(
                bytemuck::cast_slice(&x[(base + j * step) * w..][..w]),
                w * std::mem::size_of::<T>(),
            );
        }
    };
    // A key or value row widened to f32 off the AVX-512 path (unused for f32).
    let mut wide_row = Vec::new();
    // Where each row's query starts, for the AVX-512 scores of every block.
    let q_rows: [usize; TRANSPOSE_MIN_ROWS] =
        std::array::from_fn(|r| if r < n { g.q_at(row0 + r) * d } else { 0 });
    for j0 in (lo..hi).step_by(LANES) {
        let m = (hi - j0).min(LANES);
        for j in j0..j0 + m {
            ahead(k, j + 2 * LANES, d);
            // The values pass comes after the chunk's scores: its rows are in L2 by then.
            ahead(v, j, dv);
        }
        #[cfg(target_arch = "x86_64")]
        if avx512 {
            let keys = &k[(base + j0 * step) * d..][..((m - 1) * step + 1) * d];
            let out = &mut sc[j0 - c0..];
            // SAFETY: `avx512` says this CPU has AVX-512F; the kernel checks its bounds.
            unsafe { scores16_rows_avx512(q, &q_rows[..n], d, keys, step * d, m, out, CHUNK) };
            continue;
        }
        for r in 0..n {
            let qr = &q[g.q_at(row0 + r) * d..][..d];
            let out = &mut sc[r * CHUNK + j0 - c0..][..m];
            for (t, j) in part.iter_mut().zip(j0..j0 + m) {
                let key = T::row(&k[(base + j * step) * d..][..full], &mut wide_row);
                *t = dot_lanes::<F>(&qr[..full], key);
            }
            for ((o, t), j) in out.iter_mut().zip(&part).zip(j0..) {
                let key = T::row(&k[(base + j * step) * d..][..d], &mut wide_row);
                let tail = (full..d).fold(0f32, |a, c| madd::<F>(qr[c], key[c], a));
                *o = fold_lanes(*t, |a, b| a + b) + tail;
            }
        }
    }
    for (r, (&(l, h), st)) in spans.iter().zip(stats.iter_mut()).take(n).enumerate() {
        let s = &mut sc[r * CHUNK..(r + 1) * CHUNK];
        let (ul, uh) = (lo - c0, hi - c0);
        if l >= h {
            s[ul..uh].fill(0.0);
            continue;
        }
        s[ul..l - c0].fill(0.0);
        s[h - c0..uh].fill(0.0);
        let mask = p
            .mask_row(row0 + r)
            .map(|(m, st)| if st == 1 { (&m[l..], 1) } else { (m, st) });
        let w = &mut s[l - c0..h - c0];
        *st = if whole {
            softmax(p, mask, w).then_some((0.0, 1.0))
        } else {
            softmax_partial(p, mask, w)
        };
        if st.is_none() {
            w.fill(0.0);
        }
    }
    // The weighted values, each value row read once for all rows (keys weighted 0, excluded,
    // skipped, so a non-finite value there cannot leak in).
    #[cfg(target_arch = "x86_64")]
    if avx512 {
        let vals = &v[(base + lo * step) * dv..][..((hi - lo - 1) * step + 1) * dv];
        let w = &sc[lo - c0..(n - 1) * CHUNK + hi - c0];
        // SAFETY: `avx512` says this CPU has AVX-512F; the kernel checks its bounds.
        unsafe { weighted_avx512(w, CHUNK, n, (vals, step * dv), hi - lo, &mut acc[..n * dv]) };
        return stats;
    }
    for j in lo..hi {
        let val = T::row(&v[(base + j * step) * dv..][..dv], &mut wide_row);
        for (r, a) in acc.chunks_exact_mut(dv).enumerate().take(n) {
            let w = sc[r * CHUNK + j - c0];
            if w != 0.0 {
                axpy::<F>(a, w, val);
            }
        }
    }
    stats
}

/// The f16 bits of `t`, borrowed where aligned.
fn half_bits(t: &Tensor) -> Result<std::borrow::Cow<'_, [u16]>> {
    let b = t
        .host_bytes()
        .ok_or_else(|| Error::invalid("sdpa", "keys or values not in host memory"))?;
    Ok(match bytemuck::try_cast_slice::<u8, u16>(b) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => std::borrow::Cow::Owned(
            b.chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect(),
        ),
    })
}

/// `t`'s values as f32: borrowed when they are f32, widened from f16 off the decode path.
fn f32_values(t: &Tensor) -> Result<std::borrow::Cow<'_, [f32]>> {
    match t.dtype() {
        DType::F16 => Ok(std::borrow::Cow::Owned(t.to_f32_vec()?)),
        _ => t.as_f32(),
    }
}

/// `Op::Sdpa`; with `invariant`, every row through [`invariant_rows`].
pub(crate) fn sdpa(op: &Op, par: Par<'_>, inputs: &[Tensor], invariant: bool) -> Result<Tensor> {
    let Op::Sdpa {
        scale,
        causal,
        sliding_window,
        softcap,
        layout,
        ..
    } = *op
    else {
        return Err(Error::invalid("sdpa", "not an sdpa op"));
    };
    let q = inputs[0].as_f32()?;
    let mask_data = inputs.get(3).map(Tensor::as_f32).transpose()?;
    let infos: Vec<TensorInfo> = inputs.iter().map(Tensor::info).collect();
    let sdims =
        score_dims(layout, &infos).ok_or_else(|| Error::invalid("sdpa", "q has rank < 3"))?;
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
    let tokens = layout == SdpaLayout::TokenMajor;
    let (hq, lq, hkv, lk) = (
        sdims[r - 3],
        sdims[r - 2],
        kd[r - 3 + usize::from(tokens)],
        sdims[r - 1],
    );
    let (d, dv) = (qd[r - 1], vd[r - 1]);
    let group = (hq / hkv.max(1)).max(1);
    let rows = q.len().checked_div(d).unwrap_or(0);
    let mut dims = qd.to_vec();
    dims[r - 1] = dv;
    let p = Params {
        scale,
        softcap,
        mask,
        row_dims: sdims[..r - 1].to_vec(),
    };
    let mut buf = AlignedBuf::for_overwrite(rows * dv * 4);
    if rows > 0 && dv > 0 && d > 0 {
        let y: &mut [f32] = bytemuck::cast_slice_mut(buf.as_bytes_mut());
        let transpose = lq * group >= TRANSPOSE_MIN_ROWS;
        // Fused multiply-adds where the kernel set has them (the portable build would call
        // libm's software fma); each set stays deterministic across thread counts.
        let fma = par.set != KernelSet::Portable && par.set.is_available();
        let g = &Geometry {
            lq,
            hq,
            hkv,
            lk,
            group,
            causal,
            sliding_window,
            tokens,
        };
        let half = inputs[1].dtype() == DType::F16 && inputs[2].dtype() == DType::F16;
        if half && !invariant && !transpose && fma && par.set == KernelSet::Avx512 {
            // A half-precision cache read in place by the decode kernels.
            let (k, v) = (half_bits(&inputs[1])?, half_bits(&inputs[2])?);
            decode_rows::<true, u16>(g, &p, par, (&q, &k, &v), (d, dv), y);
            return f32_tensor(&dims, buf);
        }
        let (k, v) = (f32_values(&inputs[1])?, f32_values(&inputs[2])?);
        let (q, k, v, p) = (&*q, &*k, &*v, &p);
        if invariant {
            match fma {
                true => invariant_rows::<true>(g, p, par, (q, k, v), (d, dv), y),
                false => invariant_rows::<false>(g, p, par, (q, k, v), (d, dv), y),
            }
            return f32_tensor(&dims, buf);
        }
        if !transpose {
            match fma {
                true => decode_rows::<true, f32>(g, p, par, (q, k, v), (d, dv), y),
                false => decode_rows::<false, f32>(g, p, par, (q, k, v), (d, dv), y),
            }
            return f32_tensor(&dims, buf);
        }
        let out = DisjointOut::new(y);
        let threads = par.pool.threads().min(rows);
        let set = par.set;
        // The packed GEMM's register tile where the kernel set has one: a group of query rows
        // times 32 keys (scores) or 32 value columns (the weighted sum) per call.
        let tile = crate::matmul::sgemm::tile(DType::F32, set);
        let out = &out;
        let job = |t: usize| {
            if t >= threads {
                return;
            }
            let range = split(rows, threads, t);
            // SAFETY: head-major output rows `range` belong to this thread only (token-major
            // rows are written one at a time below, each by the thread that owns it).
            let mut y = (!tokens).then(|| unsafe { out.slice(range.start * dv..range.end * dv) });
            wide(
                set,
                #[inline(always)]
                || {
                    let stride = lk.div_ceil(KB) * KB;
                    let most = if tile.is_some() { TILE_GROUP } else { GROUP };
                    let mut scores = vec![0f32; most * stride];
                    let mut head = Head::default();
                    // Token-major rows off the tile path: this thread's copies of its KV head,
                    // query rows and outputs.
                    let mut qbuf = Vec::new();
                    let mut ybuf = if tokens {
                        vec![0f32; most * dv]
                    } else {
                        Vec::new()
                    };
                    let mut row = range.start;
                    while row < range.end {
                        let (kv, mut lo, mut hi) = g.visible(row);
                        // Consecutive rows of one KV head share the key and value loads over
                        // the union of their visible keys (each row's own keys weighted, the
                        // rest 0, so a row's result does not depend on its group).
                        let mut n = 1;
                        while n < most && row + n < range.end && g.visible(row + n).0 == kv {
                            let (_, l, h) = g.visible(row + n);
                            if l < h {
                                (lo, hi) = if lo < hi {
                                    (lo.min(l), hi.max(h))
                                } else {
                                    (l, h)
                                };
                            }
                            n += 1;
                        }
                        // Token-major rows of one head, `hq` rows apart: the tile reads and
                        // writes them in place.
                        let mut direct = false;
                        if lo < hi {
                            // The row of the first key of `kv`, and the heads per row.
                            let (k0, heads) = match tokens {
                                false => (kv * lk, 1),
                                true => (g.k_at(kv, 0), hkv),
                            };
                            if head.kv != Some(kv) {
                                let kvs = (&k[k0 * d..], &v[k0 * dv..], heads);
                                head.load(kvs, lk, d, dv, tile.is_some());
                                head.kv = Some(kv);
                                if tokens {
                                    g.prefetch_head(kv + 1, (q, k, v), out, d, dv);
                                }
                            }
                            let direct_tile =
                                tile.filter(|_| tokens && head.finite && row % lq + n <= lq);
                            direct = direct_tile.is_some();
                            // The values in place, rows `heads` times `dv` apart (the keys
                            // are read from `head`, loaded above).
                            let vals = (&v[k0 * dv..], heads * dv);
                            let q0 = g.q_at(row) * d;
                            let qs = if !tokens {
                                (&q[q0..(row + n) * d], d)
                            } else if direct {
                                (&q[q0..q0 + (n - 1) * hq * d + d], hq * d)
                            } else {
                                (gather(&mut qbuf, q, n, d, |r| g.q_at(row + r)), d)
                            };
                            let run = GroupRun {
                                g,
                                p,
                                row,
                                n,
                                d,
                                span: (lo, hi),
                                tile,
                                fma,
                                stride,
                            };
                            let kvs = (&head, vals);
                            if let Some(t) = direct_tile {
                                let put = |r: usize, c0: usize, a: &[f32]| {
                                    let at = g.q_at(row + r) * dv + c0;
                                    // SAFETY: query row `row + r` is this thread's.
                                    unsafe { out.slice(at..at + a.len()) }.copy_from_slice(a);
                                };
                                let put = GroupOut::Put(dv, t, put);
                                group_rows(run, kvs, qs, &mut scores, put);
                            } else {
                                let ys: &mut [f32] = match &mut y {
                                    Some(y) => &mut y[(row - range.start) * dv..][..n * dv],
                                    None => &mut ybuf[..n * dv],
                                };
                                let rows = GroupOut::<fn(usize, usize, &[f32])>::Rows(ys);
                                group_rows(run, kvs, qs, &mut scores, rows);
                            }
                        } else if let Some(y) = &mut y {
                            y[(row - range.start) * dv..][..n * dv].fill(0.0);
                        } else {
                            ybuf[..n * dv].fill(0.0);
                        }
                        if tokens && !direct {
                            for (r, yr) in ybuf[..n * dv].chunks_exact(dv).enumerate() {
                                let at = g.q_at(row + r) * dv;
                                // SAFETY: query row `row + r` is this thread's (its range).
                                unsafe { out.slice(at..at + dv) }.copy_from_slice(yr);
                            }
                        }
                        row += n;
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

/// What one group of query rows runs with.
struct GroupRun<'a> {
    g: &'a Geometry,
    p: &'a Params<'a>,
    /// The group's first (head-major) query row, its number of rows, and `d`.
    row: usize,
    n: usize,
    d: usize,
    /// The union of the rows' visible keys (not empty).
    span: (usize, usize),
    tile: Option<crate::matmul::sgemm::tile::Tile>,
    fma: bool,
    /// Distance between the rows of `scores`.
    stride: usize,
}

/// Where a group's outputs go: `n` rows of `dv` one after another, or (on the tile, with
/// finite values) to `put(row, column, values)`.
enum GroupOut<'a, F: FnMut(usize, usize, &[f32])> {
    Rows(&'a mut [f32]),
    Put(usize, crate::matmul::sgemm::tile::Tile, F),
}

/// Attention of the `n` query rows `qs` (`lda` apart) over one KV head: keys from `head`
/// (loaded for it), values from its panels on the tile, else in place (`vals`: rows and
/// their distance).
#[inline(always)]
fn group_rows<F: FnMut(usize, usize, &[f32])>(
    run: GroupRun<'_>,
    (head, vals): (&Head, (&[f32], usize)),
    (qs, lda): (&[f32], usize),
    scores: &mut [f32],
    out: GroupOut<'_, F>,
) {
    let GroupRun {
        g,
        p,
        row,
        n,
        d,
        span,
        tile,
        fma,
        stride,
    } = run;
    let (lo, hi) = span;
    let sc = scores;
    match tile {
        // SAFETY: `tile` is the F32 tile of this CPU's kernel set.
        Some(tile) => unsafe { tile_scores(tile, n, (qs, lda), &head.kt, d, span, sc, stride) },
        None if fma => group_scores::<true>(n, qs, &head.kt, d, span, sc, stride),
        None => group_scores::<false>(n, qs, &head.kt, d, span, sc, stride),
    }
    for r in 0..n {
        let (_, l, h) = g.visible(row + r);
        let s = &mut sc[r * stride..];
        let (l, h) = (l.max(lo), h.min(hi));
        if l >= h {
            s[lo..hi].fill(0.0);
            continue;
        }
        s[lo..l].fill(0.0);
        s[h..hi].fill(0.0);
        let mask_row = p
            .mask_row(row + r)
            .map(|(m, st)| if st == 1 { (&m[l..], 1) } else { (m, st) });
        if !softmax(p, mask_row, &mut s[l..h]) {
            // Every key excluded: weights 0, so the row comes out 0.
            s[l..h].fill(0.0);
        }
    }
    let lk = g.lk;
    let ys = match out {
        GroupOut::Put(dv, tile, put) => {
            // SAFETY: as above.
            unsafe { tile_weighted(tile, n, (dv, put), sc, stride, &head.vp, lk, span) };
            return;
        }
        GroupOut::Rows(ys) => ys,
    };
    let dv = ys.len() / n;
    match (tile.filter(|_| head.finite), fma) {
        (Some(tile), _) => {
            let put =
                |r: usize, c0: usize, a: &[f32]| ys[r * dv + c0..][..a.len()].copy_from_slice(a);
            // SAFETY: as above.
            unsafe { tile_weighted(tile, n, (dv, put), sc, stride, &head.vp, lk, span) }
        }
        (None, fma) => {
            // A tile group (up to TILE_GROUP rows) whose values are not all finite comes here
            // too: GROUP rows at a time.
            for r0 in (0..n).step_by(GROUP) {
                let m = (n - r0).min(GROUP);
                let (y, p) = (&mut ys[r0 * dv..(r0 + m) * dv], &sc[r0 * stride..]);
                match fma {
                    true => group_weighted::<true>(m, y, p, stride, vals, span),
                    false => group_weighted::<false>(m, y, p, stride, vals, span),
                }
            }
        }
    }
}

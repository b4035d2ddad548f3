//! Activations quantized once per row to 8-bit or 16-bit blocks, the operand of every quantized
//! matmul.
//!
//! Two layouts: 32-value blocks (Q8_0-like, for Q4_0 … Q8_0 weights) with a per-block scale `d`
//! and `s = d · Σq` (which applies an affine weight format's offset without touching the
//! levels), and 256-value blocks (Q8_K-like, for the K-quants) with the sum of each run of 16
//! levels. Levels are in `-127..=127`, so negating one never overflows (the SIMD sign trick
//! relies on it). The buffers are reused between calls: no allocation once they are big enough.
//!
//! The 16-bit layout (`ActPrecision::Q16`) keeps the same blocks with levels in
//! `-Q16_MAX..=Q16_MAX`: 8-bit levels move a model's logits by a few percent, enough to flip greedy
//! answers of small models, while 16 bits are within ~1e-5 of f32. Its 32-value blocks store the
//! exact f32 sum of the block in `s` (the offset term then adds no error); its 256-value blocks
//! keep integer sums of 16 levels in `bsums`.

/// Largest 16-bit level: every level `L` then splits into two signed bytes,
/// `L = 256·hi + lo` with `hi = (L + 128) >> 8` and `lo` both in `-128..=127` (see
/// [`ActQuads`]), so 16-bit activations can use the 8-bit dot-product instructions.
pub const Q16_MAX: f32 = 32639.0;

/// Width of the activation levels of quantized matmuls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ActPrecision {
    /// 8-bit levels, as llama.cpp: the cheapest integer dot products.
    Q8,
    /// 16-bit levels (`madd_epi16` / `vpdpwssd`): close to f32, the default.
    #[default]
    Q16,
}

impl ActPrecision {
    pub fn name(self) -> &'static str {
        match self {
            ActPrecision::Q8 => "q8",
            ActPrecision::Q16 => "q16",
        }
    }

    pub fn parse(s: &str) -> Option<ActPrecision> {
        match s.trim().to_ascii_lowercase().as_str() {
            "q8" => Some(ActPrecision::Q8),
            "q16" => Some(ActPrecision::Q16),
            _ => None,
        }
    }

    /// The default of kernel set `set`: 16-bit levels, except on NEON, whose integer kernels
    /// take 8-bit ones (as llama.cpp's ARM path).
    pub fn default_for(set: crate::features::KernelSet) -> ActPrecision {
        match set {
            crate::features::KernelSet::Neon => ActPrecision::Q8,
            _ => ActPrecision::Q16,
        }
    }
}

/// 8-bit levels plus per-block scales for `m` rows of `k` values.
#[derive(Default)]
pub struct QuantizedRows {
    pub k: usize,
    /// Values per block (32 or 256).
    pub block: usize,
    /// `m · k` levels, row-major (8-bit layout).
    pub qs: Vec<i8>,
    /// `m · k` levels, row-major (16-bit layout).
    pub qs16: Vec<i16>,
    /// One scale per block, row-major (`m · k / block`).
    pub d: Vec<f32>,
    /// 32-value blocks: `d · Σq` per block (8-bit), the exact `Σx` (16-bit).
    pub s: Vec<f32>,
    /// 256-value blocks: `Σq` of each run of 16 levels (`m · k / 16`).
    pub bsums: Vec<i32>,
}

/// Rounds to nearest (ties to even) through the float mantissa; exact for `|v| < 2^22`.
#[inline(always)]
pub(crate) fn nearest(v: f32) -> i32 {
    let shifted = v + 12_582_912.0;
    (shifted.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

fn quantize_block(x: &[f32], q: &mut [i8]) -> (f32, i32) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 || !amax.is_finite() {
        q.fill(0);
        return (0.0, 0);
    }
    let d = amax / 127.0;
    let id = 127.0 / amax;
    let mut sum = 0i32;
    for (o, &v) in q.iter_mut().zip(x) {
        let l = nearest(v * id).clamp(-127, 127);
        sum += l;
        *o = l as i8;
    }
    (d, sum)
}

fn quantize_block16(x: &[f32], q: &mut [i16]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 || !amax.is_finite() {
        q.fill(0);
        return 0.0;
    }
    let id = Q16_MAX / amax;
    let max = Q16_MAX as i32;
    for (o, &v) in q.iter_mut().zip(x) {
        *o = nearest(v * id).clamp(-max, max) as i16;
    }
    amax / Q16_MAX
}

impl QuantizedRows {
    /// Quantizes `a` (`m` rows of `k`, `k` a multiple of `block`) to 16-bit levels.
    pub fn quantize16(&mut self, a: &[f32], k: usize, block: usize) {
        let m = a.len().checked_div(k).unwrap_or(0);
        let nb = k / block;
        self.k = k;
        self.block = block;
        self.qs16.resize(m * k, 0);
        self.d.resize(m * nb, 0.0);
        if block == 32 {
            self.s.resize(m * nb, 0.0);
        } else {
            self.bsums.resize(m * k / 16, 0);
        }
        for (bi, (x, q)) in a
            .chunks_exact(block)
            .zip(self.qs16.chunks_exact_mut(block))
            .enumerate()
        {
            self.d[bi] = quantize_block16(x, q);
            if block == 32 {
                self.s[bi] = if self.d[bi] == 0.0 {
                    0.0
                } else {
                    x.iter().sum()
                };
            } else {
                for (g, qq) in q.chunks_exact(16).enumerate() {
                    self.bsums[bi * 16 + g] = qq.iter().map(|&v| i32::from(v)).sum();
                }
            }
        }
    }

    /// 16-bit levels of row `r`.
    pub fn row16(&self, r: usize) -> &[i16] {
        &self.qs16[r * self.k..(r + 1) * self.k]
    }

    /// Quantizes `a` (`m` rows of `k`, `k` a multiple of `block`) into this buffer.
    pub fn quantize(&mut self, a: &[f32], k: usize, block: usize) {
        let m = a.len().checked_div(k).unwrap_or(0);
        let nb = k / block;
        self.k = k;
        self.block = block;
        self.qs.resize(m * k, 0);
        self.d.resize(m * nb, 0.0);
        if block == 32 {
            self.s.resize(m * nb, 0.0);
        } else {
            self.bsums.resize(m * k / 16, 0);
        }
        for (bi, (x, q)) in a
            .chunks_exact(block)
            .zip(self.qs.chunks_exact_mut(block))
            .enumerate()
        {
            let (d, sum) = quantize_block(x, q);
            self.d[bi] = d;
            if block == 32 {
                self.s[bi] = d * sum as f32;
            } else {
                for (g, qq) in q.chunks_exact(16).enumerate() {
                    self.bsums[bi * 16 + g] = qq.iter().map(|&v| i32::from(v)).sum();
                }
            }
        }
    }

    /// Levels of row `r`.
    pub fn row(&self, r: usize) -> &[i8] {
        &self.qs[r * self.k..(r + 1) * self.k]
    }

    /// Scales of row `r`.
    pub fn row_d(&self, r: usize) -> &[f32] {
        let nb = self.k / self.block;
        &self.d[r * nb..(r + 1) * nb]
    }

    /// `d · Σq` per block of row `r` (32-value blocks).
    pub fn row_s(&self, r: usize) -> &[f32] {
        let nb = self.k / self.block;
        &self.s[r * nb..(r + 1) * nb]
    }

    /// Sums of 16 levels of row `r` (256-value blocks).
    #[allow(dead_code)]
    pub fn row_bsums(&self, r: usize) -> &[i32] {
        let n = self.k / 16;
        &self.bsums[r * n..(r + 1) * n]
    }
}

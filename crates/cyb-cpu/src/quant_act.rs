//! Activations quantized once per row to 8-bit blocks, the operand of every quantized matmul.
//!
//! Two layouts: 32-value blocks (Q8_0-like, for Q4_0 … Q8_0 weights) with a per-block scale `d`
//! and `s = d · Σq` (which applies an affine weight format's offset without touching the
//! levels), and 256-value blocks (Q8_K-like, for the K-quants) with the sum of each run of 16
//! levels. Levels are in `-127..=127`, so negating one never overflows (the SIMD sign trick
//! relies on it). The buffers are reused between calls: no allocation once they are big enough.

/// 8-bit levels plus per-block scales for `m` rows of `k` values.
#[derive(Default)]
pub struct QuantizedRows {
    pub k: usize,
    /// Values per block (32 or 256).
    pub block: usize,
    /// `m · k` levels, row-major.
    pub qs: Vec<i8>,
    /// One scale per block, row-major (`m · k / block`).
    pub d: Vec<f32>,
    /// 32-value blocks: `d · Σq` per block.
    pub s: Vec<f32>,
    /// 256-value blocks: `Σq` of each run of 16 levels (`m · k / 16`).
    pub bsums: Vec<i32>,
}

/// Rounds to nearest (ties to even) through the float mantissa; exact for `|v| < 2^22`.
fn nearest(v: f32) -> i32 {
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

impl QuantizedRows {
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

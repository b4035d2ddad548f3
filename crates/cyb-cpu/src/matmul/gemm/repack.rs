//! Weights repacked once, for the VNNI GEMM (`mod.rs`): 16 weight rows interleaved so that one
//! 64-byte load holds four consecutive levels of each of the 16 rows, the layout `vpdpbusd`
//! needs to compute 16 outputs at once against four broadcast activation bytes (the AVX2
//! kernels read each 64-byte vector as two 32-byte halves of eight rows).
//!
//! A weight of `n` rows becomes `ceil(n / 16)` groups (the last padded with zero rows), each a
//! run of units (one per 32-value block or 256-value super-block, in `k` order) cut into spans
//! of about `SPAN_BYTES`; the data holds span 0 of every group, then span 1 of every group,
//! and so on, so that a one-row matmul streams it in order, span by span. Byte offsets
//! inside a unit; `(r, i)` is byte `4r + i` of a 64-byte vector (row `r`, level `i` of a quad):
//!
//! - Q4_0 (288 B): `d` f16 ×16 | 4 vectors: vector `v` holds levels `4v + i` in its low
//!   nibbles and `16 + 4v + i` in its high nibbles (the block's own nibble order). Zero point 8.
//! - Q4_1 (320 B): `d` ×16 | `m` ×16 | the four vectors of Q4_0. No zero point (`m` is
//!   applied with the activation sums).
//! - Q5_0 (352 B): the Q4_0 unit (low four bits) | one vector of fifth bits: bit `s` of byte
//!   `(r, i)` is that of level `4s + i`. Zero point 16.
//! - Q8_0 (544 B): `d` f16 ×16 | 8 vectors of levels `4v + i` plus 128 (unsigned, zero point
//!   128).
//! - Q4_K (2368 B): `d` ×16 | `dmin` ×16 | 6-bit scales `[j][r]` (128 B) | mins `[j][r]`
//!   (128 B) | per 32-value sub-block `j`, four vectors: vector `h` holds levels
//!   `32j + 8h + i` (low nibble) and `32j + 8h + 4 + i` (high nibble).
//! - Q6_K (3360 B): `d` ×16 | signed scales `[g][r]` (256 B) | per 16-value group `g` (in
//!   order, one stream) two vectors of the levels' low four bits (vector `h`: `16g + 8h + i`
//!   low nibble, `16g + 8h + 4 + i` high nibble) and one of their top two bits (bits
//!   `2s..2s + 2` of byte `(r, i)` belong to level `16g + 4s + i`). Zero point 32.
//!
//! - Q5_1 (384 B): the Q4_1 unit | the fifth-bit vector of Q5_0.
//! - Q5_K (2880 B): the Q4_K unit | per sub-block `j` one vector of fifth bits: bit `2h` of byte
//!   `(r, i)` belongs to level `32j + 8h + i`, bit `2h + 1` to level `32j + 8h + 4 + i`.
//! - Q2_K (1600 B): `d` ×16 | `dmin` ×16 | scales `[g][r]` (256 B) | mins `[g][r]` (256 B) |
//!   per 16-value group `g` one vector: bits `2s..2s + 2` of byte `(r, i)` are level
//!   `16g + 4s + i`.
//! - Q3_K (1824 B): `d` ×16 | signed scales `[g][r]` (256 B) | per group `g` one vector of the
//!   levels' low two bits (as Q2_K) | per pair of groups one vector of their third bits (bit
//!   `s + 4·(g % 2)` of byte `(r, i)` belongs to level `16g + 4s + i`). Zero point 4.
//! - TQ1_0 and TQ2_0 (1056 B): `d` ×16 | per group `g` one vector of levels `q + 1` in
//!   `0..=2` (as Q2_K's). Zero point 1.
//!
//! Repacked Q4_0/Q4_K/Q6_K are the size of the original; Q8_0 too. Repacking is built lazily on
//! first use and cached per weight, keyed by the weight's shared owner (a file mapping), whose
//! bytes never change while it is alive.

use crate::matmul::blocks::{
    low_levels, q3_k_scales, q6_k_levels, scale_min_k4, ternary_levels, ternary_scale_at,
};
use crate::par::pool::{split, DisjointOut, ThreadPool};
use cyb_tensor::{AlignedBuf, DType, Storage, Tensor};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// Weight rows per group.
pub const GROUP: usize = 16;

/// Bytes of one group's span, about (at most one unit more; a group's units are cut into the
/// fewest spans of near equal length): a one-row matmul reuses each activation byte once per
/// group's span, and the activations stay in L1 between reuses only while the weight bytes
/// streamed in between are few. On a Zen 4 VM, one thread, weights from memory,
/// `[1,2048]·[128256,2048]ᵀ` and `[1,8192]·[2048,8192]ᵀ` read Q6_K at 12–16 GB/s over whole
/// rows and 21–27 in spans of 512 or 1024 values; Q4_K 10–15 → 21–26, Q8_0 21–24 → 27–30.
const SPAN_BYTES: usize = 12 * 1024;

/// Values per unit and bytes per unit of one group, for the formats that have a layout.
pub fn unit(dtype: DType) -> Option<(usize, usize)> {
    match dtype {
        DType::Q4_0 => Some((32, 288)),
        DType::Q8_0 => Some((32, 544)),
        DType::Q4_1 => Some((32, 320)),
        DType::Q5_0 => Some((32, 352)),
        DType::Q5_1 => Some((32, 384)),
        DType::Q4_K => Some((256, 2368)),
        DType::Q5_K => Some((256, 2880)),
        DType::Q6_K => Some((256, 3360)),
        DType::Q2_K => Some((256, 1600)),
        DType::Q3_K => Some((256, 1824)),
        DType::TQ1_0 | DType::TQ2_0 => Some((256, 1056)),
        _ => None,
    }
}

/// A repacked weight of `n` rows of `k` values.
pub struct Repacked {
    pub n: usize,
    pub k: usize,
    /// Bytes of one group (all of its units).
    pub group_bytes: usize,
    /// Bytes of one group's unit.
    pub unit_bytes: usize,
    /// Units of a row.
    pub units: usize,
    /// Units per span (the last span may hold fewer).
    pub span: usize,
    pub data: AlignedBuf,
}

impl Repacked {
    pub fn groups(&self) -> usize {
        self.n.div_ceil(GROUP)
    }

    /// Spans along `k`.
    pub fn spans(&self) -> usize {
        self.units.div_ceil(self.span)
    }

    /// The units of span `c`.
    pub fn span_units(&self, c: usize) -> std::ops::Range<usize> {
        c * self.span..((c + 1) * self.span).min(self.units)
    }

    /// The bytes of group `g` in span `c`.
    pub fn piece(&self, g: usize, c: usize) -> &[u8] {
        let (start, len) = self.piece_at(g, c);
        &self.data.as_bytes()[start..start + len]
    }

    /// Offset and length of group `g`'s bytes in span `c`.
    fn piece_at(&self, g: usize, c: usize) -> (usize, usize) {
        let len = self.span_units(c).len() * self.unit_bytes;
        (
            c * self.span * self.unit_bytes * self.groups() + g * len,
            len,
        )
    }
}

/// Row `r`'s low two bits of `q` into 16 group vectors (`out`, 1024 B): bits `2s..2s + 2` of
/// byte `(r, i)` of vector `g` are level `16g + 4s + i`.
fn pack_two_bit(q: &[u8; 256], r: usize, out: &mut [u8]) {
    for g in 0..16 {
        for i in 0..4 {
            out[64 * g + 4 * r + i] =
                (0..4).fold(0u8, |acc, s| acc | ((q[16 * g + 4 * s + i] & 3) << (2 * s)));
        }
    }
}

/// Writes unit `u` of row `r` (its original block `b`) into `out` (the unit's bytes).
fn pack_unit(dtype: DType, b: &[u8], r: usize, out: &mut [u8]) {
    match dtype {
        DType::Q4_0 => {
            out[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
            for v in 0..4 {
                let at = 32 + 64 * v + 4 * r;
                out[at..at + 4].copy_from_slice(&b[2 + 4 * v..6 + 4 * v]);
            }
        }
        DType::Q4_1 => {
            out[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
            out[32 + 2 * r..34 + 2 * r].copy_from_slice(&b[2..4]);
            for v in 0..4 {
                let at = 64 + 64 * v + 4 * r;
                out[at..at + 4].copy_from_slice(&b[4 + 4 * v..8 + 4 * v]);
            }
        }
        DType::Q5_0 => {
            out[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
            for v in 0..4 {
                let at = 32 + 64 * v + 4 * r;
                out[at..at + 4].copy_from_slice(&b[6 + 4 * v..10 + 4 * v]);
            }
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            for i in 0..4 {
                out[288 + 4 * r + i] =
                    (0..8).fold(0u8, |acc, s| acc | ((((qh >> (4 * s + i)) & 1) as u8) << s));
            }
        }
        DType::Q8_0 => {
            out[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
            for v in 0..8 {
                for i in 0..4 {
                    out[32 + 64 * v + 4 * r + i] = b[2 + 4 * v + i] ^ 0x80;
                }
            }
        }
        DType::Q4_K => {
            out[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
            out[32 + 2 * r..34 + 2 * r].copy_from_slice(&b[2..4]);
            for j in 0..8 {
                let (s, m) = scale_min_k4(j, &b[4..16]);
                out[64 + 16 * j + r] = s;
                out[192 + 16 * j + r] = m;
            }
            // Sub-block j is the low (j even) or high (j odd) nibbles of qs[32·(j/2)..][..32].
            let qs = &b[16..144];
            for j in 0..8 {
                let (src, shift) = (&qs[32 * (j / 2)..][..32], 4 * (j % 2));
                for h in 0..4 {
                    let dst = &mut out[320 + 256 * j + 64 * h + 4 * r..][..4];
                    for i in 0..4 {
                        let lo = (src[8 * h + i] >> shift) & 0x0f;
                        let hi = (src[8 * h + 4 + i] >> shift) & 0x0f;
                        dst[i] = lo | (hi << 4);
                    }
                }
            }
        }
        DType::Q5_1 => {
            out[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
            out[32 + 2 * r..34 + 2 * r].copy_from_slice(&b[2..4]);
            for v in 0..4 {
                let at = 64 + 64 * v + 4 * r;
                out[at..at + 4].copy_from_slice(&b[8 + 4 * v..12 + 4 * v]);
            }
            let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
            for i in 0..4 {
                out[320 + 4 * r + i] =
                    (0..8).fold(0u8, |acc, s| acc | ((((qh >> (4 * s + i)) & 1) as u8) << s));
            }
        }
        DType::Q5_K => {
            // Scales and low nibbles are laid out as in Q4_K (qs moves past qh).
            let mut q4 = [0u8; 144];
            q4[..16].copy_from_slice(&b[..16]);
            q4[16..].copy_from_slice(&b[48..176]);
            pack_unit(DType::Q4_K, &q4, r, &mut out[..2368]);
            let qh = &b[16..48];
            for j in 0..8 {
                for i in 0..4 {
                    let bit = |l: usize| (qh[l] >> j) & 1;
                    out[2368 + 64 * j + 4 * r + i] = (0..4).fold(0u8, |acc, h| {
                        acc | (bit(8 * h + i) << (2 * h)) | (bit(8 * h + 4 + i) << (2 * h + 1))
                    });
                }
            }
        }
        DType::Q2_K => {
            out[2 * r..2 * r + 2].copy_from_slice(&b[80..82]);
            out[32 + 2 * r..34 + 2 * r].copy_from_slice(&b[82..84]);
            for g in 0..16 {
                out[64 + 16 * g + r] = b[g] & 0x0f;
                out[320 + 16 * g + r] = b[g] >> 4;
            }
            let q = low_levels(&b[16..80], None);
            pack_two_bit(&q, r, &mut out[576..1600]);
        }
        DType::Q3_K => {
            out[2 * r..2 * r + 2].copy_from_slice(&b[108..110]);
            let scales = q3_k_scales(&b[96..108]);
            for g in 0..16 {
                out[32 + 16 * g + r] = (scales[g] as i8 - 32) as u8;
            }
            let q = low_levels(&b[32..96], Some(&b[0..32]));
            pack_two_bit(&q, r, &mut out[288..1312]);
            for p in 0..8 {
                for i in 0..4 {
                    let mut byte = 0u8;
                    for half in 0..2 {
                        for s4 in 0..4 {
                            let level = q[16 * (2 * p + half) + 4 * s4 + i];
                            byte |= ((level >> 2) & 1) << (s4 + 4 * half);
                        }
                    }
                    out[1312 + 64 * p + 4 * r + i] = byte;
                }
            }
        }
        DType::TQ1_0 | DType::TQ2_0 => {
            let at = ternary_scale_at(dtype);
            out[2 * r..2 * r + 2].copy_from_slice(&b[at..at + 2]);
            pack_two_bit(&ternary_levels(dtype, b), r, &mut out[32..1056]);
        }
        _ => {
            // Q6_K
            out[2 * r..2 * r + 2].copy_from_slice(&b[208..210]);
            for g in 0..16 {
                out[32 + 16 * g + r] = b[192 + g];
            }
            let q = q6_k_levels(b);
            for g in 0..16 {
                for i in 0..4 {
                    for h in 0..2 {
                        let v = 16 * g + 8 * h + i;
                        out[288 + 192 * g + 64 * h + 4 * r + i] =
                            (q[v] & 0x0f) | ((q[v + 4] & 0x0f) << 4);
                    }
                    let top = |s: usize| (q[16 * g + 4 * s + i] >> 4) << (2 * s);
                    out[416 + 192 * g + 4 * r + i] = top(0) | top(1) | top(2) | top(3);
                }
            }
        }
    }
}

/// Repacks `w` (`n` rows of `row_bytes`, each `k` values of `dtype`), groups split over the
/// pool. `None` when `dtype` has no layout or the sizes do not fit.
pub fn repack(pool: &ThreadPool, dtype: DType, w: &[u8], n: usize, k: usize) -> Option<Repacked> {
    let (uv, ub) = unit(dtype)?;
    let row_bytes = dtype.bytes_for(k)?;
    if k == 0 || !k.is_multiple_of(uv) || w.len() < n.checked_mul(row_bytes)? {
        return None;
    }
    let units = k / uv;
    let bb = dtype.block_bytes();
    let groups = n.div_ceil(GROUP);
    let mut data = AlignedBuf::zeroed(groups.checked_mul(units * ub)?);
    let layout = Repacked {
        n,
        k,
        group_bytes: units * ub,
        unit_bytes: ub,
        units,
        span: units.div_ceil((units * ub).div_ceil(SPAN_BYTES)),
        data: AlignedBuf::zeroed(0),
    };
    let r = &layout;
    let out = DisjointOut::new(data.as_bytes_mut());
    let threads = pool.threads();
    pool.run(&|t| {
        for g in split(groups, threads, t) {
            for c in 0..r.spans() {
                let (at, len) = r.piece_at(g, c);
                // SAFETY: group g's pieces belong to this thread only.
                let dst = unsafe { out.slice(at..at + len) };
                let first = r.span_units(c).start;
                for row in 0..GROUP.min(n - g * GROUP) {
                    let w = &w[(g * GROUP + row) * row_bytes..][..row_bytes];
                    for u in r.span_units(c) {
                        let b = &w[u * bb..(u + 1) * bb];
                        pack_unit(
                            dtype,
                            b,
                            row,
                            &mut dst[(u - first) * ub..(u - first + 1) * ub],
                        );
                    }
                }
            }
        }
    });
    Some(Repacked { data, ..layout })
}

type Owner = Weak<dyn AsRef<[u8]> + Send + Sync>;
/// Address and length of the original bytes, their format and the weight's row length.
type Key = (usize, usize, DType, usize);

/// A derived form `T` of weights (repacked blocks, float panels) by (address, length, dtype,
/// row length) of their bytes, valid while their owner lives. Host buffers never change once
/// made, like shared storage, so a graph's constants (and an operand computed once and read by
/// several matmuls) are packed once too.
pub struct WeightCache<T> {
    map: Mutex<HashMap<Key, (Owner, Arc<T>)>>,
}

impl<T> Default for WeightCache<T> {
    fn default() -> Self {
        WeightCache {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> WeightCache<T> {
    /// The derived form of the rank-2 weight `w` (`[n, k]`), made by `build(bytes, n, k)` on
    /// first use. `None` for weights on a device or that `build` declines.
    pub fn get(
        &self,
        w: &Tensor,
        build: impl FnOnce(&[u8], usize, usize) -> Option<T>,
    ) -> Option<Arc<T>> {
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = match w.storage() {
            Storage::Shared { owner, .. } => owner.clone(),
            Storage::Host(buf) => buf.clone(),
            Storage::Device(_) => return None,
        };
        let data = w.host_bytes()?;
        let [n, k] = *w.dims() else { return None };
        let key = (data.as_ptr() as usize, data.len(), w.dtype(), k);
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((o, r)) = map.get(&key) {
            // A live owner means the address still names the same bytes.
            if o.strong_count() > 0 {
                return Some(r.clone());
            }
        }
        map.retain(|_, (o, _)| o.strong_count() > 0);
        let r = Arc::new(build(data, n, k)?);
        map.insert(key, (Arc::downgrade(&owner), r.clone()));
        Some(r)
    }
}

impl<T> WeightCache<T> {
    /// Drops the entries whose weight's owner is gone.
    pub fn release_unowned(&self) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, (o, _)| o.strong_count() > 0);
    }

    /// Bytes the entries hold, `size` giving each one's.
    pub fn bytes(&self, size: impl Fn(&T) -> usize) -> usize {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.values().map(|(_, r)| size(r)).sum()
    }
}

/// Repacked quantized weights.
pub type RepackCache = WeightCache<Repacked>;

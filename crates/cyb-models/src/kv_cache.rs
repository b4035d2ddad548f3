//! The key/value cache of one generation session: per layer, the keys and values of every
//! token seen so far, so a forward step only computes the new tokens.
//!
//! Storage is preallocated for the context asked for (`capacity` tokens) in the layout
//! attention reads, `[kv_heads, capacity, head_dim]`; a step writes its rows in place and
//! attention gets the valid prefix `[kv_heads, len, head_dim]`. A step writes every layer
//! first and commits the new length once at the end, so a step that fails half-way leaves the
//! cache as it was (its rows are overwritten by the next step).
//!
//! With a device backend the cache lives in that backend's memory instead: the model appends
//! each step's rows with `Op::KvAppend` (in place on the device) and attention reads the valid
//! prefix there, so a decode step moves no keys or values between host and device.

use cyb_backend::Backend;
use cyb_tensor::{AlignedBuf, DType, Error, Result, Shape, Storage, Tensor};
use std::sync::Arc;

/// Keys and values of one layer, each `[kv_heads, capacity, head_dim]`.
#[derive(Clone, Debug)]
struct LayerKv {
    k: Vec<f32>,
    v: Vec<f32>,
}

/// Where the layers live.
#[derive(Debug)]
enum Layers {
    Host(Vec<LayerKv>),
    /// Per layer, keys and values `[kv_heads, capacity, head_dim]` in a backend's memory.
    Device(Vec<(Tensor, Tensor)>),
}

/// A session's KV cache, sized once to the context asked for.
#[derive(Debug)]
pub struct KvCache {
    layers: Layers,
    kv_heads: usize,
    head_dim: usize,
    capacity: usize,
    len: usize,
    /// Decode steps this session may replay on a device backend (replay.rs): plans are bound
    /// to this cache's buffers.
    pub(crate) replays: crate::replay::ReplayBook,
}

/// A context of 0 tokens is refused (it could hold nothing).
fn nonzero(capacity: usize) -> Result<()> {
    if capacity == 0 {
        return Err(Error::invalid(
            "kv_cache",
            "a context of 0 tokens holds nothing",
        ));
    }
    Ok(())
}

fn host_only() -> Error {
    Error::invalid(
        "kv_cache",
        "internal: a device cache is written with Op::KvAppend, not on the host",
    )
}

fn outside(layer: usize) -> Error {
    Error::invalid("kv_cache", format!("layer {layer} is outside the cache"))
}

impl KvCache {
    /// A cache for `capacity` tokens of a model with these dimensions. Fails with
    /// `OutOfMemory` rather than aborting when the buffers cannot be allocated.
    pub fn new(
        num_layers: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
    ) -> Result<KvCache> {
        nonzero(capacity)?;
        let per_tensor = kv_heads
            .checked_mul(head_dim)
            .and_then(|x| x.checked_mul(capacity));
        let oom = |n: usize| Error::OutOfMemory {
            backend: "host (kv cache)".into(),
            requested_bytes: n,
        };
        let per_tensor = per_tensor.ok_or_else(|| oom(usize::MAX))?;
        let bytes = per_tensor.saturating_mul(8).saturating_mul(num_layers);
        let mut layers = Vec::with_capacity(num_layers);
        for _ in 0..num_layers {
            let buffer = || -> Result<Vec<f32>> {
                let mut b = Vec::new();
                b.try_reserve_exact(per_tensor).map_err(|_| oom(bytes))?;
                b.resize(per_tensor, 0.0);
                Ok(b)
            };
            layers.push(LayerKv {
                k: buffer()?,
                v: buffer()?,
            });
        }
        Ok(KvCache {
            layers: Layers::Host(layers),
            kv_heads,
            head_dim,
            capacity,
            len: 0,
            replays: Default::default(),
        })
    }

    /// A cache in `backend`'s memory (zero-filled), written with `Op::KvAppend`.
    pub fn on_backend(
        backend: &dyn Backend,
        num_layers: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
    ) -> Result<KvCache> {
        nonzero(capacity)?;
        let dims = [kv_heads, capacity, head_dim];
        let layers = (0..num_layers)
            .map(|_| {
                Ok((
                    backend.alloc(&dims, DType::F32)?,
                    backend.alloc(&dims, DType::F32)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(KvCache {
            layers: Layers::Device(layers),
            kv_heads,
            head_dim,
            capacity,
            len: 0,
            replays: Default::default(),
        })
    }

    /// True when the cache lives in a backend's memory (see [`device_layer`]).
    ///
    /// [`device_layer`]: KvCache::device_layer
    pub fn on_device(&self) -> bool {
        matches!(self.layers, Layers::Device(_))
    }

    /// The whole-capacity keys and values `[kv_heads, capacity, head_dim]` of `layer` of a
    /// device cache.
    pub fn device_layer(&self, layer: usize) -> Result<(Tensor, Tensor)> {
        match &self.layers {
            Layers::Device(l) => l.get(layer).cloned().ok_or_else(|| {
                Error::invalid("kv_cache", format!("layer {layer} is outside the cache"))
            }),
            Layers::Host(_) => Err(Error::invalid(
                "kv_cache",
                "internal: a host cache has no device layers",
            )),
        }
    }

    /// Replaces `layer` of a device cache with the result of appending to it.
    pub fn set_device_layer(&mut self, layer: usize, k: Tensor, v: Tensor) -> Result<()> {
        let want = [self.kv_heads, self.capacity, self.head_dim];
        for t in [&k, &v] {
            if t.dims() != want {
                return Err(Error::ShapeMismatch {
                    op: "kv_cache layer".into(),
                    expected: want.to_vec(),
                    got: t.dims().to_vec(),
                });
            }
        }
        match &mut self.layers {
            Layers::Device(l) => {
                let slot = l.get_mut(layer).ok_or_else(|| {
                    Error::invalid("kv_cache", format!("layer {layer} is outside the cache"))
                })?;
                *slot = (k, v);
                Ok(())
            }
            Layers::Host(_) => Err(Error::invalid(
                "kv_cache",
                "internal: a host cache has no device layers",
            )),
        }
    }

    /// Tokens held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Tokens the cache was sized for.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Tokens that still fit.
    pub fn remaining(&self) -> usize {
        self.capacity - self.len
    }

    pub fn num_layers(&self) -> usize {
        match &self.layers {
            Layers::Host(l) => l.len(),
            Layers::Device(l) => l.len(),
        }
    }

    pub fn kv_heads(&self) -> usize {
        self.kv_heads
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Forgets every token (a new conversation).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Keeps the first `len` tokens (rewinding a conversation); no-op if it holds fewer.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Writes the keys and values of `n` new tokens (`k`, `v` F32 `[n, kv_heads, head_dim]`)
    /// of `layer` after the committed tokens, and returns the keys and values of every token
    /// (committed and new) as `[kv_heads, len + n, head_dim]` tensors. Call [`commit`] once all
    /// layers are written.
    ///
    /// [`commit`]: KvCache::commit
    pub fn write(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let n = self.store(layer, k, v)?;
        self.gather(layer, self.len + n)
    }

    /// As [`write`](KvCache::write) without returning the prefix (the graph path, whose
    /// graph already concatenated it).
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        self.store(layer, k, v).map(|_| ())
    }

    /// The committed keys and values of `layer`, each `[kv_heads, len, head_dim]` (a host
    /// cache; the graph path feeds them to its template as the past).
    pub fn host_prefix(&self, layer: usize) -> Result<(Tensor, Tensor)> {
        self.gather(layer, self.len)
    }

    /// Copies the new rows into place; returns how many tokens they hold.
    fn store(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<usize> {
        let (h, d, cap, start) = (self.kv_heads, self.head_dim, self.capacity, self.len);
        let n = k.dims().first().copied().unwrap_or(0);
        for (what, t) in [("keys", k), ("values", v)] {
            if t.dims() != [n, h, d] {
                return Err(Error::ShapeMismatch {
                    op: format!("kv_cache write of {what}"),
                    expected: vec![n, h, d],
                    got: t.dims().to_vec(),
                });
            }
        }
        if start + n > cap {
            return Err(Error::invalid(
                "kv_cache",
                format!("{n} new tokens do not fit: {start} of {cap} positions are used"),
            ));
        }
        let slot = self.host_layer_mut(layer)?;
        for (src, buf) in [(k, &mut slot.k), (v, &mut slot.v)] {
            let src = src.as_f32()?;
            for t in 0..n {
                for head in 0..h {
                    let from = (t * h + head) * d;
                    let to = (head * cap + start + t) * d;
                    buf[to..to + d].copy_from_slice(&src[from..from + d]);
                }
            }
        }
        Ok(n)
    }

    /// The first `total` tokens of each head of `layer`, gathered into contiguous
    /// `[kv_heads, total, head_dim]` tensors.
    fn gather(&self, layer: usize, total: usize) -> Result<(Tensor, Tensor)> {
        let (h, d, cap) = (self.kv_heads, self.head_dim, self.capacity);
        let Layers::Host(layers) = &self.layers else {
            return Err(host_only());
        };
        let slot = layers.get(layer).ok_or_else(|| outside(layer))?;
        // One copy per step, straight into the tensor's buffer (a recycled one when it fits).
        let one = |buf: &[f32]| {
            let mut out = AlignedBuf::for_overwrite(h * total * d * 4);
            let dst: &mut [f32] = bytemuck::cast_slice_mut(out.as_bytes_mut());
            for (head, part) in dst.chunks_exact_mut((total * d).max(1)).enumerate().take(h) {
                part.copy_from_slice(&buf[head * cap * d..][..total * d]);
            }
            Tensor::new(
                Shape::new(vec![h, total, d])?,
                DType::F32,
                Storage::Host(Arc::new(out)),
            )
        };
        Ok((one(&slot.k)?, one(&slot.v)?))
    }

    fn host_layer_mut(&mut self, layer: usize) -> Result<&mut LayerKv> {
        let Layers::Host(layers) = &mut self.layers else {
            return Err(host_only());
        };
        layers.get_mut(layer).ok_or_else(|| outside(layer))
    }

    /// Makes the last `n` written tokens part of the cache.
    pub fn commit(&mut self, n: usize) -> Result<()> {
        if self.len + n > self.capacity {
            return Err(Error::invalid(
                "kv_cache",
                format!(
                    "cannot commit {n} tokens: {} of {} positions are used",
                    self.len, self.capacity
                ),
            ));
        }
        self.len += n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_commit_keeps_the_prefix_in_head_major_order() {
        let mut c = KvCache::new(1, 2, 3, 4).unwrap();
        let step = |base: f32, n: usize| {
            let v: Vec<f32> = (0..n * 6).map(|i| base + i as f32).collect();
            Tensor::from_f32(&[n, 2, 3], &v).unwrap()
        };
        let (k, _) = c.write(0, &step(0.0, 2), &step(100.0, 2)).unwrap();
        assert_eq!(k.dims(), [2, 2, 3]);
        c.commit(2).unwrap();
        let (k, v) = c.write(0, &step(50.0, 1), &step(150.0, 1)).unwrap();
        c.commit(1).unwrap();
        let k = k.to_f32_vec().unwrap();
        // head 0: token 0, token 1, token 2; then head 1.
        assert_eq!(&k[..9], &[0., 1., 2., 6., 7., 8., 50., 51., 52.]);
        assert_eq!(&k[9..], &[3., 4., 5., 9., 10., 11., 53., 54., 55.]);
        assert_eq!(v.to_f32_vec().unwrap()[6..9], [150., 151., 152.]);
        assert_eq!((c.len(), c.remaining()), (3, 1));
        assert!(c.write(0, &step(0.0, 2), &step(0.0, 2)).is_err());
        assert!(c.write(1, &step(0.0, 1), &step(0.0, 1)).is_err());
        c.truncate(1);
        assert_eq!(c.len(), 1);
        c.clear();
        assert!(c.is_empty());
    }

    #[test]
    fn impossible_sizes_are_errors() {
        assert!(KvCache::new(1, 2, 3, 0).is_err());
        assert!(matches!(
            KvCache::new(1, usize::MAX, 2, 2),
            Err(Error::OutOfMemory { .. })
        ));
    }
}

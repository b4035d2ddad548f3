//! The key/value cache of one generation session: per layer, the keys and values of every
//! token seen so far, so a forward step only computes the new tokens.
//!
//! Host storage is preallocated for the context asked for (`capacity` tokens), token-major,
//! `[capacity, kv_heads, head_dim]`, so that the keys and values of the first `len` tokens are
//! a prefix of the buffer: a step writes its rows in place and attention gets that prefix as a
//! `[len, kv_heads, head_dim]` tensor sharing the buffer (no copy; the buffer's visible length
//! is moved instead). A buffer is written only while no such tensor is alive; one still held
//! elsewhere keeps its contents, the cache copying the buffer before writing. A step writes
//! every layer first and commits the new length once at the end, so a step that fails
//! half-way leaves the cache as it was (its rows are overwritten by the next step).
//!
//! With a device backend the cache lives in that backend's memory instead: the model appends
//! each step's rows with `Op::KvAppend` (in place on the device) and attention reads the valid
//! prefix there, so a decode step moves no keys or values between host and device.

use crate::step::run_ops;
use cyb_backend::{Backend, Dispatcher};
use cyb_ops::Op;
use cyb_tensor::{AlignedBuf, DType, Error, Result, Shape, Storage, Tensor, TensorInfo};
use std::sync::Arc;

/// Keys and values of one layer, each F32 `[capacity, kv_heads, head_dim]` (the buffer's
/// length: the tokens handed out last).
#[derive(Clone)]
struct LayerKv {
    k: Arc<AlignedBuf>,
    v: Arc<AlignedBuf>,
}

impl std::fmt::Debug for LayerKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LayerKv({} bytes each)", self.k.capacity())
    }
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
    pub(super) replays: super::replay::ReplayBook,
    /// The scale of each of the model's LoRA adapters for this session (`None`: the model's).
    lora_scales: Option<Vec<f32>>,
}

/// A cache with no layers and no room: what stays in a session's place while its cache is
/// lent to a batched step (`std::mem::take`).
impl Default for KvCache {
    fn default() -> KvCache {
        KvCache {
            layers: Layers::Host(Vec::new()),
            kv_heads: 0,
            head_dim: 0,
            capacity: 0,
            len: 0,
            replays: Default::default(),
            lora_scales: None,
        }
    }
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
        let what = || format!("a KV cache of {capacity} tokens");
        let bytes = [num_layers, 2, kv_heads, head_dim, capacity, 4]
            .iter()
            .fold(1u128, |n, &d| n.saturating_mul(d as u128));
        cyb_tensor::memory::check_host_bytes(what, bytes)?;
        let oom = || Error::OutOfMemory {
            what: what(),
            bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
            available: cyb_tensor::memory::available_memory(),
        };
        // Checked above: `bytes` fits the address space.
        let per_tensor = kv_heads * head_dim * capacity * 4;
        let mut layers = Vec::with_capacity(num_layers);
        for _ in 0..num_layers {
            let buffer = || -> Result<Arc<AlignedBuf>> {
                AlignedBuf::try_with_capacity(per_tensor)
                    .map(Arc::new)
                    .ok_or_else(oom)
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
            lora_scales: None,
        })
    }

    /// A cache in `backend`'s memory where it is a device that appends to caches
    /// (`Op::KvAppend`), else on the host.
    pub fn on_backend_or_host(
        backend: &dyn Backend,
        num_layers: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
    ) -> Result<KvCache> {
        let probe = [
            TensorInfo {
                shape: Shape::new([kv_heads, capacity.max(1), head_dim])?,
                dtype: DType::F32,
            },
            TensorInfo {
                shape: Shape::new([1, kv_heads, head_dim])?,
                dtype: DType::F32,
            },
        ];
        if !backend.host_memory() && backend.supports(&Op::KvAppend { start: 0 }, &probe) {
            return KvCache::on_backend(backend, num_layers, kv_heads, head_dim, capacity);
        }
        KvCache::new(num_layers, kv_heads, head_dim, capacity)
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
            lora_scales: None,
        })
    }

    /// Sets the scale of each of the model's LoRA adapters for this session, in the order they
    /// were loaded (0 leaves one out; `None` goes back to the model's). The keys and values
    /// already held were made with the scales before: a caller changing them starts a fresh
    /// cache.
    pub fn set_lora_scales(&mut self, scales: Option<Vec<f32>>) {
        self.lora_scales = scales;
    }

    /// The session's LoRA scales, if it set its own.
    pub fn lora_scales(&self) -> Option<&[f32]> {
        self.lora_scales.as_deref()
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

    /// Makes this host cache hold what `other` holds (same dimensions), reusing this cache's
    /// buffers: only the tokens `other` holds are copied. How a beam search gives a second
    /// continuation of one hypothesis a cache of its own without allocating.
    pub fn copy_from(&mut self, other: &KvCache) -> Result<()> {
        if (self.kv_heads, self.head_dim, self.capacity)
            != (other.kv_heads, other.head_dim, other.capacity)
        {
            return Err(Error::invalid(
                "kv_cache",
                "copy between caches of different sizes",
            ));
        }
        let (Layers::Host(dst), Layers::Host(src)) = (&mut self.layers, &other.layers) else {
            return Err(host_only());
        };
        if dst.len() != src.len() {
            return Err(Error::invalid(
                "kv_cache",
                "copy between caches of different depths",
            ));
        }
        let bytes = other.len * self.kv_heads * self.head_dim * 4;
        for (d, s) in dst.iter_mut().zip(src) {
            for (db, sb) in [(&mut d.k, &s.k), (&mut d.v, &s.v)] {
                let db = Arc::make_mut(db);
                if !db.set_len(bytes) {
                    return Err(Error::invalid(
                        "kv_cache",
                        "internal: buffer below capacity",
                    ));
                }
                let from = sb.as_bytes().get(..bytes).ok_or_else(|| {
                    Error::invalid("kv_cache", "internal: a layer was not written")
                })?;
                db.as_bytes_mut()[..bytes].copy_from_slice(from);
            }
        }
        self.len = other.len;
        Ok(())
    }

    /// [`copy_from`](KvCache::copy_from) for caches in either memory: device caches are
    /// copied on the device, through `dispatcher`'s ops.
    pub fn copy_from_via(&mut self, other: &KvCache, dispatcher: &Dispatcher) -> Result<()> {
        if !(self.on_device() && other.on_device()) {
            return self.copy_from(other);
        }
        if (
            self.kv_heads,
            self.head_dim,
            self.capacity,
            self.num_layers(),
        ) != (
            other.kv_heads,
            other.head_dim,
            other.capacity,
            other.num_layers(),
        ) {
            return Err(Error::invalid(
                "kv_cache",
                "copy between caches of different sizes",
            ));
        }
        let len = other.len;
        self.len = 0;
        if len > 0 {
            run_ops(dispatcher, |step| {
                let rows = Op::Slice {
                    axis: 1,
                    start: 0,
                    end: len as isize,
                    step: 1,
                };
                for layer in 0..other.num_layers() {
                    let (sk, sv) = other.device_layer(layer)?;
                    let (dk, dv) = self.device_layer(layer)?;
                    let mut copy = |from: &Tensor, to: &Tensor| -> Result<Tensor> {
                        // `[kv_heads, len, d]` → the token-major rows KvAppend writes.
                        let part = step.run(rows.clone(), &[from])?;
                        let part = step.permute(&part, &[1, 0, 2])?;
                        step.run(Op::KvAppend { start: 0 }, &[to, &part])
                    };
                    let (k, v) = (copy(&sk, &dk)?, copy(&sv, &dv)?);
                    self.set_device_layer(layer, k, v)?;
                }
                Ok(())
            })?;
        }
        self.len = len;
        Ok(())
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
    /// (committed and new) as `[len + n, kv_heads, head_dim]` tensors sharing the cache's
    /// buffers (drop them before the next write of the layer, or that write copies the
    /// buffer). Call [`commit`] once all layers are written.
    ///
    /// [`commit`]: KvCache::commit
    pub fn write(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let n = self.store(layer, k, v)?;
        let (h, d, total) = (self.kv_heads, self.head_dim, self.len + n);
        let slot = self.host_layer_mut(layer)?;
        let view = |buf: &Arc<AlignedBuf>| {
            Tensor::new(
                Shape::new(vec![total, h, d])?,
                DType::F32,
                Storage::Host(buf.clone()),
            )
        };
        Ok((view(&slot.k)?, view(&slot.v)?))
    }

    /// As [`write`](KvCache::write) without returning the prefix (the graph path, whose
    /// graph already concatenated it).
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        self.store(layer, k, v).map(|_| ())
    }

    /// The committed keys and values of `layer`, each `[kv_heads, len, head_dim]` (a host
    /// cache; the graph path feeds them to its template as the past): copies, head-major.
    pub fn host_prefix(&self, layer: usize) -> Result<(Tensor, Tensor)> {
        let (h, d, len) = (self.kv_heads, self.head_dim, self.len);
        let Layers::Host(layers) = &self.layers else {
            return Err(host_only());
        };
        let slot = layers.get(layer).ok_or_else(|| outside(layer))?;
        let one = |buf: &AlignedBuf| {
            let src: &[f32] = bytemuck::cast_slice(buf.as_bytes());
            if src.len() < len * h * d {
                return Err(Error::invalid(
                    "kv_cache",
                    "internal: a layer was not written",
                ));
            }
            let mut out = AlignedBuf::for_overwrite(h * len * d * 4);
            let dst: &mut [f32] = bytemuck::cast_slice_mut(out.as_bytes_mut());
            for t in 0..len {
                for head in 0..h {
                    dst[(head * len + t) * d..][..d]
                        .copy_from_slice(&src[(t * h + head) * d..][..d]);
                }
            }
            Tensor::new(
                Shape::new(vec![h, len, d])?,
                DType::F32,
                Storage::Host(Arc::new(out)),
            )
        };
        Ok((one(&slot.k)?, one(&slot.v)?))
    }

    /// Writes the committed keys and values of every layer to `out` as little-endian f32,
    /// layer by layer, keys then values, each token-major `[len, kv_heads, head_dim]` (a host
    /// cache): what [`read_rows`](KvCache::read_rows) takes back.
    /// `path` names the file in errors.
    pub fn write_rows(&self, out: &mut dyn std::io::Write, path: &std::path::Path) -> Result<()> {
        let Layers::Host(layers) = &self.layers else {
            return Err(host_only());
        };
        let bytes = self.len * self.kv_heads * self.head_dim * 4;
        for slot in layers {
            for buf in [&slot.k, &slot.v] {
                let src = buf.as_bytes().get(..bytes).ok_or_else(|| {
                    Error::invalid("kv_cache", "internal: a layer was not written")
                })?;
                out.write_all(src).map_err(|e| Error::Io {
                    path: path.into(),
                    source: e,
                })?;
            }
        }
        Ok(())
    }

    /// Replaces the cache's contents with `len` tokens' keys and values read from `input` in
    /// [`write_rows`](KvCache::write_rows)' layout. On an error the cache is left empty.
    pub fn read_rows(
        &mut self,
        len: usize,
        input: &mut dyn std::io::Read,
        path: &std::path::Path,
    ) -> Result<()> {
        self.clear();
        if len > self.capacity {
            return Err(Error::invalid(
                "kv_cache",
                format!("{len} tokens do not fit a context of {}", self.capacity),
            ));
        }
        let bytes = len * self.kv_heads * self.head_dim * 4;
        let Layers::Host(layers) = &mut self.layers else {
            return Err(host_only());
        };
        for slot in layers.iter_mut() {
            for buf in [&mut slot.k, &mut slot.v] {
                let buf = Arc::make_mut(buf);
                if !buf.set_len(bytes) {
                    return Err(Error::invalid(
                        "kv_cache",
                        "internal: buffer below capacity",
                    ));
                }
                input
                    .read_exact(&mut buf.as_bytes_mut()[..bytes])
                    .map_err(|e| Error::Io {
                        path: path.into(),
                        source: e,
                    })?;
            }
        }
        self.len = len;
        Ok(())
    }

    /// Copies the new rows into place and makes the buffers' length cover them; returns how
    /// many tokens they hold.
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
        let row = h * d;
        let slot = self.host_layer_mut(layer)?;
        for (src, buf) in [(k, &mut slot.k), (v, &mut slot.v)] {
            let src = src.as_f32()?;
            // The buffer itself when no tensor of an earlier write is alive, else a copy.
            let buf = Arc::make_mut(buf);
            if !buf.set_len((start + n) * row * 4) {
                return Err(Error::invalid(
                    "kv_cache",
                    "internal: buffer below capacity",
                ));
            }
            let dst: &mut [f32] = bytemuck::cast_slice_mut(buf.as_bytes_mut());
            dst[start * row..].copy_from_slice(&src[..n * row]);
        }
        Ok(n)
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
    fn write_then_commit_keeps_the_prefix_in_token_order() {
        let mut c = KvCache::new(1, 2, 3, 4).unwrap();
        let step = |base: f32, n: usize| {
            let v: Vec<f32> = (0..n * 6).map(|i| base + i as f32).collect();
            Tensor::from_f32(&[n, 2, 3], &v).unwrap()
        };
        let (k, _) = c.write(0, &step(0.0, 2), &step(100.0, 2)).unwrap();
        assert_eq!(k.dims(), [2, 2, 3]);
        c.commit(2).unwrap();
        // `k` is still held: the next write must not change what it shows.
        let (k2, v2) = c.write(0, &step(50.0, 1), &step(150.0, 1)).unwrap();
        c.commit(1).unwrap();
        assert_eq!(
            k.to_f32_vec().unwrap(),
            (0..12).map(|i| i as f32).collect::<Vec<_>>()
        );
        let k2 = k2.to_f32_vec().unwrap();
        // token 0 (heads 0, 1), token 1, token 2.
        assert_eq!(
            &k2[..12],
            &(0..12).map(|i| i as f32).collect::<Vec<_>>()[..]
        );
        assert_eq!(&k2[12..], &[50., 51., 52., 53., 54., 55.]);
        assert_eq!(v2.to_f32_vec().unwrap()[12..15], [150., 151., 152.]);
        assert_eq!((c.len(), c.remaining()), (3, 1));
        // The graph path's prefix is head-major.
        let (hk, _) = c.host_prefix(0).unwrap();
        assert_eq!(hk.dims(), [2, 3, 3]);
        assert_eq!(
            hk.to_f32_vec().unwrap(),
            [0., 1., 2., 6., 7., 8., 50., 51., 52., 3., 4., 5., 9., 10., 11., 53., 54., 55.]
        );
        assert!(c.write(0, &step(0.0, 2), &step(0.0, 2)).is_err());
        assert!(c.write(1, &step(0.0, 1), &step(0.0, 1)).is_err());
        c.truncate(1);
        assert_eq!(c.len(), 1);
        // Written over in place once nothing else holds the buffer.
        drop((k, k2, v2, hk));
        let (k3, _) = c.write(0, &step(70.0, 1), &step(170.0, 1)).unwrap();
        assert_eq!(k3.dims(), [2, 2, 3]);
        assert_eq!(
            &k3.to_f32_vec().unwrap()[6..],
            &[70., 71., 72., 73., 74., 75.]
        );
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

//! Device buffers: what a `Tensor` on this backend holds, and which host bytes are worth keeping
//! resident.
//!
//! The dispatcher moves every host input of every op with `Backend::upload_tensor`. Model
//! weights live in shared storage (a file mapping), so such an upload is kept, keyed by the
//! address of its bytes, while the backend holds the storage's owner (the address cannot be
//! reused for other bytes meanwhile); every other upload (token ids, positions, KV cache rows)
//! is copied again into a frame buffer.

use cyb_tensor::{DType, DeviceBuffer, Result, Shape, Storage, Tensor};
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Uploads up to this size keep a host copy (ids, positions, rope frequency factors).
const HOST_SHADOW_MAX: usize = 64 * 1024;

/// Host copy of a small device tensor's bytes.
pub type HostShadow = Option<Arc<[u8]>>;

/// The host copy kept for an upload of `data` (only small ones keep one).
pub fn shadow(data: &[u8]) -> HostShadow {
    (data.len() <= HOST_SHADOW_MAX).then(|| Arc::from(data))
}

/// What a buffer holds, for the memory report (`CYB_WGPU_MEMORY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemKind {
    /// Model weights uploaded once and kept (`resident_upload`).
    Weights = 0,
    /// Buffers a caller keeps across steps (`Backend::alloc`: KV caches).
    Kept = 1,
    /// Frame buffers: activations, uploads and scratch, pooled between steps.
    Frame = 2,
    /// Parameters of replayed steps and small spare bindings.
    Other = 3,
}

const KINDS: usize = 4;
const KIND_NAMES: [&str; KINDS] = ["weights", "kept (KV caches)", "frame buffers", "other"];

/// Bytes of the buffers a backend made that are still alive, and the most at once, in all and
/// by kind.
#[derive(Debug, Default)]
pub struct MemoryCounter {
    current: AtomicU64,
    peak: AtomicU64,
    by_kind: [AtomicU64; KINDS],
    /// Each kind's bytes when the total peaked.
    at_peak: [AtomicU64; KINDS],
    kind_peak: [AtomicU64; KINDS],
    largest: [AtomicU64; KINDS],
}

impl MemoryCounter {
    fn add(&self, bytes: u64, kind: MemKind) {
        let k = kind as usize;
        let mine = self.by_kind[k].fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.kind_peak[k].fetch_max(mine, Ordering::Relaxed);
        self.largest[k].fetch_max(bytes, Ordering::Relaxed);
        let now = self.current.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if self.peak.fetch_max(now, Ordering::Relaxed) < now {
            for (at, by) in self.at_peak.iter().zip(&self.by_kind) {
                at.store(by.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
    }

    fn sub(&self, bytes: u64, kind: MemKind) {
        self.by_kind[kind as usize].fetch_sub(bytes, Ordering::Relaxed);
        self.current.fetch_sub(bytes, Ordering::Relaxed);
    }

    pub fn get(&self) -> cyb_backend::DeviceMemory {
        cyb_backend::DeviceMemory {
            current: self.current.load(Ordering::Relaxed),
            peak: self.peak.load(Ordering::Relaxed),
        }
    }

    /// What the memory report prints: the peak, what each kind held then, each kind's own
    /// peak and its largest buffer.
    pub fn report(&self) -> String {
        let mib = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / (1 << 20) as f64;
        let mut out = format!(
            "wgpu device memory: peak {:.1} MiB, now {:.1} MiB\n",
            mib(&self.peak),
            mib(&self.current)
        );
        for (k, name) in KIND_NAMES.iter().enumerate() {
            out.push_str(&format!(
                "  {:<17} {:>10.1} MiB at the peak, {:>10.1} MiB at most, largest buffer {:.1} MiB\n",
                name,
                mib(&self.at_peak[k]),
                mib(&self.kind_peak[k]),
                mib(&self.largest[k])
            ));
        }
        out
    }
}

/// One wgpu buffer; its size is the tensor's byte length rounded up to 4.
#[derive(Debug)]
pub struct GpuBuf {
    pub buffer: wgpu::Buffer,
    /// Unique for the life of the process (never reused, unlike an address): the key of the
    /// bind groups that use this buffer.
    pub id: u64,
    /// Where its bytes are counted while it lives.
    counter: Arc<MemoryCounter>,
    kind: MemKind,
}

impl GpuBuf {
    /// A buffer of `kind` whose size `counter` holds until it is dropped.
    pub fn counted(buffer: wgpu::Buffer, counter: &Arc<MemoryCounter>, kind: MemKind) -> GpuBuf {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        counter.add(buffer.size(), kind);
        GpuBuf {
            buffer,
            id,
            counter: counter.clone(),
            kind,
        }
    }
}

impl Drop for GpuBuf {
    fn drop(&mut self) {
        self.counter.sub(self.buffer.size(), self.kind);
    }
}

/// A tensor's view of a buffer: the logical byte length (the buffer may be padded) and, for
/// small uploads, a host copy of the bytes (ops such as rope and embedding read ids and
/// positions on the host).
#[derive(Debug)]
pub struct DeviceView {
    /// The buffer; for a lazy slice, its source until the copy is recorded (read the values
    /// through [`DeviceView::buffer`]).
    pub buf: Arc<GpuBuf>,
    pub len: usize,
    pub host: HostShadow,
    /// Set on a slice whose copy into a buffer of its own may not be recorded yet (see
    /// [`LazySlice`]).
    pub lazy: Option<Arc<LazySlice>>,
}

/// A slice `[.., 0..rows, inner]` along the second-to-last axis of `src` (`[.., src_rows,
/// inner]`) whose buffer is made and filled only when something reads it: attention reads the
/// KV cache's prefix in place instead (one launch, one buffer and one copy of the whole prefix
/// fewer per layer and step). Only `Op::KvAppend` writes into an existing buffer, and it
/// records the copies of the slices of its cache first, so a slice never sees later writes.
#[derive(Debug)]
pub struct LazySlice {
    pub src: Arc<GpuBuf>,
    /// Rows of `src` per outer index (the cache's capacity).
    pub src_rows: usize,
    /// The copy: iteration dims, source and destination strides (elements), bytes.
    pub dims: Vec<usize>,
    pub src_strides: Vec<usize>,
    pub dst_strides: Vec<usize>,
    pub bytes: usize,
    /// The slice's own buffer, once its copy is recorded.
    pub dst: std::sync::OnceLock<Arc<GpuBuf>>,
}

impl DeviceView {
    /// The buffer holding the tensor's values (an error for a lazy slice not copied yet: its
    /// reader should have recorded the copy first).
    pub fn buffer(&self) -> Result<Arc<GpuBuf>> {
        match &self.lazy {
            None => Ok(self.buf.clone()),
            Some(l) => l.dst.get().cloned().ok_or_else(|| {
                cyb_tensor::Error::invalid("wgpu", "internal: a lazy slice read before its copy")
            }),
        }
    }

    /// A tensor of `shape` and `dtype` over this view.
    pub fn into_tensor(self, shape: Shape, dtype: DType) -> Result<Tensor> {
        Tensor::new(shape, dtype, Storage::Device(Arc::new(self)))
    }
}

impl DeviceBuffer for DeviceView {
    fn backend(&self) -> &str {
        "wgpu"
    }
    fn byte_len(&self) -> usize {
        self.len
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Bytes rounded up to whole u32 words (WGSL reads buffers as `array<u32>`).
pub fn padded(len: usize) -> u64 {
    (len.max(4) as u64).div_ceil(4) * 4
}

/// `data` zero-extended to `padded(data.len())` bytes, the length a queue write takes.
pub fn padded_vec(data: &[u8]) -> Vec<u8> {
    let mut v = data.to_vec();
    v.resize(padded(data.len()) as usize, 0);
    v
}

/// Key of a resident upload.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ResidentKey {
    pub addr: usize,
    pub len: usize,
    pub dtype: cyb_tensor::DType,
}

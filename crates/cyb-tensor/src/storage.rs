//! Where a tensor's bytes live: an owned host buffer, a slice of shared read-only memory (a
//! GGUF or safetensors mmap, used in place), or a buffer on a backend device.
//!
//! Nothing outside this module may assume host memory: code asks `Storage::host_bytes` and
//! handles `None` (a device buffer) by going through the backend that owns it.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// A 64-byte aligned chunk, so host buffers can be viewed as any scalar type and suit SIMD loads.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Chunk([u8; 64]);

/// An owned, 64-byte aligned, zero-initialised host byte buffer.
#[derive(Clone)]
pub struct AlignedBuf {
    chunks: Vec<Chunk>,
    len: usize,
}

impl AlignedBuf {
    /// `len` zero bytes (in a recycled buffer when one fits: zeroing memory still in cache is
    /// cheaper than faulting in fresh pages).
    pub fn zeroed(len: usize) -> AlignedBuf {
        let n = len.div_ceil(64);
        let mut chunks = take_spare(len).unwrap_or_default();
        chunks.clear();
        chunks.resize(n, Chunk([0; 64]));
        AlignedBuf { chunks, len }
    }

    /// `len` bytes of unspecified (initialised) content, for a result its maker overwrites
    /// entirely: a recently dropped buffer of a fitting size when one is kept (no zero fill,
    /// and often still in cache), else a zeroed one.
    pub fn for_overwrite(len: usize) -> AlignedBuf {
        match take_spare(len) {
            Some(mut chunks) => {
                chunks.resize(len.div_ceil(64), Chunk([0; 64]));
                AlignedBuf { chunks, len }
            }
            None => AlignedBuf::zeroed(len),
        }
    }

    /// A copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(bytes.len());
        b.as_bytes_mut().copy_from_slice(bytes);
        b
    }

    /// An empty buffer with room for `capacity` zero bytes, or `None` when that much memory
    /// cannot be had (instead of aborting).
    pub fn try_with_capacity(capacity: usize) -> Option<AlignedBuf> {
        let n = capacity.div_ceil(64);
        let mut chunks = Vec::new();
        chunks.try_reserve_exact(n).ok()?;
        chunks.resize(n, Chunk([0; 64]));
        Some(AlignedBuf { chunks, len: 0 })
    }

    /// Bytes the buffer can hold without reallocating.
    pub fn capacity(&self) -> usize {
        self.chunks.len() * 64
    }

    /// Sets the length to `len` (at most [`capacity`](AlignedBuf::capacity)); bytes that come
    /// into view hold what was last written there (zero if nothing was). False, and nothing
    /// changed, when `len` exceeds the capacity.
    pub fn set_len(&mut self, len: usize) -> bool {
        if len > self.capacity() {
            return false;
        }
        self.len = len;
        true
    }

    pub fn as_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<Chunk, u8>(&self.chunks)[..self.len]
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<Chunk, u8>(&mut self.chunks)[..self.len]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// Dropped buffers of `SPARE_MIN..=SPARE_MAX` bytes are kept, up to `SPARE_BYTES` in all, for
/// [`AlignedBuf::for_overwrite`]: the activations of a forward pass are allocated and dropped
/// by the dozen, and zero-filling fresh ones cost more than some of the ops writing them.
const SPARE_MIN: usize = 64 << 10;
const SPARE_MAX: usize = 32 << 20;
const SPARE_BYTES: usize = 128 << 20;
static SPARE: Mutex<Vec<Vec<Chunk>>> = Mutex::new(Vec::new());

/// A kept buffer with room for `len` bytes (and not more than twice that), newest first.
fn take_spare(len: usize) -> Option<Vec<Chunk>> {
    if !(SPARE_MIN..=SPARE_MAX).contains(&len) {
        return None;
    }
    let n = len.div_ceil(64);
    let mut spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner);
    let i = spare
        .iter()
        .rposition(|c| c.capacity() >= n && c.capacity() <= 2 * n)?;
    Some(spare.swap_remove(i))
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let bytes = self.chunks.capacity() * 64;
        if !(SPARE_MIN..=SPARE_MAX).contains(&bytes) {
            return;
        }
        let mut spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner);
        let mut held: usize = spare.iter().map(|c| c.capacity() * 64).sum();
        // Oldest out first.
        while held + bytes > SPARE_BYTES && !spare.is_empty() {
            held -= spare.remove(0).capacity() * 64;
        }
        spare.push(std::mem::take(&mut self.chunks));
    }
}

/// A buffer owned by a backend (GPU memory and the like). The backend that made it downcasts
/// through `as_any`; everyone else only sees its size and owner.
pub trait DeviceBuffer: Send + Sync + fmt::Debug {
    /// Name of the backend that owns the buffer.
    fn backend(&self) -> &str;
    /// Size in bytes.
    fn byte_len(&self) -> usize;
    fn as_any(&self) -> &dyn Any;
}

/// The bytes behind a tensor. Cloning is cheap (reference counted).
#[derive(Clone)]
pub enum Storage {
    /// An owned host buffer.
    Host(Arc<AlignedBuf>),
    /// `len` bytes at `offset` of shared read-only memory, such as a file mapping; the tensor
    /// keeps the owner alive.
    Shared {
        owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
        offset: usize,
        len: usize,
    },
    /// Memory of a backend device.
    Device(Arc<dyn DeviceBuffer>),
}

impl Storage {
    /// The bytes, when they are in host memory. `None` for device buffers and for a `Shared`
    /// range that does not fit its owner (which `Tensor::new` refuses, so only hand-made storages).
    pub fn host_bytes(&self) -> Option<&[u8]> {
        match self {
            Storage::Host(b) => Some(b.as_bytes()),
            Storage::Shared { owner, offset, len } => {
                let end = offset.checked_add(*len)?;
                (**owner).as_ref().get(*offset..end)
            }
            Storage::Device(_) => None,
        }
    }

    /// Size in bytes.
    pub fn byte_len(&self) -> usize {
        match self {
            Storage::Host(b) => b.len(),
            Storage::Shared { len, .. } => *len,
            Storage::Device(d) => d.byte_len(),
        }
    }

    /// `"host"`, `"mmap"` or the owning backend's name.
    pub fn location(&self) -> &str {
        match self {
            Storage::Host(_) => "host",
            Storage::Shared { .. } => "mmap",
            Storage::Device(d) => d.backend(),
        }
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Storage({}, {} bytes)", self.location(), self.byte_len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_moves_within_the_capacity() {
        let mut b = AlignedBuf::try_with_capacity(100).unwrap();
        assert_eq!((b.len(), b.capacity()), (0, 128));
        assert!(b.set_len(100));
        b.as_bytes_mut().fill(3);
        assert!(b.set_len(10) && b.set_len(128));
        assert_eq!(&b.as_bytes()[..100], &[3; 100][..]);
        assert_eq!(&b.as_bytes()[100..], &[0; 28][..]);
        assert!(!b.set_len(129));
        assert_eq!(b.len(), 128);
        assert!(AlignedBuf::try_with_capacity(usize::MAX).is_none());
    }

    #[test]
    fn for_overwrite_reuses_dropped_buffers() {
        let mut a = AlignedBuf::for_overwrite(100_000);
        a.as_bytes_mut().fill(7);
        let ptr = a.as_bytes().as_ptr();
        drop(a);
        // Other tests may take it first; either way the length and alignment hold.
        let b = AlignedBuf::for_overwrite(99_000);
        assert_eq!(b.len(), 99_000);
        assert_eq!(b.as_bytes().as_ptr() as usize % 64, 0);
        if b.as_bytes().as_ptr() == ptr {
            assert!(b.as_bytes().iter().all(|&x| x == 7));
        }
        drop(b);
        let mut c = AlignedBuf::for_overwrite(100_000);
        c.as_bytes_mut().fill(9);
        drop(c);
        // A zeroed buffer is zero, also when it is a recycled dirty one.
        assert!(AlignedBuf::zeroed(98_000)
            .as_bytes()
            .iter()
            .all(|&x| x == 0));
        // Small requests are never served from the spares.
        assert!(AlignedBuf::for_overwrite(100)
            .as_bytes()
            .iter()
            .all(|&x| x == 0));
    }

    #[test]
    fn aligned_and_shared() {
        let b = AlignedBuf::from_bytes(&[1, 2, 3]);
        assert_eq!(b.as_bytes(), &[1, 2, 3]);
        assert_eq!(b.as_bytes().as_ptr() as usize % 64, 0);
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(vec![0u8, 1, 2, 3, 4]);
        let s = Storage::Shared {
            owner: owner.clone(),
            offset: 1,
            len: 3,
        };
        assert_eq!(s.host_bytes(), Some(&[1u8, 2, 3][..]));
        let bad = Storage::Shared {
            owner,
            offset: 4,
            len: 3,
        };
        assert_eq!(bad.host_bytes(), None);
    }
}

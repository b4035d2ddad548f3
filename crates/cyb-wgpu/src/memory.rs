//! Device buffers: what a `Tensor` on this backend holds, and which host bytes are worth keeping
//! resident.
//!
//! The dispatcher uploads every host input of every op. Model weights are read-only mappings of
//! the model file, so an upload whose bytes lie in a read-only *file* mapping is kept, keyed by
//! address, size and a sample of its bytes, and later uploads of the same range reuse it; every
//! other upload (token ids, positions, the KV cache rows) is copied again into a frame buffer.

use cyb_tensor::DeviceBuffer;
use std::any::Any;
use std::sync::Arc;

/// One wgpu buffer; its size is the tensor's byte length rounded up to 4.
#[derive(Debug)]
pub struct GpuBuf {
    pub buffer: wgpu::Buffer,
}

/// A tensor's view of a buffer: the logical byte length (the buffer may be padded) and, for
/// small uploads, a host copy of the bytes (ops such as rope and embedding read ids and
/// positions on the host).
#[derive(Debug)]
pub struct DeviceView {
    pub buf: Arc<GpuBuf>,
    pub len: usize,
    pub host: Option<Arc<[u8]>>,
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

/// A cheap fingerprint of `data`: its length and 64 bytes sampled across it.
pub fn fingerprint(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ data.len() as u64;
    if data.is_empty() {
        return h;
    }
    for i in 0..64u64 {
        let at = (i as usize * (data.len() - 1)) / 63;
        if let Some(&b) = data.get(at) {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

/// The read-only file mappings of this process (Linux: from /proc/self/maps), as address ranges.
#[derive(Default)]
pub struct FileMappings {
    ranges: Vec<(usize, usize)>,
}

impl FileMappings {
    /// Re-reads the process's mappings.
    pub fn refresh(&mut self) {
        self.ranges.clear();
        let Ok(text) = std::fs::read_to_string("/proc/self/maps") else {
            return;
        };
        for line in text.lines() {
            let mut f = line.split_whitespace();
            let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode), Some(path)) =
                (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
            else {
                continue;
            };
            if inode == "0" || perms.starts_with("rw") || !path.starts_with('/') {
                continue;
            }
            let Some((a, b)) = range.split_once('-') else {
                continue;
            };
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                self.ranges.push((a, b));
            }
        }
    }

    /// True if `data` lies inside one read-only file mapping.
    pub fn contains(&self, data: &[u8]) -> bool {
        let start = data.as_ptr() as usize;
        let end = start.saturating_add(data.len());
        self.ranges.iter().any(|&(a, b)| a <= start && end <= b)
    }
}

/// Key of a resident upload.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ResidentKey {
    pub addr: usize,
    pub len: usize,
    pub dtype: cyb_tensor::DType,
}

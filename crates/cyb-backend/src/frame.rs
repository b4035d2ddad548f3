//! The per-backend frame allocator of spec/execution-contract: activation buffers of one forward
//! step are handed out from a pool keyed by exact byte size and usage; at the start of the next
//! step every buffer handed out goes back to the pool. The pool grows to the steady-state size
//! of a step and then stays flat.

use cyb_tensor::Result;
use std::collections::HashMap;

/// What a buffer is used for; pools are kept apart per usage (storage vs uniform on wgpu).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferUsage {
    Storage,
    Uniform,
    Staging,
}

/// Allocator statistics, for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameStats {
    /// Buffers created by the backend since the allocator was made.
    pub created: u64,
    /// Bytes of every buffer owned (pooled and in use).
    pub owned_bytes: u64,
    /// Buffers handed out in the current step.
    pub in_use: usize,
}

/// A pool of backend buffers `B` (cheap handles, such as `Arc`s or wgpu buffers), bucketed by
/// exact size: no rounding up, so reuse within a size is perfect.
pub struct FrameAllocator<B> {
    pool: HashMap<(u64, BufferUsage), Vec<B>>,
    in_use: Vec<(u64, BufferUsage, B)>,
    stats: FrameStats,
}

impl<B: Clone> Default for FrameAllocator<B> {
    fn default() -> Self {
        FrameAllocator {
            pool: HashMap::new(),
            in_use: Vec::new(),
            stats: FrameStats::default(),
        }
    }
}

impl<B: Clone> FrameAllocator<B> {
    pub fn new() -> Self {
        Self::default()
    }

    /// A buffer of exactly `size` bytes for `usage`: a pooled one if any is free, else one made
    /// by `create`. The allocator keeps a handle until `reset`.
    pub fn alloc(
        &mut self,
        size: u64,
        usage: BufferUsage,
        create: impl FnOnce(u64) -> Result<B>,
    ) -> Result<B> {
        let buf = match self.pool.get_mut(&(size, usage)).and_then(Vec::pop) {
            Some(b) => b,
            None => {
                let b = create(size)?;
                self.stats.created += 1;
                self.stats.owned_bytes += size;
                b
            }
        };
        self.in_use.push((size, usage, buf.clone()));
        self.stats.in_use = self.in_use.len();
        Ok(buf)
    }

    /// Returns every buffer handed out since the last reset to the pool. Call at the start of a
    /// forward step, when the previous step's work is complete.
    ///
    /// Buffers go back in reverse order, so that a step that allocates the same sizes in the
    /// same order as the last one gets the same buffers for the same allocations (a backend's
    /// caches keyed by buffer, such as bind groups, then see one set of keys, not two).
    pub fn reset(&mut self) {
        for (size, usage, b) in self.in_use.drain(..).rev() {
            self.pool.entry((size, usage)).or_default().push(b);
        }
        self.stats.in_use = 0;
    }

    pub fn stats(&self) -> FrameStats {
        self.stats
    }

    /// The buffers handed out since the last reset.
    pub fn in_use(&self) -> impl Iterator<Item = &B> {
        self.in_use.iter().map(|(_, _, b)| b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn reuses_exact_sizes_after_reset() {
        let mut fa: FrameAllocator<Arc<Vec<u8>>> = FrameAllocator::new();
        let make = |n: u64| Ok(Arc::new(vec![0u8; n as usize]));
        for _step in 0..3 {
            fa.reset();
            let a = fa.alloc(100, BufferUsage::Storage, make).unwrap();
            let b = fa.alloc(100, BufferUsage::Storage, make).unwrap();
            let c = fa.alloc(64, BufferUsage::Uniform, make).unwrap();
            assert!(!Arc::ptr_eq(&a, &b));
            assert_eq!((a.len(), c.len()), (100, 64));
        }
        // Steady state after the first step: nothing new made, pool flat.
        assert_eq!(fa.stats().created, 3);
        assert_eq!(fa.stats().owned_bytes, 264);
        // A different size is a different bucket: no over-allocation, a new buffer.
        fa.alloc(101, BufferUsage::Storage, make).unwrap();
        assert_eq!(fa.stats().created, 4);
        // Same size, other usage: separate pool.
        fa.reset();
        fa.alloc(64, BufferUsage::Storage, make).unwrap();
        assert_eq!(fa.stats().created, 5);
    }

    /// A step allocating the same sizes in the same order as the last gets the same buffer for
    /// each allocation, every step (not two alternating sets).
    #[test]
    fn same_order_same_buffers() {
        let mut fa: FrameAllocator<Arc<u32>> = FrameAllocator::new();
        let mut next = 0u32;
        let mut step = |fa: &mut FrameAllocator<Arc<u32>>| -> Vec<u32> {
            fa.reset();
            [8u64, 8, 16, 8]
                .iter()
                .map(|&n| {
                    let b = fa.alloc(n, BufferUsage::Storage, |_| {
                        next += 1;
                        Ok(Arc::new(next))
                    });
                    *b.unwrap()
                })
                .collect()
        };
        let first = step(&mut fa);
        for _ in 0..3 {
            assert_eq!(step(&mut fa), first);
        }
    }
}

//! The per-backend frame allocator of spec/execution-contract: activation buffers of one forward
//! step are handed out from a pool keyed by exact byte size and usage. A buffer goes back to
//! the pool at the start of the next step, or earlier, within the step, once nothing but the
//! allocator holds it (`alloc_reusing`): a device executes a step's work in the order it was
//! recorded, so a later op may write a buffer whose readers were recorded before it, and a
//! step's activations take about one layer's worth of buffers instead of every layer's. The
//! pool grows to the steady-state size of a step and then stays flat; buckets of large
//! buffers no step has used for a while are released (`reset` returns them).

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
    /// Buffers released for having gone unused (see [`FrameAllocator::reset`]).
    pub released: u64,
}

/// Buffers at least this large are released when no step has used their size for
/// [`IDLE_STEPS`] steps (a long prompt's activations, not a decode step's).
pub const RELEASE_MIN_BYTES: u64 = 16 << 20;
/// Steps a bucket of large buffers may go unused before its buffers are released.
pub const IDLE_STEPS: u64 = 8;

#[derive(Default)]
struct Bucket<B> {
    free: Vec<B>,
    /// Handed out this step, in order.
    in_use: Vec<B>,
    /// The step that last took a buffer of this size.
    last_step: u64,
}

/// A pool of backend buffers `B` (cheap handles, such as `Arc`s or wgpu buffers), bucketed by
/// exact size: no rounding up, so reuse within a size is perfect.
pub struct FrameAllocator<B> {
    buckets: HashMap<(u64, BufferUsage), Bucket<B>>,
    step: u64,
    stats: FrameStats,
}

impl<B: Clone> Default for FrameAllocator<B> {
    fn default() -> Self {
        FrameAllocator {
            buckets: HashMap::new(),
            step: 0,
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
        self.alloc_reusing(size, usage, |_| false, create)
    }

    /// As [`alloc`](Self::alloc), and a buffer handed out earlier in this step for which
    /// `idle` says nothing else holds it is handed out again (the earliest such one).
    pub fn alloc_reusing(
        &mut self,
        size: u64,
        usage: BufferUsage,
        idle: impl Fn(&B) -> bool,
        create: impl FnOnce(u64) -> Result<B>,
    ) -> Result<B> {
        let step = self.step;
        let bucket = self.buckets.entry((size, usage)).or_insert_with(|| Bucket {
            free: Vec::new(),
            in_use: Vec::new(),
            last_step: step,
        });
        bucket.last_step = step;
        if let Some(b) = bucket.in_use.iter().find(|b| idle(b)) {
            return Ok(b.clone());
        }
        let buf = match bucket.free.pop() {
            Some(b) => b,
            None => {
                let b = create(size)?;
                self.stats.created += 1;
                self.stats.owned_bytes += size;
                b
            }
        };
        bucket.in_use.push(buf.clone());
        self.stats.in_use += 1;
        Ok(buf)
    }

    /// Returns every buffer handed out since the last reset to the pool. Call at the start of a
    /// forward step, when the previous step's work is complete. Returns the pooled buffers of
    /// at least [`RELEASE_MIN_BYTES`] whose size no step took for [`IDLE_STEPS`] steps, which
    /// the allocator forgets (the caller drops what else refers to them).
    ///
    /// Buffers go back in reverse order, so that a step that allocates the same sizes in the
    /// same order as the last one gets the same buffers for the same allocations (a backend's
    /// caches keyed by buffer, such as bind groups, then see one set of keys, not two).
    pub fn reset(&mut self) -> Vec<B> {
        self.step += 1;
        let mut released = Vec::new();
        let mut released_bytes = 0;
        let step = self.step;
        self.buckets.retain(|&(size, _), bucket| {
            while let Some(b) = bucket.in_use.pop() {
                bucket.free.push(b);
            }
            let idle = step.saturating_sub(bucket.last_step) > IDLE_STEPS;
            if idle && size >= RELEASE_MIN_BYTES {
                released_bytes += size * bucket.free.len() as u64;
                released.append(&mut bucket.free);
                return false;
            }
            true
        });
        self.stats.in_use = 0;
        self.stats.owned_bytes -= released_bytes;
        self.stats.released += released.len() as u64;
        released
    }

    pub fn stats(&self) -> FrameStats {
        self.stats
    }

    /// The buffers handed out since the last reset.
    pub fn in_use(&self) -> impl Iterator<Item = &B> {
        self.buckets.values().flat_map(|b| b.in_use.iter())
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

    /// Within a step a buffer nothing else holds is handed out again; one still held is not.
    #[test]
    fn idle_buffers_are_reused_within_a_step() {
        let mut fa: FrameAllocator<Arc<u32>> = FrameAllocator::new();
        let mut next = 0u32;
        let mut make = |_| {
            next += 1;
            Ok(Arc::new(next))
        };
        let idle = |b: &Arc<u32>| Arc::strong_count(b) == 1;
        let a = fa
            .alloc_reusing(64, BufferUsage::Storage, idle, &mut make)
            .unwrap();
        let b = fa
            .alloc_reusing(64, BufferUsage::Storage, idle, &mut make)
            .unwrap();
        assert_ne!(a, b);
        drop(a);
        let c = fa
            .alloc_reusing(64, BufferUsage::Storage, idle, &mut make)
            .unwrap();
        assert_eq!(*c, 1, "the dropped buffer comes back");
        let d = fa
            .alloc_reusing(64, BufferUsage::Storage, idle, &mut make)
            .unwrap();
        assert_eq!(*d, 3, "held ones do not");
        assert_eq!(fa.stats().created, 3);
        drop((b, c, d));
        // Across steps as before, in allocation order.
        fa.reset();
        let e = fa
            .alloc_reusing(64, BufferUsage::Storage, idle, &mut make)
            .unwrap();
        assert_eq!(*e, 1);
        assert_eq!(fa.stats().created, 3);
    }

    /// Large buckets no step used for IDLE_STEPS steps are released; small ones stay.
    #[test]
    fn idle_large_buckets_are_released() {
        let mut fa: FrameAllocator<Arc<u64>> = FrameAllocator::new();
        let make = |n: u64| Ok(Arc::new(n));
        fa.alloc(RELEASE_MIN_BYTES, BufferUsage::Storage, make)
            .unwrap();
        fa.alloc(1024, BufferUsage::Storage, make).unwrap();
        let mut released = Vec::new();
        for _ in 0..IDLE_STEPS {
            released.extend(fa.reset());
        }
        assert!(released.is_empty(), "released too early");
        released.extend(fa.reset());
        assert_eq!(released.len(), 1);
        assert_eq!(*released[0], RELEASE_MIN_BYTES);
        assert_eq!(fa.stats().owned_bytes, 1024);
        assert_eq!(fa.stats().released, 1);
        // The size made again when asked for.
        fa.alloc(RELEASE_MIN_BYTES, BufferUsage::Storage, make)
            .unwrap();
        assert_eq!(fa.stats().created, 3);
    }
}

//! Spreading the element-wise and row-wise ops over the pool: contiguous ranges of whole
//! units (elements, rows), one per thread, each computed exactly as the single-threaded loop
//! would, so results do not depend on the thread count. The persistent thread pool itself is
//! `pool.rs`; `wide_x86.rs` compiles a closure for the wider vector units.

pub(crate) mod pool;
#[cfg(target_arch = "x86_64")]
mod wide_x86;

use crate::features::KernelSet;
use cyb_tensor::{AlignedBuf, DType, Result, Shape, Storage, Tensor};
use pool::{split, DisjointOut, ThreadPool};
use std::sync::Arc;

/// Below this many output elements one thread does the whole op: a parallel section costs a
/// few microseconds, more than the work (decode-sized tensors).
const PAR_MIN: usize = 32 * 1024;

/// The pool and the vector width the ops run with.
#[derive(Clone, Copy)]
pub(crate) struct Par<'a> {
    pub pool: &'a ThreadPool,
    pub set: KernelSet,
}

/// `f()` compiled for `set`'s vector units (see `wide_x86`).
#[inline(always)]
pub(crate) fn wide<R>(set: KernelSet, f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        wide_x86::wide(set, f)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = set;
        f()
    }
}

impl Par<'_> {
    /// Calls `f(first_unit, out_part)` on contiguous parts of `out`, each a whole number of
    /// `unit`-element units (`out.len()` is a multiple of `unit`), in parallel when `out` is
    /// large.
    pub fn fill(&self, out: &mut [f32], unit: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
        let unit = unit.max(1);
        let units = out.len() / unit;
        let threads = if out.len() < PAR_MIN {
            1
        } else {
            self.pool.threads().min(units)
        };
        let set = self.set;
        if threads <= 1 {
            wide(
                set,
                #[inline(always)]
                || f(0, out),
            );
            return;
        }
        let dout = DisjointOut::new(out);
        self.pool.run(&|t| {
            if t >= threads {
                return;
            }
            let r = split(units, threads, t);
            if r.is_empty() {
                return;
            }
            // SAFETY: `split` gives each thread index its own range of units.
            let part = unsafe { dout.slice(r.start * unit..r.end * unit) };
            wide(
                set,
                #[inline(always)]
                || f(r.start, part),
            );
        });
    }

    /// A new F32 tensor of `dims`, filled as [`fill`](Self::fill) does.
    pub fn make(
        &self,
        dims: &[usize],
        unit: usize,
        f: impl Fn(usize, &mut [f32]) + Sync,
    ) -> Result<Tensor> {
        let n: usize = dims.iter().product();
        let mut buf = AlignedBuf::for_overwrite(n * 4);
        self.fill(bytemuck::cast_slice_mut(buf.as_bytes_mut()), unit, f);
        f32_tensor(dims, buf)
    }
}

pub(crate) fn f32_tensor(dims: &[usize], buf: AlignedBuf) -> Result<Tensor> {
    Tensor::new(Shape::new(dims)?, DType::F32, Storage::Host(Arc::new(buf)))
}

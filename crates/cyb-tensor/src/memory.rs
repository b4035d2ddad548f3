//! The one gate for host memory sized from input.
//!
//! A count read from a file or a request (a shape in an ONNX initializer, a context length, the
//! repeats of a `Tile`) can ask for more memory than the machine has. Allocating it would abort
//! the process, or, with the kernel's overcommit, succeed and then be killed once the pages are
//! touched. Every allocation sized from input asks [`check_host_bytes`] first (directly, or
//! through [`check_tensor`] or [`filled_vec`]), which turns "too much" into
//! [`Error::OutOfMemory`] naming what needed the memory.

use crate::{DType, Error, Result};

/// Requests below this are not checked: reading the available memory costs a system call, and
/// a smaller buffer cannot matter.
pub const CHECKED_FROM: u64 = 64 << 20;

/// Bytes of host memory that can be allocated now without swapping (Linux `MemAvailable`);
/// `None` where the system does not say.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Ok when `bytes` of host memory for `what` can be had now; `OutOfMemory` when they exceed
/// the memory available (or the address space).
pub fn check_host_bytes(what: impl FnOnce() -> String, bytes: u128) -> Result<()> {
    if bytes < u128::from(CHECKED_FROM) {
        return Ok(());
    }
    let available = available_memory();
    let too_big = bytes > isize::MAX as u128 || available.is_some_and(|a| bytes > u128::from(a));
    if too_big {
        return Err(Error::OutOfMemory {
            what: what(),
            bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
            available,
        });
    }
    Ok(())
}

/// Bytes that a `dtype` tensor of `dims` holds, without overflow (`None` when the element
/// count is not whole blocks of a block format).
pub fn tensor_bytes(dims: &[usize], dtype: DType) -> Option<u128> {
    let numel = dims
        .iter()
        .try_fold(1u128, |n, &d| n.checked_mul(d as u128))?;
    let per_block = dtype.block_elems() as u128;
    if !numel.is_multiple_of(per_block) {
        return None;
    }
    (numel / per_block).checked_mul(dtype.block_bytes() as u128)
}

/// [`check_host_bytes`] for a `dtype` tensor of `dims` made by `op`.
pub fn check_tensor(op: &str, dims: &[usize], dtype: DType) -> Result<()> {
    let bytes = tensor_bytes(dims, dtype).unwrap_or(u128::MAX);
    check_host_bytes(|| format!("{op}: a {dtype} tensor of {dims:?}"), bytes)
}

/// `n` copies of `value` (the element count of `dims`), checked first: the way to allocate a
/// vector whose length comes from input.
pub fn filled_vec<T: Clone>(op: &str, dims: &[usize], value: T) -> Result<Vec<T>> {
    let overflow = || Error::OutOfMemory {
        what: format!("{op}: {dims:?} elements"),
        bytes: u64::MAX,
        available: available_memory(),
    };
    let n = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(overflow)?;
    let bytes = (n as u128) * (std::mem::size_of::<T>() as u128);
    check_host_bytes(|| format!("{op}: {n} elements"), bytes)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        what: format!("{op}: {n} elements"),
        bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
        available: available_memory(),
    })?;
    v.resize(n, value);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_than_there_is_is_an_error_not_an_abort() {
        let e = check_tensor("expand", &[100_000, 100_000, 100], DType::F32).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{text}");
        assert!(
            text.contains("expand") && text.contains("[100000, 100000, 100]"),
            "{text}"
        );
        assert!(filled_vec("range", &[usize::MAX, 2], 0u8).is_err());
        assert!(filled_vec("range", &[1 << 40], 0f32).is_err());
        // Small requests pass without a look at the system.
        assert_eq!(filled_vec("range", &[3, 2], 1i64).unwrap(), vec![1; 6]);
        assert!(check_tensor("x", &[1024, 1024], DType::F32).is_ok());
        assert_eq!(tensor_bytes(&[64], DType::Q8_0), Some(68));
        assert_eq!(tensor_bytes(&[63], DType::Q8_0), None);
    }
}

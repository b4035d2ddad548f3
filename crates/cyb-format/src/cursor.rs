//! Bounds-checked little-endian reading of untrusted bytes.
//!
//! Every read either succeeds or returns `Error::Format` naming the file and the byte offset
//! where it failed, so parsers never index past the end and never panic on hostile input.

use cyb_tensor::{Error, Result};
use std::path::{Path, PathBuf};

/// A read position in a byte slice that belongs to `file`.
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    file: &'a Path,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8], file: &'a Path) -> Cursor<'a> {
        Cursor {
            bytes,
            pos: 0,
            file,
        }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left after the read position.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// A format error at the current position.
    pub(crate) fn error(&self, reason: impl Into<String>) -> Error {
        format_error(self.file, self.pos, reason)
    }

    /// A format error at byte `at`.
    pub(crate) fn error_at(&self, at: usize, reason: impl Into<String>) -> Error {
        format_error(self.file, at, reason)
    }

    /// The next `n` bytes; `what` names the field for the error message.
    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let s = self.bytes.get(self.pos..end).unwrap_or_default();
                self.pos = end;
                Ok(s)
            }
            None => Err(self.error(format!(
                "file ends inside {what}: needs {n} bytes, {} left",
                self.remaining()
            ))),
        }
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(crate) fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn f32(&mut self, what: &str) -> Result<f32> {
        Ok(f32::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn f64(&mut self, what: &str) -> Result<f64> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }

    /// A count that must fit `usize` and, at `min_bytes_each`, the rest of the file, so a
    /// hostile count can never make us allocate more than the file could hold.
    pub(crate) fn count(&mut self, min_bytes_each: usize, what: &str) -> Result<usize> {
        let at = self.pos;
        let n = self.u64(what)?;
        let fits = usize::try_from(n).ok().filter(|&n| {
            n.checked_mul(min_bytes_each.max(1))
                .is_some_and(|b| b <= self.remaining())
        });
        fits.ok_or_else(|| {
            format_error(
                self.file,
                at,
                format!(
                    "{what} is {n}, but only {} bytes are left in the file",
                    self.remaining()
                ),
            )
        })
    }

    /// A GGUF string: u64 length then UTF-8 bytes.
    pub(crate) fn string(&mut self, what: &str) -> Result<String> {
        let at = self.pos;
        let n = self.count(1, &format!("length of {what}"))?;
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec())
            .map_err(|e| format_error(self.file, at, format!("{what} is not valid UTF-8: {e}")))
    }
}

/// `Error::Format` for `file` at byte `offset`.
pub(crate) fn format_error(file: &Path, offset: usize, reason: impl Into<String>) -> Error {
    Error::Format {
        file: PathBuf::from(file),
        offset: offset as u64,
        reason: reason.into(),
    }
}

//! Reading `.npy` files (numpy's array format, v1–v3): C order, little-endian, the dtypes in
//! [`DESCRS`]. Every length in the header is checked against the bytes present.

use cyb_tensor::{DType, Error, Result, Tensor};
use std::path::Path;

/// The dtypes read and written, with numpy's type strings.
pub const DESCRS: [(DType, &str); 12] = [
    (DType::F32, "<f4"),
    (DType::F16, "<f2"),
    (DType::F64, "<f8"),
    (DType::I64, "<i8"),
    (DType::I32, "<i4"),
    (DType::I16, "<i2"),
    (DType::I8, "|i1"),
    (DType::U64, "<u8"),
    (DType::U32, "<u4"),
    (DType::U16, "<u2"),
    (DType::U8, "|u1"),
    (DType::Bool, "|b1"),
];

/// The array in `data`, the bytes of the `.npy` file `path` (named in errors).
pub fn parse(data: &[u8], path: &Path) -> Result<Tensor> {
    let bad = |offset: usize, reason: &str| Error::Format {
        file: path.to_path_buf(),
        offset: offset as u64,
        reason: reason.to_string(),
    };
    if data.get(..6) != Some(b"\x93NUMPY") {
        return Err(bad(0, "not a .npy file"));
    }
    let major = *data.get(6).ok_or_else(|| bad(6, "truncated"))?;
    let (hlen, start) = match major {
        1 => {
            let b = data.get(8..10).ok_or_else(|| bad(8, "truncated"))?;
            (u16::from_le_bytes([b[0], b[1]]) as usize, 10usize)
        }
        2 | 3 => {
            let b = data.get(8..12).ok_or_else(|| bad(8, "truncated"))?;
            (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, 12)
        }
        _ => return Err(bad(6, "unknown .npy version")),
    };
    let end = start
        .checked_add(hlen)
        .ok_or_else(|| bad(start, "header length overflows"))?;
    let header = data
        .get(start..end)
        .ok_or_else(|| bad(start, "truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad(start, "header is not text"))?;
    let field = |key: &str| -> Option<&str> {
        let i = header.find(&format!("'{key}'"))? + key.len() + 2;
        let rest = header[i..].trim_start().strip_prefix(':')?.trim_start();
        Some(rest)
    };
    let descr = field("descr")
        .and_then(|r| r.strip_prefix('\''))
        .and_then(|r| r.split('\'').next())
        .ok_or_else(|| bad(start, "no descr"))?;
    if field("fortran_order").is_some_and(|r| r.starts_with("True")) {
        return Err(bad(start, "Fortran-order arrays are not supported"));
    }
    let shape_txt = field("shape")
        .and_then(|r| r.strip_prefix('('))
        .and_then(|r| r.split(')').next())
        .ok_or_else(|| bad(start, "no shape"))?;
    let dims: Vec<usize> = shape_txt
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| bad(start, "bad shape")))
        .collect::<Result<_>>()?;
    let dtype = DESCRS
        .iter()
        .find(|(_, s)| *s == descr)
        .map(|(t, _)| *t)
        .ok_or_else(|| bad(start, &format!("dtype {descr} is not supported")))?;
    Tensor::from_bytes(&dims, dtype, &data[end..]).map_err(|e| bad(end, &e.to_string()))
}

//! ONNX `TensorProto` → `Tensor`: element types, the typed data fields, `raw_data` (kept in the
//! file mapping when aligned), and external data files (offset and length checked against the
//! file, the path kept inside the model's directory).

use super::proto::TensorProto;
use crate::map_file;
use bytes::Bytes;
use cyb_tensor::{AlignedBuf, DType, Error, Result, Shape, Storage, Tensor};
use std::path::{Component, Path};
use std::sync::Arc;

/// The ONNX `TensorProto.DataType` code as a `DType`, or an error naming the type.
pub(crate) fn dtype_of(code: i32, what: &str) -> Result<DType> {
    Ok(match code {
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        4 => DType::U16,
        5 => DType::I16,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        12 => DType::U32,
        13 => DType::U64,
        16 => DType::BF16,
        c => {
            return Err(Error::UnsupportedTensorType {
                name: what.to_string(),
                type_name: onnx_type_name(c).to_string(),
            })
        }
    })
}

pub(crate) fn onnx_type_name(code: i32) -> &'static str {
    match code {
        0 => "UNDEFINED",
        1 => "FLOAT",
        2 => "UINT8",
        3 => "INT8",
        4 => "UINT16",
        5 => "INT16",
        6 => "INT32",
        7 => "INT64",
        8 => "STRING",
        9 => "BOOL",
        10 => "FLOAT16",
        11 => "DOUBLE",
        12 => "UINT32",
        13 => "UINT64",
        14 => "COMPLEX64",
        15 => "COMPLEX128",
        16 => "BFLOAT16",
        _ => "FLOAT8 or unknown",
    }
}

/// Converts a tensor. `file` names the model for errors; `dir` is where external data lives.
pub(crate) fn to_tensor(t: &TensorProto, file: &Path, dir: Option<&Path>) -> Result<Tensor> {
    let what = if t.name.is_empty() {
        "<unnamed tensor>"
    } else {
        &t.name
    };
    let fmt = |reason: String| Error::Format {
        file: file.to_path_buf(),
        offset: 0,
        reason: format!("tensor {what}: {reason}"),
    };
    let dtype = dtype_of(t.data_type, what)?;
    let dims: Vec<usize> = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| fmt(format!("negative dim {d}"))))
        .collect::<Result<_>>()?;
    let shape = Shape::new(dims.clone()).map_err(|e| fmt(e.to_string()))?;
    let n = shape.numel();
    let nbytes = dtype
        .bytes_for(n)
        .ok_or_else(|| fmt("size overflows".into()))?;
    if t.data_location == 1 {
        let dir = dir.ok_or_else(|| fmt("external data but no model directory".into()))?;
        let (owner, offset) = external(t, dir, nbytes).map_err(|e| match e {
            Error::Format { reason, .. } => fmt(reason),
            other => other,
        })?;
        let align = dtype.block_bytes().clamp(1, 8);
        let base = (*owner).as_ref().as_ptr() as usize;
        if (base + offset).is_multiple_of(align) {
            let storage = Storage::Shared {
                owner,
                offset,
                len: nbytes,
            };
            return Tensor::new(shape, dtype, storage);
        }
        let bytes = (*owner)
            .as_ref()
            .get(offset..offset + nbytes)
            .unwrap_or_default();
        return Tensor::from_bytes(&dims, dtype, bytes);
    }
    if !t.raw_data.is_empty() || typed_len(t) == 0 && n == 0 {
        if t.raw_data.len() != nbytes {
            return Err(fmt(format!(
                "raw_data has {} bytes, {dtype} {dims:?} needs {nbytes}",
                t.raw_data.len()
            )));
        }
        return raw(t.raw_data.clone(), &dims, dtype);
    }
    let got = typed_len(t);
    if got != n {
        return Err(fmt(format!("{got} values stored, {dims:?} needs {n}")));
    }
    let bytes: Vec<u8> = match dtype {
        DType::F32 => t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::I64 => t.int64_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::I32 => t.int32_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 | DType::BF16 => t
            .int32_data
            .iter()
            .flat_map(|&v| (v as u16).to_le_bytes())
            .collect(),
        DType::I8 | DType::U8 | DType::Bool => t.int32_data.iter().map(|&v| v as u8).collect(),
        DType::I16 | DType::U16 => t
            .int32_data
            .iter()
            .flat_map(|&v| (v as u16).to_le_bytes())
            .collect(),
        DType::F64 => t.double_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::U64 => t.uint64_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::U32 => t
            .uint64_data
            .iter()
            .flat_map(|&v| (v as u32).to_le_bytes())
            .collect(),
        d => return Err(fmt(format!("{d} in typed fields"))),
    };
    Tensor::from_bytes(&dims, dtype, &bytes)
}

/// Values in the typed field that matches the data type.
fn typed_len(t: &TensorProto) -> usize {
    t.float_data.len()
        + t.int32_data.len()
        + t.int64_data.len()
        + t.double_data.len()
        + t.uint64_data.len()
}

/// A tensor over `data`: shared in place when the address suits the element size, copied into
/// an aligned buffer otherwise.
fn raw(data: Bytes, dims: &[usize], dtype: DType) -> Result<Tensor> {
    let shape = Shape::new(dims)?;
    let align = dtype.block_bytes().clamp(1, 8);
    if (data.as_ptr() as usize).is_multiple_of(align) {
        let len = data.len();
        return Tensor::new(
            shape,
            dtype,
            Storage::Shared {
                owner: Arc::new(data),
                offset: 0,
                len,
            },
        );
    }
    Tensor::new(
        shape,
        dtype,
        Storage::Host(Arc::new(AlignedBuf::from_bytes(&data))),
    )
}

/// The mapped file and byte offset of an external-data tensor (range checked).
fn external(t: &TensorProto, dir: &Path, nbytes: usize) -> Result<(crate::SharedBytes, usize)> {
    let bad = |reason: String| Error::Format {
        file: dir.to_path_buf(),
        offset: 0,
        reason,
    };
    let mut location = None;
    let (mut offset, mut length) = (0usize, None);
    for e in &t.external_data {
        let num = || {
            e.value.parse::<usize>().map_err(|_| {
                bad(format!(
                    "external_data {} = {:?} is not a number",
                    e.key, e.value
                ))
            })
        };
        match e.key.as_str() {
            "location" => location = Some(e.value.clone()),
            "offset" => offset = num()?,
            "length" => length = Some(num()?),
            _ => {}
        }
    }
    let loc = location.ok_or_else(|| bad("external data without a location".into()))?;
    let rel = Path::new(&loc);
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(bad(format!(
            "external data location {loc:?} leaves the model directory"
        )));
    }
    let path = dir.join(rel);
    let map = map_file(&path)?;
    let all: &[u8] = (*map).as_ref();
    let len = length.unwrap_or(nbytes);
    if len != nbytes {
        return Err(bad(format!(
            "{loc}: length {len}, the tensor needs {nbytes} bytes"
        )));
    }
    offset
        .checked_add(len)
        .filter(|&e| e <= all.len())
        .ok_or_else(|| {
            bad(format!(
                "{loc}: bytes {offset}..+{len} lie outside the {}-byte file",
                all.len()
            ))
        })?;
    Ok((map.clone(), offset))
}

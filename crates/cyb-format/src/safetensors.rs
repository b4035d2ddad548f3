//! One safetensors file: an 8-byte little-endian header length, a JSON header naming each
//! tensor's dtype, shape and byte range, then the packed data.
//!
//! The `safetensors` crate validates the header (ranges contiguous, sizes matching dtype and
//! shape, the buffer exactly covered); this module maps its dtypes onto ours and cuts tensors
//! from the shared bytes in place.

use crate::cursor::format_error;
use crate::mapping::{map_file, SharedBytes};
use cyb_tensor::{DType, Error, Result, Shape, Storage, Tensor};
use safetensors::tensor::{Dtype, SafeTensors};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// One tensor of a safetensors file, validated against the file.
#[derive(Clone, Debug, PartialEq)]
pub struct SafetensorsTensorInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Shape,
    /// Absolute byte offset in the file.
    pub file_offset: usize,
    pub byte_len: usize,
}

/// A parsed safetensors file whose tensors borrow its bytes.
pub struct SafetensorsFile {
    path: PathBuf,
    bytes: SharedBytes,
    tensors: Vec<SafetensorsTensorInfo>,
    index: HashMap<String, usize>,
    metadata: BTreeMap<String, String>,
}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// Our dtype for a safetensors dtype; the others have no counterpart in cyb-tensor yet.
fn dtype_of(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I8 => DType::I8,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::U8 => DType::U8,
        Dtype::BOOL => DType::Bool,
        Dtype::F64 => DType::F64,
        Dtype::I16 => DType::I16,
        Dtype::U16 => DType::U16,
        Dtype::U32 => DType::U32,
        Dtype::U64 => DType::U64,
        _ => return None,
    })
}

impl SafetensorsFile {
    /// Maps and parses the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsFile> {
        let path = path.as_ref();
        SafetensorsFile::from_bytes(map_file(path)?, path)
    }

    /// Parses safetensors from any shared bytes; `name` is what errors call the file.
    pub fn from_bytes(bytes: SharedBytes, name: impl Into<PathBuf>) -> Result<SafetensorsFile> {
        let path = name.into();
        let buf: &[u8] = (*bytes).as_ref();
        let (header_len, meta) = SafeTensors::read_metadata(buf)
            .map_err(|e| format_error(&path, 0, format!("invalid safetensors header: {e:?}")))?;
        // read_metadata checked that 8 + header_len + data fits the buffer exactly.
        let data_start = header_len + 8;
        let mut tensors = Vec::new();
        for (name, info) in meta.tensors() {
            let err = |reason: String| format_error(&path, 8, format!("tensor {name:?}: {reason}"));
            let dtype = dtype_of(info.dtype).ok_or_else(|| {
                err(format!("dtype {:?} is not supported (supported: F32, F16, BF16, I8, I32, I64, U8, BOOL)", info.dtype))
            })?;
            let shape = Shape::new(info.shape.clone())
                .map_err(|_| err(format!("shape {:?} overflows", info.shape)))?;
            let (start, end) = info.data_offsets;
            let file_offset = data_start
                .checked_add(start)
                .filter(|_| end >= start)
                .ok_or_else(|| err(format!("bad data offsets {:?}", info.data_offsets)))?;
            tensors.push(SafetensorsTensorInfo {
                name,
                dtype,
                shape,
                file_offset,
                byte_len: end - start,
            });
        }
        tensors.sort_by_key(|t| t.file_offset);
        let index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        let metadata = meta
            .metadata()
            .as_ref()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        Ok(SafetensorsFile {
            path,
            bytes,
            tensors,
            index,
            metadata,
        })
    }

    /// A file view over tensors already validated elsewhere (a `.model` container).
    pub(crate) fn from_parts(
        path: PathBuf,
        bytes: SharedBytes,
        tensors: Vec<SafetensorsTensorInfo>,
    ) -> SafetensorsFile {
        let index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        SafetensorsFile {
            path,
            bytes,
            tensors,
            index,
            metadata: BTreeMap::new(),
        }
    }

    /// The same bytes seen with the tensors `rename` keeps, under the names it gives (a part
    /// of a composite checkpoint, such as a vision-language model's text decoder).
    pub fn renamed(&self, rename: &dyn Fn(&str) -> Option<String>) -> SafetensorsFile {
        let tensors = self
            .tensors
            .iter()
            .filter_map(|t| rename(&t.name).map(|name| SafetensorsTensorInfo { name, ..t.clone() }))
            .collect();
        let mut part = SafetensorsFile::from_parts(self.path.clone(), self.bytes.clone(), tensors);
        part.metadata = self.metadata.clone();
        part
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tensor infos in data order.
    pub fn tensor_infos(&self) -> &[SafetensorsTensorInfo] {
        &self.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&SafetensorsTensorInfo> {
        self.tensors.get(*self.index.get(name)?)
    }

    /// The header's free-form `__metadata__` strings.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The tensor `name`, its storage a zero-copy slice of the file.
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        let info = self.tensor_info(name).ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
            required_by: self.path.display().to_string(),
        })?;
        let storage = Storage::Shared {
            owner: self.bytes.clone(),
            offset: info.file_offset,
            len: info.byte_len,
        };
        Tensor::new(info.shape.clone(), info.dtype, storage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(header.as_bytes());
        b.extend_from_slice(data);
        b
    }

    fn parse(b: Vec<u8>) -> Result<SafetensorsFile> {
        SafetensorsFile::from_bytes(Arc::new(b), "t.safetensors")
    }

    #[test]
    fn reads_tensors_in_place() {
        let h = r#"{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"i":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}}"#;
        let mut data = 1.5f32.to_le_bytes().to_vec();
        data.extend_from_slice(&(-2.0f32).to_le_bytes());
        data.extend_from_slice(&7i64.to_le_bytes());
        let f = parse(file(h, &data)).unwrap();
        assert_eq!(
            f.tensor("w").unwrap().to_f32_vec().unwrap(),
            vec![1.5, -2.0]
        );
        assert_eq!(f.tensor("i").unwrap().to_i64_vec().unwrap(), vec![7]);
        assert_eq!(f.metadata().get("format").map(String::as_str), Some("pt"));
        assert!(matches!(f.tensor("x"), Err(Error::MissingTensor { .. })));
    }

    #[test]
    fn corrupt_headers_are_errors() {
        let h = r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        let good = file(h, &[0; 8]);
        for cut in 0..good.len() {
            assert!(parse(good[..cut].to_vec()).is_err(), "cut {cut}");
        }
        let mut huge = good.clone();
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(parse(huge), Err(Error::Format { .. })));
        assert!(parse(file("{not json", &[])).is_err());
        let wrong_size = r#"{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#;
        assert!(parse(file(wrong_size, &[0; 8])).is_err());
        // A dtype we have no counterpart for is refused naming the tensor and the dtype.
        let fp8_tensor = r#"{"d":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}}"#;
        let e = parse(file(fp8_tensor, &[0; 8])).unwrap_err().to_string();
        assert!(e.contains("\"d\"") && e.contains("F8_E4M3"), "{e}");
        // F64 is read now (the graph path computes it).
        let f64_tensor = r#"{"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}"#;
        let f = parse(file(f64_tensor, &2.5f64.to_le_bytes())).unwrap();
        assert_eq!(f.tensor("d").unwrap().to_f64_vec().unwrap(), vec![2.5]);
    }
}

//! GGUF v2/v3 (llama.cpp's model file): header, metadata, tensor infos, aligned tensor data.
//!
//! Layout (all little-endian): magic `GGUF`, u32 version, u64 tensor count, u64 metadata count,
//! the metadata key/values, the tensor infos (name, u32 n_dims, u64 `ne[n_dims]`, u32 ggml type,
//! u64 offset into the data section), padding to `general.alignment` (default 32), then data.
//!
//! Tensors are returned in place: their storage is a slice of the shared file bytes (an mmap).
//! The parser trusts nothing in the file. Every count is checked against the bytes left before
//! anything is allocated for it; dims are 1..=4 with every `ne >= 1` (ggml never writes empty
//! tensors, and refusing them keeps "two tensors at one offset" an error); element and byte
//! counts are overflow-checked; data offsets must be aligned, inside the file and disjoint.
//!
//! Any type ggml defines is accepted, also those this build cannot compute with (IQ2_XXS, MXFP4,
//! ...): their sizes come from [`GGML_TYPES`], so they are checked and listed like the others and
//! only [`GgufFile::tensor`] refuses them. Ids ggml does not define fail at open.

mod ggml_type;
mod value;

pub use ggml_type::{GgmlType, GGML_TYPES};

use crate::cursor::{format_error, Cursor};
use crate::mapping::{map_file, SharedBytes};
use crate::metadata::MetaValue;

/// Metadata keys a file may have: each takes about a hundred bytes of memory against its
/// fourteen or more in the file, so their number is bounded (files have tens).
const MAX_METADATA_KEYS: usize = 1 << 16;
use cyb_tensor::{DType, Error, Result, Shape, Storage, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;
/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
const MAGIC: &[u8; 4] = b"GGUF";

/// One tensor's entry in the tensor-info table, validated against the file.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufTensorInfo {
    pub name: String,
    /// The type the file declares.
    pub ggml_type: GgmlType,
    /// `None` when this build cannot compute with `ggml_type`: the tensor is listed and its
    /// bytes located, but [`GgufFile::tensor`] refuses it.
    pub dtype: Option<DType>,
    /// Row-major dims: GGUF's `ne` reversed, so `ne[0]` (the row length) is the last dim.
    pub shape: Shape,
    /// Offset as stored: relative to the start of the data section.
    pub data_offset: u64,
    /// Absolute byte offset in the file.
    pub file_offset: usize,
    pub byte_len: usize,
}

/// A parsed GGUF file whose tensors borrow its bytes.
pub struct GgufFile {
    path: PathBuf,
    bytes: SharedBytes,
    version: u32,
    alignment: u64,
    data_start: usize,
    metadata: Vec<(String, MetaValue)>,
    meta_index: HashMap<String, usize>,
    tensors: Vec<GgufTensorInfo>,
    tensor_index: HashMap<String, usize>,
    /// Set when the GGUF model was read out of a `.model` container.
    container: Option<std::sync::Arc<crate::model_container::ContainerInfo>>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// True when `bytes` start with the GGUF magic.
pub fn has_gguf_magic(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

impl GgufFile {
    /// Maps and parses the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        GgufFile::from_bytes(map_file(path)?, path)
    }

    /// Parses GGUF from any shared bytes; `name` is what errors call the file.
    pub fn from_bytes(bytes: SharedBytes, name: impl Into<PathBuf>) -> Result<GgufFile> {
        let path = name.into();
        let (header, tensors) = parse(bytes.as_ref().as_ref(), &path)?;
        let meta_index = header
            .metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let tensor_index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            path,
            bytes,
            version: header.version,
            alignment: header.alignment,
            data_start: header.data_start,
            metadata: header.metadata,
            meta_index,
            tensors,
            tensor_index,
            container: None,
        })
    }

    /// A GGUF model whose metadata and tensors come from a `.model` container (already
    /// validated there); its tensors borrow the container's bytes.
    pub(crate) fn from_container(
        path: PathBuf,
        bytes: SharedBytes,
        version: u32,
        metadata: Vec<(String, MetaValue)>,
        tensors: Vec<GgufTensorInfo>,
        container: std::sync::Arc<crate::model_container::ContainerInfo>,
    ) -> GgufFile {
        let index = |names: &mut dyn Iterator<Item = String>| -> HashMap<String, usize> {
            names.enumerate().map(|(i, k)| (k, i)).collect()
        };
        GgufFile {
            meta_index: index(&mut metadata.iter().map(|(k, _)| k.clone())),
            tensor_index: index(&mut tensors.iter().map(|t| t.name.clone())),
            path,
            bytes,
            version,
            alignment: crate::model_container::ALIGN as u64,
            data_start: container.data_start,
            metadata,
            tensors,
            container: Some(container),
        }
    }

    /// The `.model` container this model was read from, if any.
    pub fn container(&self) -> Option<&crate::model_container::ContainerInfo> {
        self.container.as_deref()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// 2 or 3.
    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset of the (aligned) data section.
    pub fn data_start(&self) -> usize {
        self.data_start
    }

    /// Every metadata key/value in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    /// One metadata value by key.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        let i = *self.meta_index.get(key)?;
        self.metadata.get(i).map(|(_, v)| v)
    }

    /// Tensor infos in file order.
    pub fn tensor_infos(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensors.get(*self.tensor_index.get(name)?)
    }

    /// The tensor `name`, its storage a zero-copy slice of the file
    /// (`Error::UnsupportedTensorType` for a ggml type this build cannot compute with).
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        let info = self.tensor_info(name).ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
            required_by: self.path.display().to_string(),
        })?;
        let dtype = info.dtype.ok_or_else(|| Error::UnsupportedTensorType {
            name: name.to_string(),
            type_name: info.ggml_type.name.to_string(),
        })?;
        let storage = Storage::Shared {
            owner: self.bytes.clone(),
            offset: info.file_offset,
            len: info.byte_len,
        };
        Tensor::new(info.shape.clone(), dtype, storage)
    }
}

struct Header {
    version: u32,
    alignment: u64,
    data_start: usize,
    metadata: Vec<(String, MetaValue)>,
}

fn parse(bytes: &[u8], path: &Path) -> Result<(Header, Vec<GgufTensorInfo>)> {
    let mut c = Cursor::new(bytes, path);
    let magic = c.take(4, "magic")?;
    if magic != MAGIC {
        return Err(format_error(
            path,
            0,
            format!("not a GGUF file: magic is {magic:02x?}, expected \"GGUF\""),
        ));
    }
    let version = c.u32("version")?;
    match version {
        2 | 3 => {}
        1 => {
            return Err(c.error(
                "GGUF v1 (2023 and earlier, 32-bit counts) is not supported; re-convert the model \
                 with a current llama.cpp",
            ))
        }
        v if (2..=3).contains(&v.swap_bytes()) => {
            return Err(c.error(format!(
                "big-endian GGUF (version {}) is not supported; use a little-endian file",
                v.swap_bytes()
            )))
        }
        v => return Err(c.error(format!("unsupported GGUF version {v}, expected 2 or 3"))),
    }
    // Smallest possible tensor info: 8-byte name length, n_dims, one ne, type, offset.
    let n_tensors = c.count(8 + 4 + 8 + 4 + 8, "tensor count")?;
    // Smallest possible key/value: 8-byte key length, type id, one byte of value.
    let n_kv = c.count(8 + 4 + 1, "metadata count")?;
    if n_kv > MAX_METADATA_KEYS {
        return Err(c.error(format!(
            "{n_kv} metadata keys; at most {MAX_METADATA_KEYS} are read (model files have tens)"
        )));
    }

    let mut metadata = Vec::with_capacity(n_kv);
    let mut seen = HashMap::with_capacity(n_kv);
    for _ in 0..n_kv {
        let at = c.pos();
        let key = c.string("metadata key")?;
        let v = value::read_typed(&mut c, &key)?;
        if seen.insert(key.clone(), ()).is_some() {
            return Err(format_error(
                path,
                at,
                format!("duplicate metadata key {key:?}"),
            ));
        }
        metadata.push((key, v));
    }
    let alignment = alignment(&metadata, path)?;

    let mut raw = Vec::with_capacity(n_tensors);
    let mut names = HashMap::with_capacity(n_tensors);
    for _ in 0..n_tensors {
        let at = c.pos();
        let t = read_tensor_info(&mut c)?;
        if names.insert(t.0.clone(), ()).is_some() {
            return Err(format_error(
                path,
                at,
                format!("duplicate tensor name {:?}", t.0),
            ));
        }
        raw.push((at, t));
    }
    let end_of_infos = c.pos();
    let data_start = align_up(end_of_infos as u64, alignment)
        .and_then(|d| usize::try_from(d).ok())
        .ok_or_else(|| format_error(path, end_of_infos, "data section offset overflows"))?;
    if !raw.is_empty() && data_start > bytes.len() {
        return Err(format_error(
            path,
            end_of_infos,
            format!(
                "data section would start at byte {data_start}, past the end of the {}-byte file",
                bytes.len()
            ),
        ));
    }

    let mut tensors = Vec::with_capacity(raw.len());
    for (at, (name, ne, type_id, data_offset)) in raw {
        tensors.push(place_tensor(
            path,
            at,
            name,
            &ne,
            type_id,
            data_offset,
            alignment,
            data_start,
            bytes.len(),
        )?);
    }
    check_disjoint(&tensors, path)?;
    Ok((
        Header {
            version,
            alignment,
            data_start,
            metadata,
        },
        tensors,
    ))
}

fn alignment(metadata: &[(String, MetaValue)], path: &Path) -> Result<u64> {
    let Some((_, v)) = metadata.iter().find(|(k, _)| k == "general.alignment") else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match v.as_u64() {
        Some(a) if a.is_power_of_two() && a <= 1 << 30 => Ok(a),
        _ => Err(format_error(
            path,
            0,
            format!(
                "general.alignment must be a non-zero power of two (at most 2^30), got {}",
                v.summary()
            ),
        )),
    }
}

type RawInfo = (String, Vec<u64>, u32, u64);

fn read_tensor_info(c: &mut Cursor<'_>) -> Result<RawInfo> {
    let name = c.string("tensor name")?;
    let at = c.pos();
    let n_dims = c.u32("tensor n_dims")? as usize;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(c.error_at(
            at,
            format!("tensor {name:?} has {n_dims} dims, expected 1 to {MAX_DIMS}"),
        ));
    }
    let mut ne = Vec::with_capacity(n_dims);
    for _ in 0..n_dims {
        ne.push(c.u64("tensor dims")?);
    }
    let type_id = c.u32("tensor type")?;
    let offset = c.u64("tensor offset")?;
    Ok((name, ne, type_id, offset))
}

#[allow(clippy::too_many_arguments)]
fn place_tensor(
    path: &Path,
    at: usize,
    name: String,
    ne: &[u64],
    type_id: u32,
    data_offset: u64,
    alignment: u64,
    data_start: usize,
    file_len: usize,
) -> Result<GgufTensorInfo> {
    let err = |reason: String| format_error(path, at, format!("tensor {name:?}: {reason}"));
    let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| {
        err(match ggml_type::removed_type_name(type_id) {
            Some(old) => format!(
                "ggml type id {type_id} ({old}) was removed from ggml; re-convert the model"
            ),
            None => format!("unknown ggml type id {type_id}"),
        })
    })?;
    let type_name = ggml_type.name;
    let mut dims = Vec::with_capacity(ne.len());
    for &n in ne.iter().rev() {
        match usize::try_from(n) {
            Ok(d) if d >= 1 => dims.push(d),
            _ => return Err(err(format!("dimension {n} is out of range (dims {ne:?})"))),
        }
    }
    let shape = Shape::new(dims).map_err(|_| err(format!("element count of {ne:?} overflows")))?;
    if !shape.last().is_multiple_of(ggml_type.block_elems) {
        return Err(err(format!(
            "row length {} is not a multiple of the {type_name} block size {}",
            shape.last(),
            ggml_type.block_elems
        )));
    }
    let byte_len = ggml_type
        .bytes_for(shape.numel())
        .ok_or_else(|| err(format!("byte size of {type_name} {shape} overflows")))?;
    if !data_offset.is_multiple_of(alignment) {
        return Err(err(format!(
            "data offset {data_offset} is not a multiple of the alignment {alignment}"
        )));
    }
    let file_offset = usize::try_from(data_offset)
        .ok()
        .and_then(|o| o.checked_add(data_start));
    let end = file_offset.and_then(|o| o.checked_add(byte_len));
    match (file_offset, end) {
        (Some(file_offset), Some(end)) if end <= file_len => Ok(GgufTensorInfo {
            name,
            ggml_type,
            dtype: ggml_type.dtype(),
            shape,
            data_offset,
            file_offset,
            byte_len,
        }),
        _ => Err(err(format!(
            "data ({byte_len} bytes at data offset {data_offset}, data section at {data_start}) \
             runs past the end of the {file_len}-byte file"
        ))),
    }
}

fn check_disjoint(tensors: &[GgufTensorInfo], path: &Path) -> Result<()> {
    let mut by_start: Vec<&GgufTensorInfo> = tensors.iter().collect();
    by_start.sort_by_key(|t| t.file_offset);
    for w in by_start.windows(2) {
        if let [a, b] = w {
            if a.file_offset + a.byte_len > b.file_offset {
                return Err(format_error(
                    path,
                    b.file_offset,
                    format!("tensor data of {:?} and {:?} overlap", a.name, b.name),
                ));
            }
        }
    }
    Ok(())
}

fn align_up(x: u64, alignment: u64) -> Option<u64> {
    x.checked_add(alignment - 1)
        .map(|v| v / alignment * alignment)
}

#[cfg(test)]
mod tests;

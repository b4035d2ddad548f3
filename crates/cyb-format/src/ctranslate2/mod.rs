//! A CTranslate2 model directory (what faster-whisper loads): `model.bin` holding every weight,
//! CTranslate2's own `config.json`, and the vocabulary (`vocabulary.txt` or `vocabulary.json`,
//! often a `tokenizer.json` too).
//!
//! `model.bin` is little-endian and unpadded:
//!
//! ```text
//! u32 binary_version                      (2 to 6 are read here)
//! string spec_name, u32 spec_revision     ("WhisperSpec", 3)
//! u32 num_variables, then per variable:
//!     string name; u8 rank; u32 dims[rank];
//!     u8 dtype; u32 num_bytes             (version 4 on; dtype 0 float32, 1 int8, 2 int16,
//!                                          3 int32, 4 float16, 5 bfloat16)
//!     u8 item_size; u32 num_items         (versions 2 and 3: 4 float32, 2 int16, 1 int8)
//!     bytes[num_bytes]
//! u32 num_aliases, then per alias: string alias; string target     (version 3 on)
//! string = u16 length counting a trailing NUL, then that many bytes
//! ```
//!
//! Rank-0 variables are settings (`decoder/num_heads`, `decoder/activation`, ...). Quantized
//! weights (`int8`, `int16`) come with `<name>_scale`: one f32 per output row for int8, one for
//! the whole matrix for int16; the value is `q / scale`.
//!
//! [`Ct2File`] is the parsed table; a Whisper model (`WhisperSpec`) opens as the Hugging Face
//! Whisper directory it was converted from ([`open`], see `whisper.rs`), so everything that
//! reads those works on it unchanged.

mod table;
mod whisper;

pub(crate) use whisper::WhisperWeights;
pub use whisper::{from_file, open};

use crate::cursor::Cursor;
use crate::mapping::{map_file, SharedBytes};
use cyb_tensor::{DType, Result, Shape};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The weights file of a CTranslate2 model directory.
pub const MODEL_BIN: &str = "model.bin";

/// The binary versions this reader knows (1 has no spec name; 7 does not exist yet).
const VERSIONS: std::ops::RangeInclusive<u32> = 2..=6;

/// True when `dir` holds a `model.bin` that starts like a CTranslate2 one (a small binary
/// version number) and no safetensors weights, which would make it a Hugging Face directory.
pub fn is_ct2_dir(dir: &Path) -> bool {
    if !dir.is_dir()
        || dir.join("model.safetensors").exists()
        || dir.join("model.safetensors.index.json").exists()
    {
        return false;
    }
    let mut head = [0u8; 4];
    let read = std::fs::File::open(dir.join(MODEL_BIN))
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head));
    // Any small version counts, so that an unsupported one gets its own clear error.
    read.is_ok() && (1..256).contains(&u32::from_le_bytes(head))
}

/// One variable of `model.bin`.
#[derive(Clone, Debug, PartialEq)]
pub struct Ct2Variable {
    pub name: String,
    pub dtype: DType,
    pub shape: Shape,
    /// Absolute byte offset of the data.
    pub offset: usize,
    pub byte_len: usize,
    /// Where the variable's record (its name) starts, for errors about it.
    pub record_offset: usize,
}

impl Ct2Variable {
    /// True for a rank-0 variable (a setting, not a weight).
    pub fn is_scalar(&self) -> bool {
        self.shape.rank() == 0
    }
}

/// CTranslate2's name for a dtype (as its converters and docs write it).
pub fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        other => other.name(),
    }
}

/// A parsed `model.bin` whose variables borrow its bytes.
pub struct Ct2File {
    path: PathBuf,
    bytes: SharedBytes,
    binary_version: u32,
    spec: String,
    spec_revision: u32,
    variables: Vec<Ct2Variable>,
    /// Variable and alias name → index in `variables`.
    index: HashMap<String, usize>,
    aliases: Vec<(String, String)>,
}

impl std::fmt::Debug for Ct2File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ct2File")
            .field("path", &self.path)
            .field("binary_version", &self.binary_version)
            .field("spec", &self.spec)
            .field("variables", &self.variables.len())
            .field("aliases", &self.aliases.len())
            .finish()
    }
}

/// The smallest record of a variable: a one-byte name (length 2 + 1), rank, dtype, num_bytes.
const MIN_VARIABLE_BYTES: usize = 3 + 1 + 1 + 4;
/// The smallest alias: two one-byte names.
const MIN_ALIAS_BYTES: usize = 2 * 3;

/// A u32 count that, at `min_bytes_each`, must fit in what is left of the file.
fn count(c: &mut Cursor<'_>, min_bytes_each: usize, what: &str) -> Result<usize> {
    let at = c.pos();
    let n = c.u32(what)?;
    usize::try_from(n)
        .ok()
        .filter(|&n| {
            n.checked_mul(min_bytes_each)
                .is_some_and(|b| b <= c.remaining())
        })
        .ok_or_else(|| {
            c.error_at(
                at,
                format!(
                    "{what} is {n}, but only {} bytes are left in the file",
                    c.remaining()
                ),
            )
        })
}

/// A string: u16 length counting the trailing NUL (which is dropped), then the bytes.
fn string(c: &mut Cursor<'_>, what: &str) -> Result<String> {
    let at = c.pos();
    let n = usize::from(c.u16(&format!("length of {what}"))?);
    if n == 0 {
        return Err(c.error_at(at, format!("{what} has length 0 (it counts a NUL)")));
    }
    let bytes = c.take(n, what)?;
    let text = bytes.get(..n - 1).unwrap_or_default();
    String::from_utf8(text.to_vec())
        .map_err(|e| c.error_at(at, format!("{what} is not valid UTF-8: {e}")))
}

/// The dtype of a version-4+ type id.
fn dtype_of_id(id: u8) -> Option<DType> {
    Some(match id {
        0 => DType::F32,
        1 => DType::I8,
        2 => DType::I16,
        3 => DType::I32,
        4 => DType::F16,
        5 => DType::BF16,
        _ => return None,
    })
}

/// The dtype older versions implied by an item size.
fn dtype_of_item_size(size: u8) -> Option<DType> {
    Some(match size {
        4 => DType::F32,
        2 => DType::I16,
        1 => DType::I8,
        _ => return None,
    })
}

impl Ct2File {
    /// Maps and parses the `model.bin` at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Ct2File> {
        let path = path.as_ref();
        Ct2File::from_bytes(map_file(path)?, path)
    }

    /// Parses `model.bin` bytes; `name` is what errors call the file.
    pub fn from_bytes(bytes: SharedBytes, name: impl Into<PathBuf>) -> Result<Ct2File> {
        let path = name.into();
        let buf: &[u8] = (*bytes).as_ref();
        let mut c = Cursor::new(buf, &path);
        let binary_version = c.u32("binary version")?;
        if !VERSIONS.contains(&binary_version) {
            return Err(c.error_at(
                0,
                format!(
                    "CTranslate2 binary version {binary_version} is not supported (this reader \
                     knows versions {} to {})",
                    VERSIONS.start(),
                    VERSIONS.end()
                ),
            ));
        }
        let spec = string(&mut c, "spec name")?;
        let spec_revision = c.u32("spec revision")?;
        let n = count(&mut c, MIN_VARIABLE_BYTES, "num_variables")?;
        let mut variables = Vec::with_capacity(n);
        let mut index = HashMap::with_capacity(n);
        for i in 0..n {
            let record_offset = c.pos();
            let v = variable(&mut c, binary_version, i)?;
            if index.insert(v.name.clone(), variables.len()).is_some() {
                return Err(c.error_at(
                    record_offset,
                    format!("variable {:?} appears twice", v.name),
                ));
            }
            variables.push(v);
        }
        let mut aliases = Vec::new();
        if binary_version >= 3 {
            let n = count(&mut c, MIN_ALIAS_BYTES, "num_aliases")?;
            aliases.reserve(n);
            for _ in 0..n {
                let at = c.pos();
                let alias = string(&mut c, "alias name")?;
                let target = string(&mut c, "alias target")?;
                // A target may itself be an earlier alias, as CTranslate2 registers them in order.
                let Some(&k) = index.get(&target) else {
                    return Err(c.error_at(
                        at,
                        format!("alias {alias:?} names {target:?}, which is not a variable"),
                    ));
                };
                if index.insert(alias.clone(), k).is_some() {
                    return Err(c.error_at(
                        at,
                        format!("alias {alias:?} is also the name of a variable or alias"),
                    ));
                }
                aliases.push((alias, target));
            }
        }
        if c.remaining() != 0 {
            return Err(c.error(format!(
                "{} bytes after the last {}",
                c.remaining(),
                if binary_version >= 3 {
                    "alias"
                } else {
                    "variable"
                }
            )));
        }
        Ok(Ct2File {
            path,
            bytes,
            binary_version,
            spec,
            spec_revision,
            variables,
            index,
            aliases,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn binary_version(&self) -> u32 {
        self.binary_version
    }

    /// The model specification (`"WhisperSpec"`).
    pub fn spec(&self) -> &str {
        &self.spec
    }

    pub fn spec_revision(&self) -> u32 {
        self.spec_revision
    }

    /// Every variable, in file order.
    pub fn variables(&self) -> &[Ct2Variable] {
        &self.variables
    }

    /// `(alias, target)` pairs, in file order.
    pub fn aliases(&self) -> &[(String, String)] {
        &self.aliases
    }

    /// The variable `name` is (an alias resolves to its target).
    pub fn variable(&self, name: &str) -> Option<&Ct2Variable> {
        self.variables.get(*self.index.get(name)?)
    }

    /// Index in [`variables`](Ct2File::variables) of the variable `name` is.
    pub(crate) fn variable_index(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// The shared bytes variables borrow.
    pub(crate) fn shared_bytes(&self) -> &SharedBytes {
        &self.bytes
    }

    /// The data of `v` (checked against the file when it was parsed).
    pub fn data(&self, v: &Ct2Variable) -> &[u8] {
        let buf: &[u8] = (*self.bytes).as_ref();
        v.offset
            .checked_add(v.byte_len)
            .and_then(|end| buf.get(v.offset..end))
            .unwrap_or_default()
    }

    /// The value of the rank-0 variable `name`, as JSON (an integer or a float).
    pub fn scalar(&self, name: &str) -> Option<Value> {
        let v = self.variable(name).filter(|v| v.is_scalar())?;
        scalar_json(v.dtype, self.data(v))
    }
}

/// A scalar's bytes as a JSON number.
fn scalar_json(dtype: DType, b: &[u8]) -> Option<Value> {
    Some(match dtype {
        DType::I8 => Value::from(i8::from_le_bytes(b.try_into().ok()?)),
        DType::I16 => Value::from(i16::from_le_bytes(b.try_into().ok()?)),
        DType::I32 => Value::from(i32::from_le_bytes(b.try_into().ok()?)),
        DType::F32 | DType::F16 | DType::BF16 => {
            let x = cyb_tensor::decode_f32_vec(dtype, b, 1).ok()?;
            Value::from(f64::from(*x.first()?))
        }
        _ => return None,
    })
}

/// Reads the variable record at the cursor (the `i`-th).
fn variable(c: &mut Cursor<'_>, version: u32, i: usize) -> Result<Ct2Variable> {
    let record_offset = c.pos();
    let name = string(c, &format!("name of variable {i}"))?;
    let rank = usize::from(c.u8(&format!("rank of {name:?}"))?);
    let dims_bytes = c.take(rank * 4, &format!("dims of {name:?}"))?;
    let dims: Vec<usize> = dims_bytes
        .chunks_exact(4)
        .map(|d| u32::from_le_bytes(d.try_into().unwrap_or([0; 4])) as usize)
        .collect();
    let dtype_at = c.pos();
    let (dtype, byte_len) = if version >= 4 {
        let id = c.u8(&format!("dtype of {name:?}"))?;
        let dtype = dtype_of_id(id).ok_or_else(|| {
            c.error_at(
                dtype_at,
                format!(
                    "variable {name:?}: unknown dtype id {id} (known: 0 float32, 1 int8, \
                     2 int16, 3 int32, 4 float16, 5 bfloat16)"
                ),
            )
        })?;
        let n = c.u32(&format!("num_bytes of {name:?}"))?;
        (dtype, n as usize)
    } else {
        let size = c.u8(&format!("item size of {name:?}"))?;
        let dtype = dtype_of_item_size(size).ok_or_else(|| {
            c.error_at(
                dtype_at,
                format!("variable {name:?}: unknown item size {size} (known: 4, 2, 1)"),
            )
        })?;
        let n = c.u32(&format!("item count of {name:?}"))?;
        let bytes = (n as usize).checked_mul(usize::from(size)).ok_or_else(|| {
            c.error_at(dtype_at, format!("variable {name:?}: byte size overflows"))
        })?;
        (dtype, bytes)
    };
    let shape = Shape::new(&dims).map_err(|_| {
        c.error_at(
            record_offset,
            format!("variable {name:?}: dims {dims:?} overflow"),
        )
    })?;
    let need = dtype.bytes_for(shape.numel());
    if need != Some(byte_len) {
        return Err(c.error_at(
            dtype_at,
            format!(
                "variable {name:?}: {byte_len} data bytes, but {} {dims:?} needs {}",
                dtype_name(dtype),
                need.map_or_else(|| "more than fit in memory".into(), |n| n.to_string())
            ),
        ));
    }
    let offset = c.pos();
    c.take(byte_len, &format!("data of {name:?}"))?;
    Ok(Ct2Variable {
        name,
        dtype,
        shape,
        offset,
        byte_len,
        record_offset,
    })
}

#[cfg(test)]
mod tests;

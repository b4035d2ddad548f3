//! GGUF metadata values: a u32 type id followed by the value; arrays are an element type id,
//! a u64 count and the elements (arrays of arrays nest).

use crate::cursor::Cursor;
use crate::metadata::{MetaArray, MetaValue};
use cyb_tensor::Result;

/// Nested arrays deeper than this are refused, so a hostile file cannot exhaust the stack.
const MAX_NESTING: usize = 8;

/// An array of arrays may hold at most this many inner arrays: each takes more memory than
/// its 12 bytes in the file, and no model file has more than a handful.
const MAX_INNER_ARRAYS: usize = 1 << 16;

const ARRAY: u32 = 9;

/// Reads a type id and the value of metadata key `key`.
pub(super) fn read_typed(c: &mut Cursor<'_>, key: &str) -> Result<MetaValue> {
    let ty = c.u32("metadata value type")?;
    read_value(c, ty, key, 0)
}

/// Bytes the smallest value of type `ty` takes, or `None` for an unknown type id.
fn min_size(ty: u32) -> Option<usize> {
    Some(match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        ARRAY => 4 + 8,
        _ => return None,
    })
}

fn read_value(c: &mut Cursor<'_>, ty: u32, key: &str, depth: usize) -> Result<MetaValue> {
    let what = key;
    Ok(match ty {
        0 => MetaValue::U8(c.u8(what)?),
        1 => MetaValue::I8(c.u8(what)? as i8),
        2 => MetaValue::U16(c.u16(what)?),
        3 => MetaValue::I16(c.u16(what)? as i16),
        4 => MetaValue::U32(c.u32(what)?),
        5 => MetaValue::I32(c.u32(what)? as i32),
        6 => MetaValue::F32(c.f32(what)?),
        7 => {
            let at = c.pos();
            match c.u8(what)? {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                b => {
                    return Err(c.error_at(
                        at,
                        format!("bool {key:?} has byte value {b}, expected 0 or 1"),
                    ))
                }
            }
        }
        8 => MetaValue::String(c.string(&format!("string value of {key:?}"))?),
        10 => MetaValue::U64(c.u64(what)?),
        11 => MetaValue::I64(c.u64(what)? as i64),
        12 => MetaValue::F64(c.f64(what)?),
        ARRAY => MetaValue::Array(read_array(c, key, depth)?),
        other => {
            let at = c.pos().saturating_sub(4);
            return Err(c.error_at(
                at,
                format!("metadata {key:?} has unknown value type {other}"),
            ));
        }
    })
}

/// An array's item type, count and items, into one vector of the item type.
fn read_array(c: &mut Cursor<'_>, key: &str, depth: usize) -> Result<MetaArray> {
    if depth >= MAX_NESTING {
        return Err(c.error(format!(
            "array {key:?} nests deeper than {MAX_NESTING} levels"
        )));
    }
    let at = c.pos();
    let elem = c.u32("array element type")?;
    let Some(size) = min_size(elem) else {
        return Err(c.error_at(at, format!("array {key:?} has unknown element type {elem}")));
    };
    let n = c.count(size, &format!("length of array {key:?}"))?;
    // Fixed-size numeric items: the count was checked against the bytes left, so `take`
    // succeeds and the bytes are whole items.
    let numeric = match elem {
        0 => Some("u8"),
        1 => Some("i8"),
        2 => Some("u16"),
        3 => Some("i16"),
        4 => Some("u32"),
        5 => Some("i32"),
        6 => Some("f32"),
        10 => Some("u64"),
        11 => Some("i64"),
        12 => Some("f64"),
        _ => None,
    };
    if let Some(item) = numeric {
        let bytes = c.take(n * size, key)?;
        return MetaArray::from_le_bytes(item, bytes)
            .ok_or_else(|| c.error_at(at, format!("array {key:?}: bytes are not whole items")));
    }
    Ok(match elem {
        7 => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(
                    read_value(c, 7, key, depth + 1)?
                        .as_bool()
                        .unwrap_or_default(),
                );
            }
            MetaArray::Bool(v)
        }
        8 => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(c.string(&format!("string value of {key:?}"))?);
            }
            MetaArray::String(v)
        }
        _ => {
            if n > MAX_INNER_ARRAYS {
                return Err(c.error_at(
                    at,
                    format!("array {key:?} holds {n} arrays; at most {MAX_INNER_ARRAYS} are read"),
                ));
            }
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_array(c, key, depth + 1)?);
            }
            MetaArray::Array(v)
        }
    })
}

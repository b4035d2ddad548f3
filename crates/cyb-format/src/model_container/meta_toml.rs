//! GGUF metadata as typed TOML entries (`[[metadata]] key, type, [item], value`), so a model
//! imported from GGUF opens with exactly the metadata values and types it had.

use crate::metadata::{MetaArray, MetaValue};
use base64::Engine;
use toml::Value;

/// Numeric arrays longer than this are written as `bytes` (base64 of their little-endian
/// items) rather than a TOML array: a value per item would take tens of bytes of memory each
/// when written and read back.
const BYTES_FROM: usize = 64;

/// The TOML document `[[metadata]]` for `entries` (in order).
pub(crate) fn to_toml(entries: &[(String, MetaValue)]) -> Result<toml::Table, String> {
    let mut list = Vec::with_capacity(entries.len());
    for (key, v) in entries {
        let mut t = toml::Table::new();
        t.insert("key".into(), Value::String(key.clone()));
        t.insert("type".into(), Value::String(v.type_name().into()));
        if let MetaValue::Array(items) = v {
            let (item, (field, value)) =
                array(items).map_err(|r| format!("metadata {key:?}: {r}"))?;
            t.insert("item".into(), Value::String(item.into()));
            t.insert(field.into(), value);
        } else {
            t.insert("value".into(), scalar(v));
        }
        list.push(Value::Table(t));
    }
    let mut doc = toml::Table::new();
    doc.insert("metadata".into(), Value::Array(list));
    Ok(doc)
}

/// An array's item type and TOML entries (`value`, or `bytes` for a long numeric array); an
/// item that is itself an array is written as an inline table `{ item, value | bytes }`.
fn array(items: &MetaArray) -> Result<(&'static str, (&'static str, Value)), String> {
    let item = items.item_type_name();
    if let Some(bytes) = items.to_le_bytes().filter(|_| items.len() > BYTES_FROM) {
        let text = base64::engine::general_purpose::STANDARD.encode(bytes);
        return Ok((item, ("bytes", Value::String(text))));
    }
    let out = match items {
        MetaArray::Array(inner) => inner
            .iter()
            .map(|a| {
                let (ty, (field, v)) = array(a)?;
                let mut t = toml::Table::new();
                t.insert("item".into(), Value::String(ty.into()));
                t.insert(field.into(), v);
                Ok(Value::Table(t))
            })
            .collect::<Result<Vec<_>, String>>()?,
        a => a.iter().map(|x| scalar(&x)).collect(),
    };
    Ok((item, ("value", Value::Array(out))))
}

fn scalar(v: &MetaValue) -> Value {
    let int = |i: i128| match i64::try_from(i) {
        Ok(i) => Value::Integer(i),
        Err(_) => Value::String(i.to_string()),
    };
    match v {
        MetaValue::U8(x) => int((*x).into()),
        MetaValue::I8(x) => int((*x).into()),
        MetaValue::U16(x) => int((*x).into()),
        MetaValue::I16(x) => int((*x).into()),
        MetaValue::U32(x) => int((*x).into()),
        MetaValue::I32(x) => int((*x).into()),
        MetaValue::U64(x) => int((*x).into()),
        MetaValue::I64(x) => int((*x).into()),
        MetaValue::F32(x) => Value::Float(f64::from(*x)),
        MetaValue::F64(x) => Value::Float(*x),
        MetaValue::Bool(x) => Value::Boolean(*x),
        MetaValue::String(s) => Value::String(s.clone()),
        // Arrays are written by `array`, never as a scalar.
        MetaValue::Array(_) => Value::Array(Vec::new()),
    }
}

/// The `[[metadata]]` entries of a parsed section, appended to `out`.
pub(crate) fn from_toml(
    doc: &toml::Table,
    out: &mut Vec<(String, MetaValue)>,
) -> Result<(), String> {
    let Some(list) = doc.get("metadata") else {
        return Ok(());
    };
    let list = list
        .as_array()
        .ok_or("\"metadata\" is not an array of tables")?;
    for (i, e) in list.iter().enumerate() {
        let e = e
            .as_table()
            .ok_or_else(|| format!("metadata entry {i} is not a table"))?;
        let key = e
            .get("key")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("metadata entry {i} has no string \"key\""))?;
        let err = |r: &str| format!("metadata {key:?}: {r}");
        let ty = e
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| err("no string \"type\""))?;
        let v = if ty == "array" {
            MetaValue::Array(read_array(e, 0).map_err(|r| err(&r))?)
        } else {
            let value = e.get("value").ok_or_else(|| err("no \"value\""))?;
            typed(ty, value).ok_or_else(|| err(&format!("value is not a {ty}")))?
        };
        out.push((key.to_string(), v));
    }
    Ok(())
}

/// GGUF nests arrays at most a few levels; the bound keeps hostile nesting from recursing deep.
const MAX_NESTING: usize = 8;

fn read_array(t: &toml::Table, depth: usize) -> Result<MetaArray, String> {
    if depth > MAX_NESTING {
        return Err(format!("arrays nested deeper than {MAX_NESTING}"));
    }
    let item = t
        .get("item")
        .and_then(Value::as_str)
        .ok_or("array without an \"item\" type")?;
    if let Some(b) = t.get("bytes") {
        let text = b.as_str().ok_or("\"bytes\" is not a string")?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| format!("\"bytes\" is not base64: {e}"))?;
        return MetaArray::from_le_bytes(item, &bytes)
            .ok_or_else(|| format!("\"bytes\" are not whole {item} items"));
    }
    let items = t
        .get("value")
        .and_then(Value::as_array)
        .ok_or("array value is not an array")?;
    let bad = || format!("an item is not a {item}");
    macro_rules! collect {
        ($variant:ident, $scalar:ident) => {
            MetaArray::$variant(
                items
                    .iter()
                    .map(|x| match typed(item, x) {
                        Some(MetaValue::$scalar(v)) => Ok(v),
                        _ => Err(bad()),
                    })
                    .collect::<Result<_, String>>()?,
            )
        };
    }
    Ok(match item {
        "u8" => collect!(U8, U8),
        "i8" => collect!(I8, I8),
        "u16" => collect!(U16, U16),
        "i16" => collect!(I16, I16),
        "u32" => collect!(U32, U32),
        "i32" => collect!(I32, I32),
        "u64" => collect!(U64, U64),
        "i64" => collect!(I64, I64),
        "f32" => collect!(F32, F32),
        "f64" => collect!(F64, F64),
        "bool" => collect!(Bool, Bool),
        "string" => collect!(String, String),
        "array" => MetaArray::Array(
            items
                .iter()
                .map(|x| match x {
                    Value::Table(inner) => read_array(inner, depth + 1),
                    _ => Err(bad()),
                })
                .collect::<Result<_, String>>()?,
        ),
        other => return Err(format!("unknown item type {other:?}")),
    })
}

fn typed(ty: &str, v: &Value) -> Option<MetaValue> {
    let int = || -> Option<i128> {
        match v {
            Value::Integer(i) => Some((*i).into()),
            Value::String(s) => s.parse().ok(),
            _ => None,
        }
    };
    Some(match ty {
        "u8" => MetaValue::U8(int()?.try_into().ok()?),
        "i8" => MetaValue::I8(int()?.try_into().ok()?),
        "u16" => MetaValue::U16(int()?.try_into().ok()?),
        "i16" => MetaValue::I16(int()?.try_into().ok()?),
        "u32" => MetaValue::U32(int()?.try_into().ok()?),
        "i32" => MetaValue::I32(int()?.try_into().ok()?),
        "u64" => MetaValue::U64(int()?.try_into().ok()?),
        "i64" => MetaValue::I64(int()?.try_into().ok()?),
        // The writer stores the exact f64 widening of an f32; narrowing it back is exact.
        "f32" => MetaValue::F32(v.as_float()? as f32),
        "f64" => MetaValue::F64(v.as_float()?),
        "bool" => MetaValue::Bool(v.as_bool()?),
        "string" => MetaValue::String(v.as_str()?.to_string()),
        _ => return None,
    })
}

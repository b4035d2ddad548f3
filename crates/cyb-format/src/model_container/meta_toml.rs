//! GGUF metadata as typed TOML entries (`[[metadata]] key, type, [item], value`), so a model
//! imported from GGUF opens with exactly the metadata values and types it had.

use crate::metadata::MetaValue;
use toml::Value;

/// The TOML document `[[metadata]]` for `entries` (in order).
pub(crate) fn to_toml(entries: &[(String, MetaValue)]) -> Result<toml::Table, String> {
    let mut list = Vec::with_capacity(entries.len());
    for (key, v) in entries {
        let mut t = toml::Table::new();
        t.insert("key".into(), Value::String(key.clone()));
        t.insert("type".into(), Value::String(v.type_name().into()));
        if let MetaValue::Array(items) = v {
            let (item, value) = array(items).map_err(|r| format!("metadata {key:?}: {r}"))?;
            t.insert("item".into(), Value::String(item.into()));
            t.insert("value".into(), value);
        } else {
            t.insert("value".into(), scalar(v));
        }
        list.push(Value::Table(t));
    }
    let mut doc = toml::Table::new();
    doc.insert("metadata".into(), Value::Array(list));
    Ok(doc)
}

/// An array's item type and TOML value; an element that is itself an array is written as an
/// inline table `{ item, value }`.
fn array(items: &[MetaValue]) -> Result<(&'static str, Value), String> {
    let item = items.first().map_or("u8", MetaValue::type_name);
    let mut out = Vec::with_capacity(items.len());
    for x in items {
        if x.type_name() != item {
            return Err("an array mixes item types".into());
        }
        out.push(match x {
            MetaValue::Array(inner) => {
                let (ty, v) = array(inner)?;
                let mut t = toml::Table::new();
                t.insert("item".into(), Value::String(ty.into()));
                t.insert("value".into(), v);
                Value::Table(t)
            }
            x => scalar(x),
        });
    }
    Ok((item, Value::Array(out)))
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
        // Nested arrays are refused by `to_toml` before we get here.
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
        let value = e.get("value").ok_or_else(|| err("no \"value\""))?;
        let v = if ty == "array" {
            read_array(e, 0).map_err(|r| err(&r))?
        } else {
            typed(ty, value).ok_or_else(|| err(&format!("value is not a {ty}")))?
        };
        out.push((key.to_string(), v));
    }
    Ok(())
}

/// GGUF nests arrays at most a few levels; the bound keeps hostile nesting from recursing deep.
const MAX_NESTING: usize = 8;

fn read_array(t: &toml::Table, depth: usize) -> Result<MetaValue, String> {
    if depth > MAX_NESTING {
        return Err(format!("arrays nested deeper than {MAX_NESTING}"));
    }
    let item = t
        .get("item")
        .and_then(Value::as_str)
        .ok_or("array without an \"item\" type")?;
    let items = t
        .get("value")
        .and_then(Value::as_array)
        .ok_or("array value is not an array")?;
    let mut vs = Vec::with_capacity(items.len());
    for x in items {
        let v = match (item, x) {
            ("array", Value::Table(inner)) => read_array(inner, depth + 1)?,
            _ => typed(item, x).ok_or_else(|| format!("an item is not a {item}"))?,
        };
        vs.push(v);
    }
    Ok(MetaValue::Array(vs))
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

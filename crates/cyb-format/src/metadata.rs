//! Metadata values as GGUF stores them, with a JSON form for scripts and a short form for people.

use serde_json::Value;

/// One GGUF metadata value. Arrays may nest.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<MetaValue>),
}

impl MetaValue {
    /// The GGUF type name (`"u32"`, `"string"`, `"array"`...).
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaValue::U8(_) => "u8",
            MetaValue::I8(_) => "i8",
            MetaValue::U16(_) => "u16",
            MetaValue::I16(_) => "i16",
            MetaValue::U32(_) => "u32",
            MetaValue::I32(_) => "i32",
            MetaValue::U64(_) => "u64",
            MetaValue::I64(_) => "i64",
            MetaValue::F32(_) => "f32",
            MetaValue::F64(_) => "f64",
            MetaValue::Bool(_) => "bool",
            MetaValue::String(_) => "string",
            MetaValue::Array(_) => "array",
        }
    }

    /// Any integer type that fits a `u64` (negative values give `None`).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer or float as `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v.into()),
            MetaValue::F64(v) => Some(v),
            MetaValue::I8(v) => Some(v.into()),
            MetaValue::I16(v) => Some(v.into()),
            MetaValue::I32(v) => Some(v.into()),
            MetaValue::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[MetaValue]> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The full value as JSON (non-finite floats become `null`, as JSON has no NaN).
    pub fn to_json(&self) -> Value {
        match self {
            MetaValue::U8(v) => (*v).into(),
            MetaValue::I8(v) => (*v).into(),
            MetaValue::U16(v) => (*v).into(),
            MetaValue::I16(v) => (*v).into(),
            MetaValue::U32(v) => (*v).into(),
            MetaValue::I32(v) => (*v).into(),
            MetaValue::U64(v) => (*v).into(),
            MetaValue::I64(v) => (*v).into(),
            MetaValue::F32(v) => {
                serde_json::Number::from_f64(f64::from(*v)).map_or(Value::Null, Value::Number)
            }
            MetaValue::F64(v) => {
                serde_json::Number::from_f64(*v).map_or(Value::Null, Value::Number)
            }
            MetaValue::Bool(v) => (*v).into(),
            MetaValue::String(s) => s.clone().into(),
            MetaValue::Array(a) => a.iter().map(MetaValue::to_json).collect(),
        }
    }

    /// A one-line form for people (see [`summarize_json`]).
    pub fn summary(&self) -> String {
        summarize_json(&self.to_json())
    }
}

/// A one-line form of a JSON value for people: long arrays (tokenizer vocabularies) show their
/// length and first few items, long strings (chat templates) are cut.
pub fn summarize_json(v: &Value) -> String {
    const ITEMS: usize = 6;
    const CHARS: usize = 80;
    match v {
        Value::String(s) => {
            let short: String = s.chars().take(CHARS).collect();
            let more = if short.len() < s.len() { "..." } else { "" };
            format!("{short:?}{more}")
        }
        Value::Array(a) => {
            let head: Vec<String> = a.iter().take(ITEMS).map(summarize_json).collect();
            if a.len() > ITEMS {
                format!("[{} values: {}, ...]", a.len(), head.join(", "))
            } else {
                format!("[{}]", head.join(", "))
            }
        }
        Value::Object(o) if o.len() > ITEMS => format!("{{{} keys}}", o.len()),
        v => {
            let s = v.to_string();
            if s.chars().count() > CHARS {
                format!("{}...", s.chars().take(CHARS).collect::<String>())
            } else {
                s
            }
        }
    }
}

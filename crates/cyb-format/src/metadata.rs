//! Metadata values as GGUF stores them, with a JSON form for scripts and a short form for people.
//!
//! Arrays are typed vectors ([`MetaArray`]): an array of a million `u8` takes a megabyte, as in
//! the file, not a value per element.

use serde_json::Value;

/// One GGUF metadata value.
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
    Array(MetaArray),
}

/// A GGUF metadata array: its items in one vector of their type. Arrays of arrays (rare; GGUF
/// allows them) hold each inner array as its own `MetaArray`.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<MetaArray>),
}

impl MetaArray {
    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::F64(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::String(v) => v.len(),
            MetaArray::Array(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The GGUF type name of the items (`"u8"`, `"string"`, `"array"`...).
    pub fn item_type_name(&self) -> &'static str {
        match self {
            MetaArray::U8(_) => "u8",
            MetaArray::I8(_) => "i8",
            MetaArray::U16(_) => "u16",
            MetaArray::I16(_) => "i16",
            MetaArray::U32(_) => "u32",
            MetaArray::I32(_) => "i32",
            MetaArray::U64(_) => "u64",
            MetaArray::I64(_) => "i64",
            MetaArray::F32(_) => "f32",
            MetaArray::F64(_) => "f64",
            MetaArray::Bool(_) => "bool",
            MetaArray::String(_) => "string",
            MetaArray::Array(_) => "array",
        }
    }

    /// Item `i` as a value of its own (a string or an inner array is copied).
    pub fn get(&self, i: usize) -> Option<MetaValue> {
        Some(match self {
            MetaArray::U8(v) => MetaValue::U8(*v.get(i)?),
            MetaArray::I8(v) => MetaValue::I8(*v.get(i)?),
            MetaArray::U16(v) => MetaValue::U16(*v.get(i)?),
            MetaArray::I16(v) => MetaValue::I16(*v.get(i)?),
            MetaArray::U32(v) => MetaValue::U32(*v.get(i)?),
            MetaArray::I32(v) => MetaValue::I32(*v.get(i)?),
            MetaArray::U64(v) => MetaValue::U64(*v.get(i)?),
            MetaArray::I64(v) => MetaValue::I64(*v.get(i)?),
            MetaArray::F32(v) => MetaValue::F32(*v.get(i)?),
            MetaArray::F64(v) => MetaValue::F64(*v.get(i)?),
            MetaArray::Bool(v) => MetaValue::Bool(*v.get(i)?),
            MetaArray::String(v) => MetaValue::String(v.get(i)?.clone()),
            MetaArray::Array(v) => MetaValue::Array(v.get(i)?.clone()),
        })
    }

    /// The items one at a time, as [`get`](MetaArray::get) gives them.
    pub fn iter(&self) -> impl Iterator<Item = MetaValue> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The items of a string array.
    pub fn as_strs(&self) -> Option<&[String]> {
        match self {
            MetaArray::String(v) => Some(v),
            _ => None,
        }
    }

    /// Item `i` of a string array.
    pub fn str_at(&self, i: usize) -> Option<&str> {
        self.as_strs()?.get(i).map(String::as_str)
    }

    /// Every item of a numeric array as `f64` (`None` for strings, bools and nested arrays).
    pub fn to_f64s(&self) -> Option<Vec<f64>> {
        match self {
            MetaArray::String(_) | MetaArray::Array(_) | MetaArray::Bool(_) => None,
            _ => Some(self.iter().filter_map(|v| v.as_f64()).collect()),
        }
    }

    /// A numeric array of items of type `item` (`"u8"` ... `"f64"`) from their little-endian
    /// bytes; `None` for another item type or a length that is not whole items.
    pub fn from_le_bytes(item: &str, b: &[u8]) -> Option<MetaArray> {
        macro_rules! read {
            ($variant:ident, $t:ty) => {{
                const N: usize = std::mem::size_of::<$t>();
                if b.len() % N != 0 {
                    return None;
                }
                MetaArray::$variant(
                    b.chunks_exact(N)
                        .map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or_default()))
                        .collect(),
                )
            }};
        }
        Some(match item {
            "u8" => MetaArray::U8(b.to_vec()),
            "i8" => MetaArray::I8(b.iter().map(|&x| x as i8).collect()),
            "u16" => read!(U16, u16),
            "i16" => read!(I16, i16),
            "u32" => read!(U32, u32),
            "i32" => read!(I32, i32),
            "u64" => read!(U64, u64),
            "i64" => read!(I64, i64),
            "f32" => read!(F32, f32),
            "f64" => read!(F64, f64),
            _ => return None,
        })
    }

    /// The little-endian bytes of a numeric array's items (`None` for strings, bools and
    /// nested arrays).
    pub fn to_le_bytes(&self) -> Option<Vec<u8>> {
        macro_rules! le {
            ($v:expr) => {
                $v.iter().flat_map(|x| x.to_le_bytes()).collect()
            };
        }
        Some(match self {
            MetaArray::U8(v) => v.clone(),
            MetaArray::I8(v) => le!(v),
            MetaArray::U16(v) => le!(v),
            MetaArray::I16(v) => le!(v),
            MetaArray::U32(v) => le!(v),
            MetaArray::I32(v) => le!(v),
            MetaArray::U64(v) => le!(v),
            MetaArray::I64(v) => le!(v),
            MetaArray::F32(v) => le!(v),
            MetaArray::F64(v) => le!(v),
            MetaArray::Bool(_) | MetaArray::String(_) | MetaArray::Array(_) => return None,
        })
    }

    /// The full array as JSON.
    pub fn to_json(&self) -> Value {
        Value::Array(self.iter().map(|v| v.to_json()).collect())
    }

    /// A one-line form for people: the length and first few items of a long array, made
    /// without converting the rest.
    pub fn summary(&self) -> String {
        let n = self.len();
        let head: Vec<String> = (0..n.min(SUMMARY_ITEMS))
            .filter_map(|i| self.get(i))
            .map(|v| v.summary())
            .collect();
        if n > SUMMARY_ITEMS {
            format!("[{n} values: {}, ...]", head.join(", "))
        } else {
            format!("[{}]", head.join(", "))
        }
    }
}

/// Items a summary shows.
const SUMMARY_ITEMS: usize = 6;

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

    pub fn as_array(&self) -> Option<&MetaArray> {
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
            MetaValue::Array(a) => a.to_json(),
        }
    }

    /// A one-line form for people (see [`summarize_json`]); an array's without converting
    /// more than the items it shows.
    pub fn summary(&self) -> String {
        match self {
            MetaValue::Array(a) => a.summary(),
            v => summarize_json(&v.to_json()),
        }
    }
}

/// A one-line form of a JSON value for people: long arrays (tokenizer vocabularies) show their
/// length and first few items, long strings (chat templates) are cut.
pub fn summarize_json(v: &Value) -> String {
    const ITEMS: usize = SUMMARY_ITEMS;
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

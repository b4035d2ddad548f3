//! The compact value syntax of op parameters in the graph text: JSON's data model written the
//! way Rust enums read. `Conv{strides:[2,2],pads:Explicit([1,1,1,1]),group:1}`,
//! `Unary{f:LeakyRelu{alpha:0.1}}`, `Add`. Identifiers stand for strings, `Name{..}` and
//! `Name(..)` for an object with one key `Name` (enum variants are CamelCase, fields
//! snake_case, so `{f:Exp}` stays an object). Numbers are written as serde_json writes them, so
//! f32 parameters round-trip exactly.

use serde_json::{Map, Number, Value};
use std::fmt::Write as _;

/// Writes `v` in the compact syntax.
pub(crate) fn write(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        Value::Number(n) => match n.as_f64() {
            // Op parameters are f32; serde_json widens them to f64 (0.1 → 0.10000000149011612).
            // Print the f32's shortest form when it is that value exactly.
            Some(f) if n.is_f64() && (f as f32) as f64 == f && f.is_finite() => {
                let _ = write!(out, "{:?}", f as f32);
            }
            _ => {
                let _ = write!(out, "{n}");
            }
        },
        Value::String(s) => write_str(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            if m.len() == 1 {
                if let Some((k, inner)) = m.iter().next() {
                    if is_variant(k) {
                        out.push_str(k);
                        match inner {
                            Value::Object(f) => write_fields(f, out),
                            other => {
                                out.push('(');
                                write(other, out);
                                out.push(')');
                            }
                        }
                        return;
                    }
                }
            }
            write_fields(m, out);
        }
    }
}

fn write_fields(m: &Map<String, Value>, out: &mut String) {
    out.push('{');
    for (i, (k, x)) in m.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(k, out);
        out.push(':');
        write(x, out);
    }
    out.push('}');
}

fn is_variant(k: &str) -> bool {
    k.starts_with(|c: char| c.is_ascii_uppercase()) && is_ident(k)
}

pub(crate) fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
        && !matches!(s, "null" | "true" | "false")
}

fn write_str(s: &str, out: &mut String) {
    if is_ident(s) {
        out.push_str(s);
    } else {
        out.push_str(&Value::String(s.to_string()).to_string());
    }
}

/// A parser over the compact syntax; positions are byte offsets into the line.
pub(crate) struct Parser<'a> {
    pub s: &'a str,
    pub pos: usize,
}

impl<'a> Parser<'a> {
    pub fn new(s: &'a str) -> Parser<'a> {
        Parser { s, pos: 0 }
    }

    pub fn rest(&self) -> &'a str {
        self.s.get(self.pos..).unwrap_or("")
    }

    pub fn skip_ws(&mut self) {
        let r = self.rest();
        self.pos += r.len() - r.trim_start().len();
    }

    pub fn peek(&mut self) -> Option<char> {
        self.skip_ws();
        self.rest().chars().next()
    }

    pub fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    pub fn expect(&mut self, c: char) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected '{c}' at column {}", self.pos + 1))
        }
    }

    /// An identifier made of `[A-Za-z0-9_]` and the extra characters in `extra`.
    pub fn ident_with(&mut self, extra: &str) -> Option<&'a str> {
        self.skip_ws();
        let r = self.rest();
        let n = r
            .char_indices()
            .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_' || extra.contains(c)))
            .map_or(r.len(), |(i, _)| i);
        if n == 0 {
            return None;
        }
        self.pos += n;
        Some(&r[..n])
    }

    /// A JSON string literal.
    pub fn string(&mut self) -> Result<String, String> {
        self.skip_ws();
        let r = self.rest();
        let mut de = serde_json::Deserializer::from_str(r).into_iter::<String>();
        match de.next() {
            Some(Ok(s)) => {
                self.pos += de.byte_offset();
                Ok(s)
            }
            _ => Err(format!("bad string at column {}", self.pos + 1)),
        }
    }

    /// A name: an identifier (with `extra` characters) or a quoted string.
    pub fn name(&mut self, extra: &str) -> Result<String, String> {
        if self.peek() == Some('"') {
            return self.string();
        }
        self.ident_with(extra)
            .map(str::to_string)
            .ok_or_else(|| format!("expected a name at column {}", self.pos + 1))
    }

    /// One value in the compact syntax.
    pub fn value(&mut self) -> Result<Value, String> {
        match self.peek() {
            Some('[') => {
                self.pos += 1;
                let mut a = Vec::new();
                if !self.eat(']') {
                    loop {
                        a.push(self.value()?);
                        if self.eat(']') {
                            break;
                        }
                        self.expect(',')?;
                    }
                }
                Ok(Value::Array(a))
            }
            Some('{') => self.fields(),
            Some('"') => Ok(Value::String(self.string()?)),
            Some(c) if c == '-' || c.is_ascii_digit() => self.number(),
            Some(_) => {
                let id = self
                    .ident_with("")
                    .ok_or_else(|| format!("unexpected character at column {}", self.pos + 1))?;
                match id {
                    "null" => return Ok(Value::Null),
                    "true" => return Ok(Value::Bool(true)),
                    "false" => return Ok(Value::Bool(false)),
                    _ => {}
                }
                if !is_variant(id) {
                    return Ok(Value::String(id.to_string()));
                }
                let inner = match self.peek() {
                    Some('{') => self.fields()?,
                    Some('(') => {
                        self.pos += 1;
                        let v = self.value()?;
                        self.expect(')')?;
                        v
                    }
                    _ => return Ok(Value::String(id.to_string())),
                };
                let mut m = Map::new();
                m.insert(id.to_string(), inner);
                Ok(Value::Object(m))
            }
            None => Err("unexpected end of line".into()),
        }
    }

    /// `Variant` or `Variant{..}` only (no `(..)`: at the top of a node an argument list
    /// follows).
    pub fn variant(&mut self) -> Result<Value, String> {
        let id = self
            .ident_with("")
            .ok_or_else(|| format!("expected an op name at column {}", self.pos + 1))?;
        if self.peek() == Some('{') {
            let mut m = Map::new();
            m.insert(id.to_string(), self.fields()?);
            return Ok(Value::Object(m));
        }
        Ok(Value::String(id.to_string()))
    }

    fn fields(&mut self) -> Result<Value, String> {
        self.expect('{')?;
        let mut m = Map::new();
        if !self.eat('}') {
            loop {
                let k = self.name("")?;
                self.expect(':')?;
                m.insert(k, self.value()?);
                if self.eat('}') {
                    break;
                }
                self.expect(',')?;
            }
        }
        Ok(Value::Object(m))
    }

    fn number(&mut self) -> Result<Value, String> {
        self.skip_ws();
        let r = self.rest();
        let n = r
            .char_indices()
            .find(|&(_, c)| !(c.is_ascii_digit() || "+-.eE".contains(c)))
            .map_or(r.len(), |(i, _)| i);
        let num: Number = r[..n]
            .parse()
            .map_err(|_| format!("bad number {:?} at column {}", &r[..n], self.pos + 1))?;
        self.pos += n;
        Ok(Value::Number(num))
    }
}

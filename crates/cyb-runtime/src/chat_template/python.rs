//! The Python behaviour chat templates are written against: transformers renders them with
//! Jinja2 on Python objects, so printed values, `tojson` and `strftime_now` must read the way
//! Python writes them, or the prompt differs from the one the model was trained on.

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};
use std::fmt::Write;

/// `str(value)` as Python prints it: `None`, `True`/`False`, containers in `repr` form.
/// Undefined prints as nothing, as Jinja2's default `Undefined` does.
pub fn py_str(value: &Value) -> String {
    match value.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::String => value.as_str().unwrap_or_default().to_string(),
        _ => py_repr(value),
    }
}

/// `repr(value)` for the JSON-like values a template sees.
pub fn py_repr(value: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, value);
    out
}

fn write_repr(out: &mut String, value: &Value) {
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => out.push_str(&number_repr(value)),
        ValueKind::String => write_str_repr(out, value.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in value.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &item);
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &key);
                out.push_str(": ");
                write_repr(out, &value.get_item(&key).unwrap_or_default());
            }
            out.push('}');
        }
        _ => out.push_str(&value.to_string()),
    }
}

/// Python's string repr: single quotes unless the text has a `'` and no `"`.
fn write_str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

fn number_repr(value: &Value) -> String {
    if value.is_integer() {
        return value.to_string();
    }
    match f64::try_from(value.clone()) {
        Ok(x) => float_repr(x),
        Err(_) => value.to_string(),
    }
}

/// Python's `repr(float)`: the shortest round-tripping digits, in fixed notation when the
/// decimal exponent is in [-4, 16), else `d.ddde±XX`; always with a `.0` or exponent.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // `{:e}` gives the shortest round-trip digits, e.g. "1.2345e-5".
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if x < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let body = if exp < 0 {
            format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
        } else if exp + 1 >= n {
            format!("{}{}.0", digits, "0".repeat((exp + 1 - n) as usize))
        } else {
            let (int, frac) = digits.split_at((exp + 1) as usize);
            format!("{int}.{frac}")
        };
        format!("{sign}{body}")
    } else {
        let (first, rest) = digits.split_at(1);
        let mant = if rest.is_empty() {
            first.to_string()
        } else {
            format!("{first}.{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mant}e{esign}{:02}", exp.abs())
    }
}

/// The `tojson` filter transformers installs: `json.dumps(x, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)` — no HTML escaping, keys in insertion order.
pub fn tojson(value: &Value, kwargs: Kwargs) -> Result<String, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) if v.kind() == ValueKind::String => {
            Some(v.as_str().unwrap_or_default().to_string())
        }
        Some(v) => Some(" ".repeat(v.as_usize().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidOperation,
                "tojson: indent must be an int or string",
            )
        })?)),
    };
    let (item_sep, key_sep) = match separators {
        Some(v) if !v.is_none() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] => (
                    a.as_str().unwrap_or(",").to_string(),
                    b.as_str().unwrap_or(": ").to_string(),
                ),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be a pair",
                    ))
                }
            }
        }
        _ if indent.is_some() => (",".to_string(), ": ".to_string()),
        _ => (", ".to_string(), ": ".to_string()),
    };
    let mut w = JsonWriter {
        out: String::new(),
        indent,
        item_sep,
        key_sep,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
    };
    w.value(value, 0)?;
    Ok(w.out)
}

struct JsonWriter {
    out: String,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

impl JsonWriter {
    fn newline(&mut self, level: usize) {
        if let Some(ind) = &self.indent {
            self.out.push('\n');
            for _ in 0..level {
                self.out.push_str(ind);
            }
        }
    }

    fn value(&mut self, value: &Value, level: usize) -> Result<(), Error> {
        match value.kind() {
            ValueKind::None => self.out.push_str("null"),
            ValueKind::Bool => self
                .out
                .push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => self.out.push_str(&number_repr(value)),
            ValueKind::String => self.string(value.as_str().unwrap_or_default()),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                self.seq(&items, level)?;
            }
            ValueKind::Map => {
                let mut entries = Vec::new();
                for key in value.try_iter()? {
                    let k = json_key(&key)?;
                    entries.push((k, value.get_item(&key)?));
                }
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(&b.0));
                }
                self.map(&entries, level)?;
            }
            kind => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: object of kind {kind} is not JSON serializable"),
                ))
            }
        }
        Ok(())
    }

    fn seq(&mut self, items: &[Value], level: usize) -> Result<(), Error> {
        if items.is_empty() {
            self.out.push_str("[]");
            return Ok(());
        }
        self.out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                let sep = self.item_sep.clone();
                self.out.push_str(&sep);
            }
            self.newline(level + 1);
            self.value(item, level + 1)?;
        }
        self.newline(level);
        self.out.push(']');
        Ok(())
    }

    fn map(&mut self, entries: &[(String, Value)], level: usize) -> Result<(), Error> {
        if entries.is_empty() {
            self.out.push_str("{}");
            return Ok(());
        }
        self.out.push('{');
        for (i, (k, v)) in entries.iter().enumerate() {
            if i > 0 {
                let sep = self.item_sep.clone();
                self.out.push_str(&sep);
            }
            self.newline(level + 1);
            self.string(k);
            let sep = self.key_sep.clone();
            self.out.push_str(&sep);
            self.value(v, level + 1)?;
        }
        self.newline(level);
        self.out.push('}');
        Ok(())
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                '\u{8}' => self.out.push_str("\\b"),
                '\u{c}' => self.out.push_str("\\f"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(self.out, "\\u{:04x}", c as u32);
                }
                c if self.ensure_ascii && (c as u32) > 0x7e => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        let _ = write!(self.out, "\\u{:04x}", u);
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
}

/// Python's json turns non-string keys into strings the JSON way.
fn json_key(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_string()),
        ValueKind::Number => Ok(number_repr(key)),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.to_string()),
        ValueKind::None => Ok("null".to_string()),
        kind => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("tojson: keys must be str, int, float, bool or None, not {kind}"),
        )),
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// `datetime.strftime` for a UTC instant given as seconds since the Unix epoch, covering the
/// directives chat templates use (C-locale names). Unknown directives are kept as written,
/// as glibc does.
pub fn strftime(format: &str, unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let secs = unix_secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (secs / 3600, secs / 60 % 60, secs % 60);
    // 1970-01-01 was a Thursday (index 3 with Monday = 0).
    let weekday = (days + 3).rem_euclid(7) as usize;
    let yday = days - days_from_civil(year, 1, 1) + 1;
    let month_name = MONTHS
        .get((month as usize).wrapping_sub(1))
        .copied()
        .unwrap_or("");
    let weekday_name = WEEKDAYS.get(weekday).copied().unwrap_or("");
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };

    let mut out = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        // glibc's "%-d" style: no padding.
        let unpadded = chars.peek() == Some(&'-');
        if unpadded {
            chars.next();
        }
        let Some(d) = chars.next() else {
            out.push('%');
            break;
        };
        let num = |v: i64, width: usize| {
            if unpadded {
                v.to_string()
            } else {
                format!("{v:0width$}")
            }
        };
        let piece = match d {
            'Y' => year.to_string(),
            'y' => num(year.rem_euclid(100), 2),
            'm' => num(month, 2),
            'd' => num(day, 2),
            'e' => format!("{day:>2}"),
            'H' => num(hour, 2),
            'I' => num(hour12, 2),
            'M' => num(minute, 2),
            'S' => num(second, 2),
            'j' => num(yday, 3),
            'p' => if hour < 12 { "AM" } else { "PM" }.to_string(),
            'B' => month_name.to_string(),
            'b' | 'h' => month_name.get(..3).unwrap_or("").to_string(),
            'A' => weekday_name.to_string(),
            'a' => weekday_name.get(..3).unwrap_or("").to_string(),
            'u' => (weekday + 1).to_string(),
            'w' => ((weekday + 1) % 7).to_string(),
            'F' => format!("{year:04}-{month:02}-{day:02}"),
            'T' => format!("{hour:02}:{minute:02}:{second:02}"),
            'Z' | 'z' => String::new(),
            '%' => "%".to_string(),
            other => format!("%{}{other}", if unpadded { "-" } else { "" }),
        };
        out.push_str(&piece);
    }
    out
}

/// Gregorian (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        // Expected strings are Python 3's repr() of the same floats.
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (123456789012345.0, "123456789012345.0"),
            (1e16, "1e+16"),
            (1.5e300, "1.5e+300"),
            (3.0e-310, "3e-310"),
            (100.0, "100.0"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(x), want, "{x}");
        }
    }

    #[test]
    fn strftime_matches_python() {
        // 2025-03-07 14:05:09 UTC; expected strings from Python's datetime.strftime.
        let t = 1_741_356_309;
        assert_eq!(strftime("%d %b %Y", t), "07 Mar 2025");
        assert_eq!(strftime("%Y-%m-%d", t), "2025-03-07");
        assert_eq!(
            strftime("%A %B %-d, %H:%M:%S %p %j", t),
            "Friday March 7, 14:05:09 PM 066"
        );
        assert_eq!(strftime("%a %I%%", t), "Fri 02%");
        // Leap day and a date before the epoch.
        assert_eq!(strftime("%Y-%m-%d %j", 1_709_164_800), "2024-02-29 060");
        assert_eq!(strftime("%Y-%m-%d %a", -86_400), "1969-12-31 Wed");
    }

    #[test]
    fn repr_of_containers() {
        let v = Value::from(minijinja::value::Serde(
            serde_json::json!({"a": [1, "it's", null, true]}),
        ));
        assert_eq!(py_repr(&v), "{'a': [1, \"it's\", None, True]}");
    }
}

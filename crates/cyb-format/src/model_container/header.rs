//! The `.model` header: the magic line, the length-prefixed sections, and the tensor index.
//! Every number read from the file is checked before it is used (docs/model-format.md).

use crate::cursor::format_error;
use crate::gguf::{GgmlType, GGML_TYPES};
use cyb_tensor::{DType, Result, Shape};
use std::path::Path;

pub(crate) const MAGIC: &[u8] = b"cyb-model ";
pub(crate) const VERSION: u32 = 1;
pub(crate) const ALIGN: usize = 64;
pub(crate) const END: &[u8] = b"~~~end\n";
/// Section names in the order they must appear.
pub(crate) const SECTIONS: [&str; 7] = [
    "config", "tensors", "vocab", "chat", "sampling", "graph", "check",
];

/// The raw section bodies, borrowed from the file.
#[derive(Default)]
pub(crate) struct Sections<'a> {
    pub(crate) bodies: [Option<(usize, &'a [u8])>; 7],
    /// Bytes 0..header_len are the header (what the root hashes).
    pub(crate) header_len: usize,
    pub(crate) data_start: usize,
}

impl<'a> Sections<'a> {
    /// The body of `name` and its file offset.
    pub(crate) fn get(&self, name: &str) -> Option<(usize, &'a [u8])> {
        let i = SECTIONS.iter().position(|s| *s == name)?;
        self.bodies.get(i).copied().flatten()
    }
}

/// A tensor's type: what the file calls it and how big it is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TypeInfo {
    pub(crate) dtype: Option<DType>,
    pub(crate) ggml: Option<GgmlType>,
    block_elems: usize,
    block_bytes: usize,
}

pub(crate) fn type_info(name: &str) -> Option<TypeInfo> {
    let ggml = GGML_TYPES.iter().copied().find(|g| g.name == name);
    let dtype = DType::ALL.iter().copied().find(|d| d.name() == name);
    match (dtype, ggml) {
        (Some(d), _) => Some(TypeInfo {
            dtype: Some(d),
            ggml,
            block_elems: d.block_elems(),
            block_bytes: d.block_bytes(),
        }),
        (None, Some(g)) => Some(TypeInfo {
            dtype: None,
            ggml: Some(g),
            block_elems: g.block_elems,
            block_bytes: g.block_bytes,
        }),
        (None, None) => None,
    }
}

/// One line of the tensor index, validated against the file.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexEntry {
    pub name: String,
    pub type_name: String,
    pub shape: Shape,
    /// Absolute byte offset in the file.
    pub file_offset: usize,
    pub byte_len: usize,
    pub blake3: [u8; 32],
}

/// Splits the header into sections and finds where the data starts.
pub(crate) fn split<'a>(bytes: &'a [u8], path: &Path) -> Result<Sections<'a>> {
    let (version, mut pos) = match line_at(bytes, 0) {
        Some(l) if l.starts_with(MAGIC) => {
            let v = std::str::from_utf8(&l[MAGIC.len()..]).ok();
            (v.and_then(parse_decimal), l.len() + 1)
        }
        _ => {
            return Err(format_error(
                path,
                0,
                "not a .model file: the first line is not \"cyb-model <version>\"",
            ))
        }
    };
    match version {
        Some(v) if v == u64::from(VERSION) => {}
        Some(v) => {
            return Err(format_error(
                path,
                MAGIC.len(),
                format!(".model version {v} is not supported (this build reads version {VERSION})"),
            ))
        }
        None => return Err(format_error(path, MAGIC.len(), "malformed .model version")),
    }
    let mut out = Sections::default();
    let mut next = 0usize;
    loop {
        if bytes.get(pos..).is_some_and(|b| b.starts_with(END)) {
            pos += END.len();
            break;
        }
        let at = pos;
        let err = |r: String| format_error(path, at, r);
        let line = line_at(bytes, pos)
            .ok_or_else(|| err("header ends without a \"~~~end\" line".into()))?;
        let text = std::str::from_utf8(line)
            .ok()
            .and_then(|l| l.strip_prefix("~~~"))
            .ok_or_else(|| err("expected a section line \"~~~NAME LEN\" or \"~~~end\"".into()))?;
        let (name, len) = text
            .split_once(' ')
            .ok_or_else(|| err(format!("section line {text:?} has no length")))?;
        let i = SECTIONS
            .iter()
            .position(|s| *s == name)
            .ok_or_else(|| err(format!("unknown section {name:?}")))?;
        if i < next {
            return Err(err(format!(
                "section {name:?} is repeated or out of order (order: {})",
                SECTIONS.join(", ")
            )));
        }
        next = i + 1;
        let len = parse_decimal(len)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| err(format!("section {name:?}: bad length {len:?}")))?;
        let start = pos + line.len() + 1;
        let body = start
            .checked_add(len)
            .and_then(|end| bytes.get(start..end).map(|b| (b, end)));
        let Some((body, end)) = body.filter(|(_, end)| bytes.get(*end) == Some(&b'\n')) else {
            return Err(err(format!(
                "section {name:?} ({len} bytes) runs past the end of the file or lacks its closing newline"
            )));
        };
        if let Some(slot) = out.bodies.get_mut(i) {
            *slot = Some((start, body));
        }
        pos = end + 1;
    }
    for required in ["config", "tensors"] {
        if out.get(required).is_none() {
            return Err(format_error(
                path,
                pos,
                format!("required section {required:?} is missing"),
            ));
        }
    }
    let data_start = pos.div_ceil(ALIGN) * ALIGN;
    match bytes.get(pos..data_start) {
        Some(pad) if pad.iter().all(|&b| b == 0) => {}
        Some(_) => {
            return Err(format_error(
                path,
                pos,
                "padding after the header is not zero",
            ))
        }
        None => {
            return Err(format_error(
                path,
                pos,
                format!("file ends inside the padding before the data section at {data_start}"),
            ))
        }
    }
    out.header_len = pos;
    out.data_start = data_start;
    Ok(out)
}

/// The bytes from `pos` up to (not including) the next `\n`, if there is one.
fn line_at(bytes: &[u8], pos: usize) -> Option<&[u8]> {
    let rest = bytes.get(pos..)?;
    let n = rest.iter().position(|&b| b == b'\n')?;
    rest.get(..n)
}

/// Plain ASCII decimal (no sign, no leading zeros except "0"), as the format requires.
fn parse_decimal(s: &str) -> Option<u64> {
    let ok =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    ok.then(|| s.parse().ok()).flatten()
}

pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Parses and checks the tensor index: every entry inside the file, aligned, in order, disjoint,
/// and the file ending at the last tensor.
pub(crate) fn parse_index(
    body: &[u8],
    body_at: usize,
    data_start: usize,
    file: &[u8],
    path: &Path,
) -> Result<Vec<IndexEntry>> {
    let file_len = file.len();
    let text = std::str::from_utf8(body).map_err(|e| {
        format_error(
            path,
            body_at,
            format!("section \"tensors\" is not UTF-8: {e}"),
        )
    })?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(format_error(
            path,
            body_at,
            "section \"tensors\": last line lacks its newline",
        ));
    }
    let mut out: Vec<IndexEntry> = Vec::new();
    let mut names = std::collections::HashSet::new();
    let mut end_of_data = data_start;
    let mut at = body_at;
    for line in text.lines() {
        let e = parse_line(line, at, data_start, file_len, path)?;
        let err = |r: String| format_error(path, at, format!("tensor {:?}: {r}", e.name));
        if !names.insert(e.name.clone()) {
            return Err(err("listed twice".into()));
        }
        if e.file_offset < end_of_data {
            return Err(err(format!(
                "data at {} overlaps the previous tensor or is out of order (previous data ends at {end_of_data})",
                e.file_offset
            )));
        }
        // Padding is not covered by any hash, so it must be exactly what the writer puts there.
        if file
            .get(end_of_data..e.file_offset)
            .is_none_or(|p| p.iter().any(|&b| b != 0))
        {
            return Err(err(format!(
                "padding before its data at {} is not zero",
                e.file_offset
            )));
        }
        end_of_data = e.file_offset + e.byte_len;
        out.push(e);
        at += line.len() + 1;
    }
    if end_of_data != file_len {
        return Err(format_error(
            path,
            end_of_data.min(file_len),
            format!("the file is {file_len} bytes but its tensor data ends at {end_of_data}"),
        ));
    }
    Ok(out)
}

fn parse_line(
    line: &str,
    at: usize,
    data_start: usize,
    file_len: usize,
    path: &Path,
) -> Result<IndexEntry> {
    let fields: Vec<&str> = line.split(' ').collect();
    let [name, ty, shape, offset, len, hash] = fields.as_slice() else {
        return Err(format_error(
            path,
            at,
            format!("section \"tensors\": line {line:?} does not have 6 fields"),
        ));
    };
    let err = |r: String| format_error(path, at, format!("tensor {name:?}: {r}"));
    if !valid_name(name) {
        return Err(err("invalid name".into()));
    }
    let info = type_info(ty).ok_or_else(|| err(format!("unknown dtype {ty:?}")))?;
    let dims = shape
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .ok_or_else(|| err(format!("shape {shape:?} is not [d0,d1,...]")))?;
    let mut d = Vec::new();
    if !dims.is_empty() {
        for x in dims.split(',') {
            match parse_decimal(x).and_then(|v| usize::try_from(v).ok()) {
                Some(v) if v >= 1 => d.push(v),
                _ => return Err(err(format!("bad dimension {x:?} in shape {shape}"))),
            }
        }
    }
    let shape = Shape::new(d).map_err(|_| err(format!("element count of {shape} overflows")))?;
    if !shape.last().is_multiple_of(info.block_elems) {
        return Err(err(format!(
            "row length {} is not a multiple of the {ty} block size {}",
            shape.last(),
            info.block_elems
        )));
    }
    let expect = (shape.numel() / info.block_elems).checked_mul(info.block_bytes);
    let offset = parse_decimal(offset).and_then(|v| usize::try_from(v).ok());
    let len = parse_decimal(len).and_then(|v| usize::try_from(v).ok());
    let (Some(offset), Some(len)) = (offset, len) else {
        return Err(err("malformed offset or length".into()));
    };
    if Some(len) != expect {
        return Err(err(format!(
            "length {len} is not the size of {ty} {shape} ({expect:?})"
        )));
    }
    if !offset.is_multiple_of(ALIGN) {
        return Err(err(format!("offset {offset} is not a multiple of {ALIGN}")));
    }
    let file_offset = data_start.checked_add(offset);
    if file_offset
        .and_then(|o| o.checked_add(len))
        .is_none_or(|end| end > file_len)
    {
        return Err(err(format!(
            "data ({len} bytes at offset {offset} from {data_start}) runs past the end of the {file_len}-byte file"
        )));
    }
    let blake3 = parse_hash(hash).ok_or_else(|| err(format!("bad blake3 {hash:?}")))?;
    Ok(IndexEntry {
        name: name.to_string(),
        type_name: ty.to_string(),
        shape,
        file_offset: file_offset.unwrap_or_default(),
        byte_len: len,
        blake3,
    })
}

fn parse_hash(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

pub(crate) fn hex(h: &[u8; 32]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

/// The index line for one tensor (the writer's side of `parse_line`).
pub(crate) fn index_line(e: &IndexEntry, data_offset: usize) -> String {
    let dims: Vec<String> = e.shape.dims().iter().map(usize::to_string).collect();
    format!(
        "{} {} [{}] {} {} {}\n",
        e.name,
        e.type_name,
        dims.join(","),
        data_offset,
        e.byte_len,
        hex(&e.blake3)
    )
}

/// The body of the `check` section for these section bodies: one line `NAME BLAKE3` per
/// section present, in section order. Its length depends only on which sections are present.
pub(crate) fn check_body<'b>(bodies: impl Iterator<Item = (&'static str, &'b [u8])>) -> String {
    let mut out = String::new();
    for (name, body) in bodies {
        out.push_str(name);
        out.push(' ');
        out.push_str(&hex(blake3::hash(body).as_bytes()));
        out.push('\n');
    }
    out
}

/// Parses a `check` body: `(section, blake3)` per line, each a known section other than
/// `check`, in section order, each at most once.
pub(crate) fn parse_check(body: &[u8], at: usize, path: &Path) -> Result<Vec<(String, [u8; 32])>> {
    let err = |r: String| format_error(path, at, format!("section \"check\": {r}"));
    let text = std::str::from_utf8(body).map_err(|_| err("not UTF-8".into()))?;
    let mut out: Vec<(String, [u8; 32])> = Vec::new();
    let mut next = 0usize;
    for line in text.lines() {
        let (name, h) = line
            .split_once(' ')
            .ok_or_else(|| err(format!("line {line:?} is not \"NAME BLAKE3\"")))?;
        let i = SECTIONS[..SECTIONS.len() - 1]
            .iter()
            .position(|s| *s == name)
            .filter(|&i| i >= next)
            .ok_or_else(|| {
                err(format!(
                    "{name:?} is not a section, or repeated or out of order"
                ))
            })?;
        next = i + 1;
        let h = parse_hash(h).ok_or_else(|| err(format!("bad blake3 {h:?} for {name:?}")))?;
        out.push((name.to_string(), h));
    }
    Ok(out)
}

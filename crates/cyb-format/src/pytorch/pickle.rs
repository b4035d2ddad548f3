//! A restricted unpickler: the pickle opcodes `torch.save` writes (protocols 2 to 5), building
//! plain values, and only the globals a state dict needs (tensor and parameter rebuilds,
//! storage types, `OrderedDict`). It never runs code: any other global is refused by name, and
//! stack, memo and item counts are bounded.

use cyb_tensor::{Error, Result};
use std::path::Path;

/// Values a state dict's pickle builds.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Val {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    Tuple(Vec<Val>),
    List(Vec<Val>),
    Dict(Vec<(Val, Val)>),
    /// An allowed global (`module.name`).
    Global(&'static str),
    /// A storage reference: element type name (`FloatStorage`…), key, element count.
    Storage {
        kind: String,
        key: String,
        numel: usize,
    },
    /// `_rebuild_tensor_v2(storage, offset, size, stride, ...)`.
    Tensor {
        storage: Box<Val>,
        offset: usize,
        size: Vec<usize>,
        stride: Vec<usize>,
    },
    Mark,
}

/// The globals a state dict may name.
const ALLOWED: &[&str] = &[
    "collections.OrderedDict",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_parameter",
    "torch.FloatStorage",
    "torch.DoubleStorage",
    "torch.HalfStorage",
    "torch.BFloat16Storage",
    "torch.LongStorage",
    "torch.IntStorage",
    "torch.ShortStorage",
    "torch.CharStorage",
    "torch.ByteStorage",
    "torch.BoolStorage",
    "torch.storage.UntypedStorage",
    "torch.float32",
    "torch.float16",
    "torch.bfloat16",
    "torch.int64",
];

const MAX_STACK: usize = 1 << 20;
const MAX_MEMO: usize = 1 << 20;
const MAX_ITEMS: usize = 1 << 22;

fn err(path: &Path, at: usize, reason: impl Into<String>) -> Error {
    Error::Format {
        file: path.to_path_buf(),
        offset: at as u64,
        reason: reason.into(),
    }
}

/// Runs the pickle at `bytes[start..]`; returns the value and the offset after STOP.
pub(super) fn unpickle(bytes: &[u8], start: usize, path: &Path) -> Result<(Val, usize)> {
    let mut p = start;
    let mut stack: Vec<Val> = Vec::new();
    let mut memo: Vec<Option<Val>> = Vec::new();
    let mut items = 0usize;
    macro_rules! take {
        ($n:expr) => {{
            let n: usize = $n;
            if bytes.len().saturating_sub(p) < n {
                return Err(err(path, p, "the pickle ends early"));
            }
            let s = &bytes[p..p + n];
            p += n;
            s
        }};
    }
    let pop = |stack: &mut Vec<Val>, at: usize| -> Result<Val> {
        stack
            .pop()
            .ok_or_else(|| err(path, at, "pickle stack underflow"))
    };
    // Everything above the topmost mark, and the mark removed.
    let pop_mark = |stack: &mut Vec<Val>, at: usize| -> Result<Vec<Val>> {
        let m = stack
            .iter()
            .rposition(|v| *v == Val::Mark)
            .ok_or_else(|| err(path, at, "pickle MARK missing"))?;
        let items = stack.split_off(m + 1);
        stack.pop();
        Ok(items)
    };
    loop {
        let at = p;
        let op = take!(1)[0];
        items += 1;
        if items > MAX_ITEMS || stack.len() > MAX_STACK || memo.len() > MAX_MEMO {
            return Err(err(
                path,
                at,
                "the pickle is larger than a state dict may be",
            ));
        }
        match op {
            0x80 => {
                // PROTO
                let v = take!(1)[0];
                if !(2..=5).contains(&v) {
                    return Err(err(path, at, format!("pickle protocol {v} is not read")));
                }
            }
            0x95 => {
                // FRAME: the length is advisory.
                take!(8);
            }
            b'.' => {
                return stack
                    .pop()
                    .map(|v| (v, p))
                    .ok_or_else(|| err(path, at, "empty pickle"))
            }
            b'(' => stack.push(Val::Mark),
            b'N' => stack.push(Val::None),
            0x88 => stack.push(Val::Bool(true)),
            0x89 => stack.push(Val::Bool(false)),
            b'K' => stack.push(Val::Int(i64::from(take!(1)[0]))),
            b'M' => {
                let b = take!(2);
                stack.push(Val::Int(i64::from(u16::from_le_bytes([b[0], b[1]]))));
            }
            b'J' => {
                let b = take!(4);
                stack.push(Val::Int(i64::from(i32::from_le_bytes([
                    b[0], b[1], b[2], b[3],
                ]))));
            }
            0x8a => {
                // LONG1: little-endian two's complement of n bytes.
                let n = take!(1)[0] as usize;
                let b = take!(n);
                if n > 8 {
                    // Only the magic number of the legacy format is this long; keep its value
                    // recognisable without overflowing.
                    stack.push(Val::Bytes(b.to_vec()));
                } else {
                    let mut v: i64 = 0;
                    for (i, &x) in b.iter().enumerate() {
                        v |= i64::from(x) << (8 * i);
                    }
                    if n > 0 && n < 8 && b[n - 1] & 0x80 != 0 {
                        v -= 1i64 << (8 * n);
                    }
                    stack.push(Val::Int(v));
                }
            }
            b'G' => {
                let b = take!(8);
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                stack.push(Val::Float(f64::from_be_bytes(a)));
            }
            b'X' | 0x8c | 0x8d => {
                let n = match op {
                    b'X' => {
                        let b = take!(4);
                        u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
                    }
                    0x8c => take!(1)[0] as usize,
                    _ => {
                        let b = take!(8);
                        usize::try_from(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
                            .map_err(|_| err(path, at, "string length"))?
                    }
                };
                let s = std::str::from_utf8(take!(n))
                    .map_err(|_| err(path, at, "a pickle string is not UTF-8"))?;
                stack.push(Val::Str(s.to_string()));
            }
            b'T' | b'U' | b'B' | b'C' | 0x8e => {
                let n = match op {
                    b'T' | b'B' => {
                        let b = take!(4);
                        u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
                    }
                    b'U' | b'C' => take!(1)[0] as usize,
                    _ => {
                        let b = take!(8);
                        usize::try_from(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
                            .map_err(|_| err(path, at, "bytes length"))?
                    }
                };
                let b = take!(n).to_vec();
                stack.push(match op {
                    b'T' | b'U' => Val::Str(String::from_utf8_lossy(&b).into_owned()),
                    _ => Val::Bytes(b),
                });
            }
            b'}' => stack.push(Val::Dict(Vec::new())),
            b']' => stack.push(Val::List(Vec::new())),
            b')' => stack.push(Val::Tuple(Vec::new())),
            b't' => {
                let items = pop_mark(&mut stack, at)?;
                stack.push(Val::Tuple(items));
            }
            b'l' => {
                let items = pop_mark(&mut stack, at)?;
                stack.push(Val::List(items));
            }
            b'd' => {
                let items = pop_mark(&mut stack, at)?;
                stack.push(Val::Dict(pairs(items, path, at)?));
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                if stack.len() < n {
                    return Err(err(path, at, "pickle stack underflow"));
                }
                let t = stack.split_off(stack.len() - n);
                stack.push(Val::Tuple(t));
            }
            b'q' | b'r' | 0x94 => {
                let idx = match op {
                    b'q' => take!(1)[0] as usize,
                    b'r' => {
                        let b = take!(4);
                        u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
                    }
                    _ => memo.len(),
                };
                if idx > MAX_MEMO {
                    return Err(err(path, at, "memo index too large"));
                }
                let top = stack
                    .last()
                    .cloned()
                    .ok_or_else(|| err(path, at, "nothing to memoize"))?;
                if memo.len() <= idx {
                    memo.resize(idx + 1, None);
                }
                memo[idx] = Some(top);
            }
            b'h' | b'j' => {
                let idx = if op == b'h' {
                    take!(1)[0] as usize
                } else {
                    let b = take!(4);
                    u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
                };
                let v = memo
                    .get(idx)
                    .cloned()
                    .flatten()
                    .ok_or_else(|| err(path, at, format!("memo {idx} is empty")))?;
                stack.push(v);
            }
            b'a' => {
                let v = pop(&mut stack, at)?;
                match stack.last_mut() {
                    Some(Val::List(l)) => l.push(v),
                    _ => return Err(err(path, at, "APPEND to a non-list")),
                }
            }
            b'e' => {
                let items = pop_mark(&mut stack, at)?;
                match stack.last_mut() {
                    Some(Val::List(l)) => l.extend(items),
                    _ => return Err(err(path, at, "APPENDS to a non-list")),
                }
            }
            b's' => {
                let v = pop(&mut stack, at)?;
                let k = pop(&mut stack, at)?;
                match stack.last_mut() {
                    Some(Val::Dict(d)) => d.push((k, v)),
                    _ => return Err(err(path, at, "SETITEM on a non-dict")),
                }
            }
            b'u' => {
                let items = pop_mark(&mut stack, at)?;
                let kv = pairs(items, path, at)?;
                match stack.last_mut() {
                    Some(Val::Dict(d)) => d.extend(kv),
                    _ => return Err(err(path, at, "SETITEMS on a non-dict")),
                }
            }
            b'c' => {
                let module = line(bytes, &mut p, path)?;
                let name = line(bytes, &mut p, path)?;
                stack.push(global(&module, &name, path, at)?);
            }
            0x93 => {
                let name = pop(&mut stack, at)?;
                let module = pop(&mut stack, at)?;
                match (module, name) {
                    (Val::Str(m), Val::Str(n)) => stack.push(global(&m, &n, path, at)?),
                    _ => return Err(err(path, at, "STACK_GLOBAL without names")),
                }
            }
            b'Q' => {
                // BINPERSID: torch's storage reference.
                let pid = pop(&mut stack, at)?;
                stack.push(persistent(pid, path, at)?);
            }
            b'R' => {
                let args = pop(&mut stack, at)?;
                let f = pop(&mut stack, at)?;
                stack.push(reduce(f, args, path, at)?);
            }
            0x81 => {
                // NEWOBJ: cls.__new__(cls, *args); only OrderedDict is allowed.
                let args = pop(&mut stack, at)?;
                let cls = pop(&mut stack, at)?;
                stack.push(reduce(cls, args, path, at)?);
            }
            b'b' => {
                // BUILD: object state; a dict's state (OrderedDict's `_metadata`) is dropped.
                let _state = pop(&mut stack, at)?;
                if stack.is_empty() {
                    return Err(err(path, at, "BUILD without an object"));
                }
            }
            b'0' => {
                pop(&mut stack, at)?;
            }
            b'2' => {
                let top = stack
                    .last()
                    .cloned()
                    .ok_or_else(|| err(path, at, "DUP on empty stack"))?;
                stack.push(top);
            }
            other => {
                return Err(err(
                    path,
                    at,
                    format!("pickle opcode 0x{other:02x} is not read in a state dict"),
                ))
            }
        }
    }
}

fn pairs(items: Vec<Val>, path: &Path, at: usize) -> Result<Vec<(Val, Val)>> {
    if !items.len().is_multiple_of(2) {
        return Err(err(path, at, "a dict with an odd number of items"));
    }
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    Ok(out)
}

fn line(bytes: &[u8], p: &mut usize, path: &Path) -> Result<String> {
    let rest = &bytes[*p..];
    let n = rest
        .iter()
        .take(256)
        .position(|&b| b == b'\n')
        .ok_or_else(|| err(path, *p, "a GLOBAL name without a newline"))?;
    let s = String::from_utf8_lossy(&rest[..n]).into_owned();
    *p += n + 1;
    Ok(s)
}

fn global(module: &str, name: &str, path: &Path, at: usize) -> Result<Val> {
    let full = format!("{module}.{name}");
    match ALLOWED.iter().find(|&&a| a == full) {
        Some(a) => Ok(Val::Global(a)),
        None => Err(err(
            path,
            at,
            format!(
                "the pickle asks for the global {full}; a checkpoint is only read when it holds \
                 tensors and plain containers (nothing is executed)"
            ),
        )),
    }
}

fn persistent(pid: Val, path: &Path, at: usize) -> Result<Val> {
    let Val::Tuple(t) = pid else {
        return Err(err(path, at, "a persistent id that is not a tuple"));
    };
    // ('storage', storage_type, key, location, numel[, view_metadata])
    match &t[..] {
        [Val::Str(tag), Val::Global(kind), Val::Str(key), _, Val::Int(numel), ..]
            if tag == "storage" =>
        {
            let numel =
                usize::try_from(*numel).map_err(|_| err(path, at, "negative storage size"))?;
            let kind = kind.rsplit('.').next().unwrap_or_default().to_string();
            Ok(Val::Storage {
                kind,
                key: key.clone(),
                numel,
            })
        }
        _ => Err(err(
            path,
            at,
            format!("a persistent id that is not a storage: {t:?}"),
        )),
    }
}

fn usizes(v: &Val, path: &Path, at: usize) -> Result<Vec<usize>> {
    match v {
        Val::Tuple(t) | Val::List(t) => t
            .iter()
            .map(|x| match x {
                Val::Int(i) => usize::try_from(*i).map_err(|_| err(path, at, "a negative size")),
                _ => Err(err(path, at, "a size that is not an integer")),
            })
            .collect(),
        _ => Err(err(path, at, "a size that is not a tuple")),
    }
}

fn reduce(f: Val, args: Val, path: &Path, at: usize) -> Result<Val> {
    let Val::Global(name) = f else {
        return Err(err(
            path,
            at,
            "REDUCE on something that is not an allowed global",
        ));
    };
    let Val::Tuple(args) = args else {
        return Err(err(path, at, "REDUCE arguments are not a tuple"));
    };
    match name {
        "collections.OrderedDict" => Ok(Val::Dict(Vec::new())),
        "torch._utils._rebuild_tensor_v2" => match &args[..] {
            [storage @ Val::Storage { .. }, Val::Int(offset), size, stride, ..] => {
                Ok(Val::Tensor {
                    storage: Box::new(storage.clone()),
                    offset: usize::try_from(*offset)
                        .map_err(|_| err(path, at, "a negative offset"))?,
                    size: usizes(size, path, at)?,
                    stride: usizes(stride, path, at)?,
                })
            }
            _ => Err(err(
                path,
                at,
                "_rebuild_tensor_v2 with unexpected arguments",
            )),
        },
        "torch._utils._rebuild_parameter" => match args.into_iter().next() {
            Some(t @ Val::Tensor { .. }) => Ok(t),
            _ => Err(err(path, at, "_rebuild_parameter without a tensor")),
        },
        other => Err(err(path, at, format!("{other} cannot be called"))),
    }
}

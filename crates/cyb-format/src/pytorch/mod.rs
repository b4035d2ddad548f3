//! PyTorch checkpoints (`.pth`, `.pt`, `.bin` written by `torch.save`): the zip layout of
//! PyTorch ≥ 1.6 (`<name>/data.pkl` plus one `data/<key>` file per storage) and the legacy
//! layout (magic number, protocol and system pickles, the object pickle, the storage keys,
//! then each storage as an element count and its bytes). The object must be a state dict —
//! names to tensors, possibly under a `state_dict` or `model` key — read by a restricted
//! unpickler ([`pickle`]) that never executes anything; tensors come out as F32 (floating
//! types) or I64 (integer types), copied in row-major order whatever their strides.

mod pickle;
pub mod torchvision;

use crate::mapping::map_file;
use cyb_tensor::{Error, Result, Tensor};
use pickle::Val;
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

/// The legacy format's magic number (`LONG1` bytes, little-endian 0x1950a86a20f9469cfc6c).
const LEGACY_MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
/// The most bytes a zip member may hold (guards against hostile size fields).
const MAX_MEMBER: u64 = 16 << 30;

fn err(path: &Path, reason: impl Into<String>) -> Error {
    Error::Format {
        file: path.to_path_buf(),
        offset: 0,
        reason: reason.into(),
    }
}

/// The state dict of a `torch.save` file, names in file order.
pub fn read_state_dict(path: &Path) -> Result<Vec<(String, Tensor)>> {
    let bytes = map_file(path)?;
    let bytes: &[u8] = (*bytes).as_ref();
    if bytes.starts_with(b"PK\x03\x04") {
        read_zip(bytes, path)
    } else if bytes.first() == Some(&0x80) {
        read_legacy(bytes, path)
    } else {
        Err(err(
            path,
            "not a PyTorch checkpoint (neither a zip nor a pickle)",
        ))
    }
}

fn read_zip(bytes: &[u8], path: &Path) -> Result<Vec<(String, Tensor)>> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| err(path, format!("not a readable zip: {e}")))?;
    let names: Vec<String> = zip.file_names().map(String::from).collect();
    let pkl = names
        .iter()
        .find(|n| n.ends_with("/data.pkl") || *n == "data.pkl")
        .cloned()
        .ok_or_else(|| err(path, "the zip holds no data.pkl (not a torch.save file)"))?;
    let prefix = pkl.trim_end_matches("data.pkl").to_string();
    if let Some(bo) = names.iter().find(|n| **n == format!("{prefix}byteorder")) {
        let order = member(&mut zip, bo, path)?;
        if order != b"little" {
            return Err(err(path, "a big-endian checkpoint is not read"));
        }
    }
    let data = member(&mut zip, &pkl, path)?;
    let (obj, _) = pickle::unpickle(&data, 0, path)?;
    let mut storages: HashMap<String, Vec<u8>> = HashMap::new();
    let mut out = Vec::new();
    for (name, t) in state_entries(obj, path)? {
        let Val::Tensor { storage, .. } = &t else {
            continue;
        };
        let Val::Storage { key, .. } = storage.as_ref() else {
            continue;
        };
        if !storages.contains_key(key) {
            let m = format!("{prefix}data/{key}");
            let b = member(&mut zip, &m, path)?;
            storages.insert(key.clone(), b);
        }
        out.push((
            name.clone(),
            tensor(&name, &t, |k| storages.get(k).map(Vec::as_slice), path)?,
        ));
    }
    Ok(out)
}

fn member(
    zip: &mut zip::ZipArchive<std::io::Cursor<&[u8]>>,
    name: &str,
    path: &Path,
) -> Result<Vec<u8>> {
    let mut f = zip
        .by_name(name)
        .map_err(|e| err(path, format!("zip member {name}: {e}")))?;
    if f.size() > MAX_MEMBER {
        return Err(err(
            path,
            format!("zip member {name} claims {} bytes", f.size()),
        ));
    }
    let mut buf = Vec::with_capacity(f.size() as usize);
    f.read_to_end(&mut buf)
        .map_err(|e| err(path, format!("zip member {name}: {e}")))?;
    Ok(buf)
}

fn read_legacy(bytes: &[u8], path: &Path) -> Result<Vec<(String, Tensor)>> {
    let (magic, p) = pickle::unpickle(bytes, 0, path)?;
    if magic != Val::Bytes(LEGACY_MAGIC.to_vec()) {
        return Err(err(path, "a pickle without torch.save's magic number"));
    }
    let (version, p) = pickle::unpickle(bytes, p, path)?;
    if version != Val::Int(1001) {
        return Err(err(
            path,
            format!("torch.save protocol {version:?} is not read"),
        ));
    }
    let (_sys_info, p) = pickle::unpickle(bytes, p, path)?;
    let (obj, p) = pickle::unpickle(bytes, p, path)?;
    let (keys, mut p) = pickle::unpickle(bytes, p, path)?;
    let Val::List(keys) = keys else {
        return Err(err(path, "the storage key list is missing"));
    };
    // Storage sizes come from the tensors' persistent ids.
    let entries = state_entries(obj, path)?;
    let mut kinds: HashMap<String, (String, usize)> = HashMap::new();
    for (_, t) in &entries {
        if let Val::Tensor { storage, .. } = t {
            if let Val::Storage { kind, key, numel } = storage.as_ref() {
                kinds.insert(key.clone(), (kind.clone(), *numel));
            }
        }
    }
    let mut storages: HashMap<String, &[u8]> = HashMap::new();
    for k in keys {
        let Val::Str(key) = k else {
            return Err(err(path, "a storage key that is not a string"));
        };
        let (kind, _) = kinds
            .get(&key)
            .ok_or_else(|| err(path, format!("storage {key} is used by no tensor")))?;
        let size = element_size(kind)
            .ok_or_else(|| err(path, format!("storage type {kind} is not read")))?;
        let head = bytes
            .get(p..p + 8)
            .ok_or_else(|| err(path, format!("storage {key} is cut off")))?;
        let numel = u64::from_le_bytes(head.try_into().unwrap_or([0; 8]));
        let len = usize::try_from(numel)
            .ok()
            .and_then(|n| n.checked_mul(size))
            .filter(|&l| l <= bytes.len())
            .ok_or_else(|| err(path, format!("storage {key} claims {numel} elements")))?;
        let data = bytes
            .get(p + 8..p + 8 + len)
            .ok_or_else(|| err(path, format!("storage {key} is cut off")))?;
        storages.insert(key, data);
        p += 8 + len;
    }
    entries
        .into_iter()
        .map(|(name, t)| {
            let tensor = tensor(&name, &t, |k| storages.get(k).copied(), path)?;
            Ok((name, tensor))
        })
        .collect()
}

/// The (name, tensor value) pairs of the saved object: a dict of tensors, or one under
/// `state_dict` / `model`.
fn state_entries(obj: Val, path: &Path) -> Result<Vec<(String, Val)>> {
    let Val::Dict(items) = obj else {
        return Err(err(
            path,
            "the checkpoint is not a dict of tensors (a state dict)",
        ));
    };
    let tensors = items
        .iter()
        .filter(|(_, v)| matches!(v, Val::Tensor { .. }))
        .count();
    if tensors == 0 {
        for key in ["state_dict", "model", "model_state_dict"] {
            if let Some((_, inner @ Val::Dict(_))) =
                items.iter().find(|(k, _)| *k == Val::Str(key.into()))
            {
                return state_entries(inner.clone(), path);
            }
        }
        return Err(err(path, "the checkpoint holds no tensors"));
    }
    Ok(items
        .into_iter()
        .filter_map(|(k, v)| match (k, &v) {
            (Val::Str(k), Val::Tensor { .. }) => Some((k, v)),
            _ => None,
        })
        .collect())
}

fn element_size(kind: &str) -> Option<usize> {
    Some(match kind {
        "FloatStorage" | "IntStorage" => 4,
        "DoubleStorage" | "LongStorage" => 8,
        "HalfStorage" | "BFloat16Storage" | "ShortStorage" => 2,
        "CharStorage" | "ByteStorage" | "BoolStorage" => 1,
        _ => return None,
    })
}

/// One tensor, gathered from its storage in row-major order.
fn tensor<'a>(
    name: &str,
    t: &Val,
    storage: impl Fn(&str) -> Option<&'a [u8]>,
    path: &Path,
) -> Result<Tensor> {
    let Val::Tensor {
        storage: s,
        offset,
        size,
        stride,
    } = t
    else {
        return Err(err(path, format!("{name} is not a tensor")));
    };
    let Val::Storage { kind, key, numel } = s.as_ref() else {
        return Err(err(path, format!("{name} has no storage")));
    };
    let es = element_size(kind)
        .ok_or_else(|| err(path, format!("{name}: storage type {kind} is not read")))?;
    let data =
        storage(key).ok_or_else(|| err(path, format!("{name}: storage {key} is missing")))?;
    if data.len() < numel * es {
        return Err(err(
            path,
            format!("{name}: storage {key} is shorter than its {numel} elements"),
        ));
    }
    if size.len() != stride.len() || size.len() > 8 {
        return Err(err(
            path,
            format!("{name}: size {size:?} and stride {stride:?}"),
        ));
    }
    let count: usize = size.iter().product();
    // The furthest element read must lie inside the storage.
    if count > 0 {
        let last = size
            .iter()
            .zip(stride)
            .try_fold(*offset, |acc, (&n, &s)| {
                acc.checked_add((n - 1).checked_mul(s)?)
            })
            .filter(|&l| l < *numel)
            .ok_or_else(|| err(path, format!("{name}: reads past its storage")))?;
        let _ = last;
    }
    let mut idx = vec![0usize; size.len()];
    let mut elems = Vec::with_capacity(count);
    for _ in 0..count {
        let e = offset + idx.iter().zip(stride).map(|(i, s)| i * s).sum::<usize>();
        elems.push(e);
        for d in (0..size.len()).rev() {
            idx[d] += 1;
            if idx[d] < size[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    let at = |e: usize| &data[e * es..(e + 1) * es];
    let dims: Vec<usize> = size.clone();
    let floats = |f: &dyn Fn(&[u8]) -> f32| -> Result<Tensor> {
        let v: Vec<f32> = elems.iter().map(|&e| f(at(e))).collect();
        Tensor::from_f32(&dims, &v)
    };
    let ints = |f: &dyn Fn(&[u8]) -> i64| -> Result<Tensor> {
        let v: Vec<i64> = elems.iter().map(|&e| f(at(e))).collect();
        Tensor::from_i64(&dims, &v)
    };
    fn le<const N: usize>(b: &[u8]) -> [u8; N] {
        b.try_into().unwrap_or([0; N])
    }
    match kind.as_str() {
        "FloatStorage" => floats(&|b| f32::from_le_bytes(le(b))),
        "DoubleStorage" => floats(&|b| f64::from_le_bytes(le(b)) as f32),
        "HalfStorage" => floats(&|b| half::f16::from_le_bytes(le(b)).to_f32()),
        "BFloat16Storage" => floats(&|b| half::bf16::from_le_bytes(le(b)).to_f32()),
        "LongStorage" => ints(&|b| i64::from_le_bytes(le(b))),
        "IntStorage" => ints(&|b| i64::from(i32::from_le_bytes(le(b)))),
        other => Err(err(path, format!("{name}: {other} tensors are not read"))),
    }
}

//! Fixture access for the integration tests: tests/fixtures/audio at the repository root,
//! made by tools/fixtures/make_audio_fixtures.py (whose json manifests record the library
//! versions that produced them).

#![allow(dead_code)]

use std::path::PathBuf;

use serde_json::Value;

pub fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/audio")
}

pub fn fixture(name: &str) -> PathBuf {
    fixture_dir().join(name)
}

pub fn manifest(name: &str) -> Value {
    let path = fixture(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn blob(name: &str) -> Vec<u8> {
    let path = fixture(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The bytes an array entry `{dtype, shape, offset, bytes}` points at, checked against its
/// dtype and shape.
fn entry_bytes<'a>(blob: &'a [u8], entry: &Value, dtype: &str, size: usize) -> &'a [u8] {
    assert_eq!(entry["dtype"], dtype, "{entry}");
    let offset = entry["offset"].as_u64().unwrap() as usize;
    let len = entry["bytes"].as_u64().unwrap() as usize;
    assert_eq!(
        len,
        shape(entry).iter().product::<usize>() * size,
        "{entry}"
    );
    &blob[offset..offset + len]
}

pub fn shape(entry: &Value) -> Vec<usize> {
    entry["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect()
}

pub fn i16s(blob: &[u8], entry: &Value) -> Vec<i16> {
    entry_bytes(blob, entry, "i16", 2)
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect()
}

pub fn f32s(blob: &[u8], entry: &Value) -> Vec<f32> {
    entry_bytes(blob, entry, "f32", 4)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// A little WAV header (16-byte fmt chunk) followed by `data`; `data_len` is what the header
/// claims, which hostile-input tests set to anything.
pub fn wav_bytes(
    tag: u16,
    channels: u16,
    rate: u32,
    bits: u16,
    data_len: u32,
    data: &[u8],
) -> Vec<u8> {
    let block = channels.wrapping_mul(bits / 8);
    let mut h = Vec::new();
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&36u32.wrapping_add(data_len).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&tag.to_le_bytes());
    h.extend_from_slice(&channels.to_le_bytes());
    h.extend_from_slice(&rate.to_le_bytes());
    h.extend_from_slice(&rate.wrapping_mul(u32::from(block)).to_le_bytes());
    h.extend_from_slice(&block.to_le_bytes());
    h.extend_from_slice(&bits.to_le_bytes());
    h.extend_from_slice(b"data");
    h.extend_from_slice(&data_len.to_le_bytes());
    h.extend_from_slice(data);
    h
}

/// 16-bit little-endian bytes of `samples` in [-1, 1].
pub fn s16le(samples: &[f32]) -> Vec<u8> {
    samples
        .iter()
        .flat_map(|&s| ((s * 32767.0).round() as i16).to_le_bytes())
        .collect()
}

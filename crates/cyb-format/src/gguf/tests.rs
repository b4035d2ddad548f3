//! GGUF parser tests over files made by a small writer below (the gguf-py–made fixture is
//! checked in `tests/format_fixtures.rs`).

use super::*;
use std::sync::Arc;

/// Builds GGUF bytes; fields are public so tests can corrupt any of them.
struct Writer {
    version: u32,
    alignment: Option<u64>,
    kv: Vec<u8>,
    n_kv: u64,
    tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

impl Writer {
    fn new() -> Writer {
        Writer {
            version: 3,
            alignment: None,
            kv: Vec::new(),
            n_kv: 0,
            tensors: Vec::new(),
        }
    }

    /// Appends a raw key, type id and value bytes.
    fn kv_raw(&mut self, key: &[u8], ty: u32, value: &[u8]) -> &mut Writer {
        put_str(&mut self.kv, key);
        self.kv.extend_from_slice(&ty.to_le_bytes());
        self.kv.extend_from_slice(value);
        self.n_kv += 1;
        self
    }

    fn kv_u32(&mut self, key: &str, v: u32) -> &mut Writer {
        self.kv_raw(key.as_bytes(), 4, &v.to_le_bytes())
    }

    fn kv_str(&mut self, key: &str, v: &str) -> &mut Writer {
        let mut b = Vec::new();
        put_str(&mut b, v.as_bytes());
        self.kv_raw(key.as_bytes(), 8, &b)
    }

    fn tensor_f32(&mut self, name: &str, ne: &[u64], values: &[f32]) -> &mut Writer {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensors.push((name.into(), ne.to_vec(), 0, data));
        self
    }

    /// The header up to the end of tensor infos, with each tensor's data offset given.
    fn header(&self, offsets: &[u64]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        let extra = u64::from(self.alignment.is_some());
        out.extend_from_slice(&(self.n_kv + extra).to_le_bytes());
        out.extend_from_slice(&self.kv);
        if let Some(a) = self.alignment {
            put_str(&mut out, b"general.alignment");
            out.extend_from_slice(&4u32.to_le_bytes());
            out.extend_from_slice(&(a as u32).to_le_bytes());
        }
        for ((name, ne, ty, _), off) in self.tensors.iter().zip(offsets) {
            put_str(&mut out, name.as_bytes());
            out.extend_from_slice(&(ne.len() as u32).to_le_bytes());
            for d in ne {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&off.to_le_bytes());
        }
        out
    }

    fn build(&self) -> Vec<u8> {
        let align = match self.alignment {
            Some(a) if a.is_power_of_two() => a as usize,
            _ => DEFAULT_ALIGNMENT as usize,
        };
        let mut offsets = Vec::new();
        let mut data = Vec::new();
        for (_, _, _, d) in &self.tensors {
            data.resize(data.len().div_ceil(align) * align, 0);
            offsets.push(data.len() as u64);
            data.extend_from_slice(d);
        }
        let mut out = self.header(&offsets);
        out.resize(out.len().div_ceil(align) * align, 0);
        out.extend_from_slice(&data);
        out
    }
}

fn parse_bytes(b: Vec<u8>) -> Result<GgufFile> {
    GgufFile::from_bytes(Arc::new(b), "test.gguf")
}

fn reason(r: Result<GgufFile>) -> String {
    match r {
        Err(Error::Format { reason, file, .. }) => {
            assert_eq!(file, Path::new("test.gguf"));
            reason
        }
        Err(e) => panic!("expected a format error, got {e}"),
        Ok(_) => panic!("expected a format error, parse succeeded"),
    }
}

fn sample() -> Writer {
    let mut w = Writer::new();
    w.kv_str("general.architecture", "llama")
        .kv_u32("llama.block_count", 2)
        .tensor_f32("a", &[3, 2], &[1., 2., 3., 4., 5., 6.])
        .tensor_f32("b", &[2], &[7., 8.]);
    w
}

#[test]
fn valid_file_reads_metadata_and_tensors() {
    let f = parse_bytes(sample().build()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(
        f.get("general.architecture").and_then(|v| v.as_str()),
        Some("llama")
    );
    assert_eq!(f.get("llama.block_count"), Some(&MetaValue::U32(2)));
    let a = f.tensor("a").unwrap();
    // ne = [3, 2]: rows of 3, two rows.
    assert_eq!(a.dims(), &[2, 3]);
    assert_eq!(a.to_f32_vec().unwrap(), vec![1., 2., 3., 4., 5., 6.]);
    assert_eq!(a.storage().location(), "mmap");
    assert_eq!(f.tensor("b").unwrap().to_f32_vec().unwrap(), vec![7., 8.]);
    assert_eq!(f.tensor_infos()[1].data_offset, 32);
    assert!(matches!(f.tensor("c"), Err(Error::MissingTensor { .. })));
}

#[test]
fn every_metadata_type_round_trips() {
    let mut w = Writer::new();
    w.kv_raw(b"u8", 0, &[200])
        .kv_raw(b"i8", 1, &[0xfe])
        .kv_raw(b"u16", 2, &500u16.to_le_bytes())
        .kv_raw(b"i16", 3, &(-500i16).to_le_bytes())
        .kv_raw(b"i32", 5, &(-7i32).to_le_bytes())
        .kv_raw(b"f32", 6, &1.5f32.to_le_bytes())
        .kv_raw(b"bool", 7, &[1])
        .kv_raw(b"u64", 10, &u64::MAX.to_le_bytes())
        .kv_raw(b"i64", 11, &i64::MIN.to_le_bytes())
        .kv_raw(b"f64", 12, &0.25f64.to_le_bytes());
    let mut nested = Vec::new();
    nested.extend_from_slice(&9u32.to_le_bytes()); // array of arrays
    nested.extend_from_slice(&2u64.to_le_bytes());
    for n in [1u64, 2] {
        nested.extend_from_slice(&0u32.to_le_bytes());
        nested.extend_from_slice(&n.to_le_bytes());
        nested.extend(std::iter::repeat_n(9u8, n as usize));
    }
    w.kv_raw(b"nested", 9, &nested);
    let f = parse_bytes(w.build()).unwrap();
    use MetaValue::*;
    let want = [
        U8(200),
        I8(-2),
        U16(500),
        I16(-500),
        I32(-7),
        F32(1.5),
        Bool(true),
        U64(u64::MAX),
        I64(i64::MIN),
        F64(0.25),
        Array(crate::MetaArray::Array(vec![
            crate::MetaArray::U8(vec![9]),
            crate::MetaArray::U8(vec![9, 9]),
        ])),
    ];
    let got: Vec<MetaValue> = f.metadata().iter().map(|(_, v)| v.clone()).collect();
    assert_eq!(got, want);
}

#[test]
fn truncation_at_every_cut_is_an_error() {
    let full = sample().build();
    for cut in 0..full.len() {
        let r = parse_bytes(full[..cut].to_vec());
        assert!(r.is_err(), "cut at {cut} of {} parsed", full.len());
    }
}

#[test]
fn wrong_magic_version_and_endianness() {
    let mut b = sample().build();
    b[0] = b'X';
    assert!(reason(parse_bytes(b)).contains("not a GGUF file"));
    let mut w = sample();
    w.version = 1;
    assert!(reason(parse_bytes(w.build())).contains("v1"));
    w.version = 4;
    assert!(reason(parse_bytes(w.build())).contains("version 4"));
    w.version = 3u32.swap_bytes();
    assert!(reason(parse_bytes(w.build())).contains("big-endian"));
}

#[test]
fn hostile_tensor_infos() {
    let mut w = sample();
    w.tensors[0].1 = vec![1, 1, 1, 1, 1];
    assert!(reason(parse_bytes(w.build())).contains("5 dims"));

    let mut w = sample();
    w.tensors[0].1 = vec![1 << 32, 1 << 32, 1 << 32];
    assert!(reason(parse_bytes(w.build())).contains("overflows"));

    let mut w = sample();
    w.tensors[0].1 = vec![3, 0];
    assert!(reason(parse_bytes(w.build())).contains("out of range"));

    for (id, want) in [(99, "unknown ggml type id 99"), (32, "removed from ggml")] {
        let mut w = sample();
        w.tensors[0].2 = id;
        let r = reason(parse_bytes(w.build()));
        assert!(r.contains("\"a\"") && r.contains(want), "{r}");
    }

    let mut w = sample();
    w.tensors[1].0 = "a".into();
    assert!(reason(parse_bytes(w.build())).contains("duplicate tensor"));
}

#[test]
fn hostile_offsets() {
    let w = sample();
    let mut b = w.header(&[0, 1 << 40]);
    b.resize(b.len().div_ceil(32) * 32 + 64, 0);
    assert!(reason(parse_bytes(b)).contains("past the end"));

    let mut b = w.header(&[0, 8]);
    b.resize(b.len().div_ceil(32) * 32 + 64, 0);
    assert!(reason(parse_bytes(b)).contains("not a multiple of the alignment"));

    let mut b = w.header(&[0, 0]);
    b.resize(b.len().div_ceil(32) * 32 + 64, 0);
    assert!(reason(parse_bytes(b)).contains("overlap"));

    let mut b = w.header(&[0, u64::MAX - 31]);
    b.resize(b.len().div_ceil(32) * 32 + 64, 0);
    assert!(reason(parse_bytes(b)).contains("past the end"));
}

#[test]
fn hostile_metadata() {
    let mut w = sample();
    w.kv_raw(&[0xff, 0xfe], 4, &1u32.to_le_bytes());
    assert!(reason(parse_bytes(w.build())).contains("UTF-8"));

    let mut w = sample();
    let mut arr = 0u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&(u64::MAX / 2).to_le_bytes());
    w.kv_raw(b"big", 9, &arr);
    assert!(reason(parse_bytes(w.build())).contains("bytes are left"));

    let mut w = sample();
    w.kv_raw(b"s", 8, &(1u64 << 50).to_le_bytes());
    assert!(reason(parse_bytes(w.build())).contains("bytes are left"));

    let mut w = sample();
    w.kv_raw(b"t", 13, &[0; 8]);
    assert!(reason(parse_bytes(w.build())).contains("unknown value type"));

    let mut w = sample();
    w.kv_raw(b"b", 7, &[2]);
    assert!(reason(parse_bytes(w.build())).contains("bool"));

    let mut w = sample();
    w.kv_u32("llama.block_count", 3);
    assert!(reason(parse_bytes(w.build())).contains("duplicate metadata"));

    let mut deep = Vec::new();
    for _ in 0..20 {
        deep.extend_from_slice(&9u32.to_le_bytes());
        deep.extend_from_slice(&1u64.to_le_bytes());
    }
    deep.extend_from_slice(&[0; 12]);
    let mut w = sample();
    w.kv_raw(b"deep", 9, &deep);
    assert!(reason(parse_bytes(w.build())).contains("nests deeper"));

    let mut b = sample().build();
    b[16..24].copy_from_slice(&u64::MAX.to_le_bytes()); // kv count
    assert!(reason(parse_bytes(b)).contains("metadata count"));
    let mut b = sample().build();
    b[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes()); // tensor count
    assert!(reason(parse_bytes(b)).contains("tensor count"));
}

#[test]
fn alignment_values() {
    for bad in [0u64, 3, 48] {
        let mut w = sample();
        w.alignment = Some(bad);
        assert!(
            reason(parse_bytes(w.build())).contains("general.alignment"),
            "{bad}"
        );
    }
    let mut w = sample();
    w.alignment = Some(64);
    let f = parse_bytes(w.build()).unwrap();
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_start() % 64, 0);
    assert_eq!(f.tensor_infos()[1].data_offset, 64);
    assert_eq!(f.tensor("b").unwrap().to_f32_vec().unwrap(), vec![7., 8.]);
}

/// `sample()` plus IQ4_XS (ggml type 23, 256 values in 136 bytes), which has no `DType`.
fn with_iq4_xs(ne: &[u64], data_len: usize) -> Writer {
    let mut w = sample();
    w.tensors
        .push(("iq".into(), ne.to_vec(), 23, vec![7; data_len]));
    w
}

#[test]
fn types_without_a_dtype_are_listed_but_not_read() {
    let f = parse_bytes(with_iq4_xs(&[256, 2], 272).build()).unwrap();
    let info = f.tensor_info("iq").unwrap();
    assert_eq!((info.ggml_type.name, info.dtype), ("IQ4_XS", None));
    assert_eq!(
        (info.shape.dims(), info.byte_len),
        (&[2usize, 256][..], 272)
    );
    assert_eq!(info.data_offset, 64);
    match f.tensor("iq") {
        Err(Error::UnsupportedTensorType { name, type_name }) => {
            assert_eq!((name.as_str(), type_name.as_str()), ("iq", "IQ4_XS"))
        }
        other => panic!("expected UnsupportedTensorType, got {other:?}"),
    }
    assert_eq!(f.tensor("a").unwrap().dims(), &[2, 3]);
}

#[test]
fn types_without_a_dtype_get_every_hostile_input_check() {
    let r = reason(parse_bytes(with_iq4_xs(&[255, 2], 272).build()));
    assert!(
        r.contains("not a multiple of the IQ4_XS block size 256"),
        "{r}"
    );

    let r = reason(parse_bytes(with_iq4_xs(&[1 << 40, 1 << 30], 272).build()));
    assert!(r.contains("element count"), "{r}");

    // F64 (ggml type 28, no DType either): 2^62 values fit in usize, their bytes do not.
    let mut w = sample();
    w.tensors
        .push(("f64".into(), vec![1 << 62], 28, vec![0; 8]));
    let r = reason(parse_bytes(w.build()));
    assert!(r.contains("byte size of F64"), "{r}");

    // One byte short of the two blocks the infos promise.
    let r = reason(parse_bytes(with_iq4_xs(&[256, 2], 271).build()));
    assert!(r.contains("past the end"), "{r}");

    let truncated = with_iq4_xs(&[256, 2], 272).build();
    for cut in [truncated.len() - 1, truncated.len() - 136] {
        assert!(parse_bytes(truncated[..cut].to_vec()).is_err(), "cut {cut}");
    }

    let w = with_iq4_xs(&[256, 2], 272);
    for (offsets, want) in [
        ([0, 32, 16], "not a multiple of the alignment"),
        ([0, 32, 0], "overlap"),
        ([0, 32, 1 << 40], "past the end"),
    ] {
        let mut b = w.header(&offsets);
        b.resize(b.len().div_ceil(32) * 32 + 64 + 272, 0);
        let r = reason(parse_bytes(b));
        assert!(r.contains(want), "{offsets:?}: {r}");
    }
}

//! `model.bin` parser and Whisper mapping tests over files made by a small writer below (the
//! files CTranslate2's own converter made are checked in `tests/ctranslate2.rs`).

use super::*;
use crate::hf::HfModel;
use cyb_tensor::Error;
use std::sync::Arc;

/// One variable as written: name bytes, dims, dtype id (or item size before version 4), data.
struct Var {
    name: Vec<u8>,
    dims: Vec<u32>,
    dtype: u8,
    data: Vec<u8>,
}

/// Builds `model.bin` bytes; fields are public so tests can change any of them.
struct Writer {
    version: u32,
    spec: Vec<u8>,
    revision: u32,
    vars: Vec<Var>,
    aliases: Vec<(Vec<u8>, Vec<u8>)>,
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u16 + 1).to_le_bytes());
    out.extend_from_slice(s);
    out.push(0);
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl Writer {
    fn new() -> Writer {
        Writer {
            version: 6,
            spec: b"WhisperSpec".to_vec(),
            revision: 3,
            vars: Vec::new(),
            aliases: Vec::new(),
        }
    }

    fn var(&mut self, name: &str, dims: &[u32], dtype: u8, data: Vec<u8>) -> &mut Writer {
        self.vars.push(Var {
            name: name.as_bytes().to_vec(),
            dims: dims.to_vec(),
            dtype,
            data,
        });
        self
    }

    fn f32(&mut self, name: &str, dims: &[u32], values: &[f32]) -> &mut Writer {
        self.var(name, dims, 0, f32_bytes(values))
    }

    fn alias(&mut self, alias: &str, target: &str) -> &mut Writer {
        self.aliases
            .push((alias.as_bytes().to_vec(), target.as_bytes().to_vec()));
        self
    }

    fn remove(&mut self, name: &str) -> &mut Writer {
        self.vars.retain(|v| v.name != name.as_bytes());
        self
    }

    fn data_mut(&mut self, name: &str) -> &mut Vec<u8> {
        let v = self.vars.iter_mut().find(|v| v.name == name.as_bytes());
        &mut v.expect("variable in the test model").data
    }

    fn bytes(&self) -> Vec<u8> {
        self.layout().0
    }

    /// The bytes, and where each variable's and alias's record starts.
    fn layout(&self) -> (Vec<u8>, Vec<usize>, Vec<usize>) {
        let (mut vars, mut aliases) = (Vec::new(), Vec::new());
        let mut out = self.version.to_le_bytes().to_vec();
        put_str(&mut out, &self.spec);
        out.extend_from_slice(&self.revision.to_le_bytes());
        out.extend_from_slice(&(self.vars.len() as u32).to_le_bytes());
        for v in &self.vars {
            vars.push(out.len());
            put_str(&mut out, &v.name);
            out.push(v.dims.len() as u8);
            for d in &v.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.push(v.dtype);
            let n = if self.version >= 4 {
                v.data.len()
            } else {
                v.data.len() / usize::from(v.dtype.max(1))
            };
            out.extend_from_slice(&(n as u32).to_le_bytes());
            out.extend_from_slice(&v.data);
        }
        if self.version >= 3 {
            out.extend_from_slice(&(self.aliases.len() as u32).to_le_bytes());
            for (a, t) in &self.aliases {
                aliases.push(out.len());
                put_str(&mut out, a);
                put_str(&mut out, t);
            }
        }
        (out, vars, aliases)
    }
}

const D: u32 = 4;
const MELS: u32 = 3;
const FFN: u32 = 6;
const VOCAB: u32 = 5;

/// Distinct values, so a wrong row or offset shows.
fn values(seed: usize, n: usize) -> Vec<f32> {
    (0..n).map(|i| (seed * 1000 + i) as f32 * 0.25).collect()
}

/// A whole Whisper model: d_model 4, 1 encoder and 1 decoder layer, 2 heads.
fn whisper() -> Writer {
    let mut w = Writer::new();
    let mut seed = 0;
    let mut f = |w: &mut Writer, name: &str, dims: &[u32]| {
        seed += 1;
        let n = dims.iter().product::<u32>() as usize;
        w.f32(name, dims, &values(seed, n));
    };
    let (d, d2, d3) = (D, 2 * D, 3 * D);
    f(&mut w, "encoder/conv1/weight", &[d, MELS, 3]);
    f(&mut w, "encoder/conv1/bias", &[d]);
    f(&mut w, "encoder/conv2/weight", &[d, d, 3]);
    f(&mut w, "encoder/conv2/bias", &[d]);
    f(&mut w, "encoder/position_encodings/encodings", &[7, d]);
    w.var("encoder/num_heads", &[], 2, 2i16.to_le_bytes().to_vec());
    w.var("decoder/num_heads", &[], 2, 2i16.to_le_bytes().to_vec());
    w.var("decoder/activation", &[], 1, vec![3]);
    w.var("decoder/scale_embeddings", &[], 1, vec![0]);
    for side in ["encoder", "decoder"] {
        let l = format!("{side}/layer_0");
        f(
            &mut w,
            &format!("{l}/self_attention/layer_norm/gamma"),
            &[d],
        );
        f(&mut w, &format!("{l}/self_attention/layer_norm/beta"), &[d]);
        f(
            &mut w,
            &format!("{l}/self_attention/linear_0/weight"),
            &[d3, d],
        );
        let mut qkv_bias = values(50, 3 * D as usize);
        qkv_bias[D as usize..2 * D as usize].fill(0.0);
        w.f32(
            &format!("{l}/self_attention/linear_0/bias"),
            &[d3],
            &qkv_bias,
        );
        f(
            &mut w,
            &format!("{l}/self_attention/linear_1/weight"),
            &[d, d],
        );
        f(&mut w, &format!("{l}/self_attention/linear_1/bias"), &[d]);
        if side == "decoder" {
            f(&mut w, &format!("{l}/attention/layer_norm/gamma"), &[d]);
            f(&mut w, &format!("{l}/attention/layer_norm/beta"), &[d]);
            f(&mut w, &format!("{l}/attention/linear_0/weight"), &[d, d]);
            f(&mut w, &format!("{l}/attention/linear_0/bias"), &[d]);
            f(&mut w, &format!("{l}/attention/linear_1/weight"), &[d2, d]);
            let mut kv_bias = values(60, 2 * D as usize);
            kv_bias[..D as usize].fill(0.0);
            w.f32(&format!("{l}/attention/linear_1/bias"), &[d2], &kv_bias);
            f(&mut w, &format!("{l}/attention/linear_2/weight"), &[d, d]);
            f(&mut w, &format!("{l}/attention/linear_2/bias"), &[d]);
        }
        f(&mut w, &format!("{l}/ffn/layer_norm/gamma"), &[d]);
        f(&mut w, &format!("{l}/ffn/layer_norm/beta"), &[d]);
        f(&mut w, &format!("{l}/ffn/linear_0/weight"), &[FFN, d]);
        f(&mut w, &format!("{l}/ffn/linear_0/bias"), &[FFN]);
        f(&mut w, &format!("{l}/ffn/linear_1/weight"), &[d, FFN]);
        f(&mut w, &format!("{l}/ffn/linear_1/bias"), &[d]);
    }
    f(&mut w, "encoder/layer_norm/gamma", &[d]);
    f(&mut w, "encoder/layer_norm/beta", &[d]);
    f(&mut w, "decoder/embeddings/weight", &[VOCAB, d]);
    f(&mut w, "decoder/position_encodings/encodings", &[6, d]);
    f(&mut w, "decoder/layer_norm/gamma", &[d]);
    f(&mut w, "decoder/layer_norm/beta", &[d]);
    w.alias("decoder/projection/weight", "decoder/embeddings/weight");
    w
}

fn parse(b: Vec<u8>) -> Result<Ct2File> {
    Ct2File::from_bytes(Arc::new(b), "model.bin")
}

/// As a Hugging Face model, with no other files beside it.
fn hf(b: Vec<u8>) -> Result<HfModel> {
    from_file(parse(b)?, Path::new("/nonexistent-ct2-test-dir"))
}

fn values_of(h: &HfModel, name: &str) -> Vec<f32> {
    h.tensor(name).unwrap().to_f32_vec().unwrap()
}

fn expect_format(r: Result<impl std::fmt::Debug>, offset: usize, words: &str) {
    match r {
        Err(Error::Format {
            file,
            offset: at,
            reason,
        }) => {
            assert_eq!(file, PathBuf::from("model.bin"));
            assert_eq!(at, offset as u64, "{reason}");
            assert!(reason.contains(words), "{reason:?} lacks {words:?}");
        }
        other => panic!("expected a format error about {words:?}, got {other:?}"),
    }
}

#[test]
fn reads_the_table() {
    let f = parse(whisper().bytes()).unwrap();
    assert_eq!(f.binary_version(), 6);
    assert_eq!(f.spec(), "WhisperSpec");
    assert_eq!(f.spec_revision(), 3);
    let v = f.variable("encoder/conv1/weight").unwrap();
    assert_eq!(v.dtype, DType::F32);
    assert_eq!(v.shape.dims(), [4, 3, 3]);
    assert_eq!(v.byte_len, 36 * 4);
    assert_eq!(
        f.variable("decoder/projection/weight"),
        f.variable("decoder/embeddings/weight")
    );
    assert_eq!(f.scalar("encoder/num_heads"), Some(Value::from(2)));
    assert_eq!(f.scalar("decoder/activation"), Some(Value::from(3)));
    assert_eq!(f.scalar("encoder/conv1/bias"), None);
    assert_eq!(f.aliases().len(), 1);
}

#[test]
fn presents_transformers_names() {
    let h = hf(whisper().bytes()).unwrap();
    let d = D as usize;
    let qkv = values(8, 3 * d * d); // encoder/layer_0/self_attention/linear_0/weight
    let e = "model.encoder.layers.0.self_attn";
    assert_eq!(values_of(&h, &format!("{e}.q_proj.weight")), qkv[..d * d]);
    assert_eq!(
        values_of(&h, &format!("{e}.k_proj.weight")),
        qkv[d * d..2 * d * d]
    );
    assert_eq!(
        values_of(&h, &format!("{e}.v_proj.weight")),
        qkv[2 * d * d..]
    );
    let bias = values(50, 3 * d);
    assert_eq!(values_of(&h, &format!("{e}.q_proj.bias")), bias[..d]);
    assert_eq!(values_of(&h, &format!("{e}.v_proj.bias")), bias[2 * d..]);
    assert!(!h.has_tensor(&format!("{e}.k_proj.bias")));
    let x = "model.decoder.layers.0.encoder_attn";
    assert_eq!(
        h.tensor(&format!("{x}.k_proj.weight")).unwrap().dims(),
        [d, d]
    );
    assert_eq!(
        values_of(&h, &format!("{x}.v_proj.bias")),
        values(60, 2 * d)[d..]
    );
    assert!(!h.has_tensor(&format!("{x}.k_proj.bias")));
    // Tied: no proj_out.weight.
    assert!(!h.has_tensor("proj_out.weight"));
    assert!(h.has_tensor("model.decoder.embed_tokens.weight"));
    // conv + positions, encoder layer, norm; embeddings + positions, decoder layer, norm.
    assert_eq!(h.tensor_infos().count(), 5 + 15 + 2 + 2 + 24 + 2);

    let c = h.config_json();
    assert_eq!(c["model_type"], "whisper");
    assert_eq!(c["d_model"], 4);
    assert_eq!(c["num_mel_bins"], 3);
    assert_eq!(c["encoder_layers"], 1);
    assert_eq!(c["decoder_attention_heads"], 2);
    assert_eq!(c["encoder_ffn_dim"], 6);
    assert_eq!(c["vocab_size"], 5);
    assert_eq!(c["max_source_positions"], 7);
    assert_eq!(c["max_target_positions"], 6);
    assert_eq!(c["tie_word_embeddings"], true);
    assert!(h.tokenizer_json.is_none());
}

#[test]
fn untied_projection_is_proj_out() {
    let mut w = whisper();
    w.aliases.clear();
    w.f32("decoder/projection/weight", &[VOCAB, D], &values(99, 20));
    let h = hf(w.bytes()).unwrap();
    assert_eq!(values_of(&h, "proj_out.weight"), values(99, 20));
    assert_eq!(h.config_json()["tie_word_embeddings"], false);
    w.f32("decoder/projection/bias", &[VOCAB], &values(98, 5));
    assert!(hf(w.bytes()).is_err());
}

#[test]
fn unaligned_floats_are_copied_into_aligned_memory() {
    // Names of every length move the data off 4-byte alignment; the values must not change.
    for extra in 0..4 {
        let mut w = whisper();
        w.var(&format!("x{}", "y".repeat(extra)), &[], 1, vec![0]);
        w.vars.rotate_right(1);
        let h = hf(w.bytes()).unwrap();
        let t = h.tensor("model.encoder.conv1.bias").unwrap();
        let b = t.host_bytes().unwrap();
        assert_eq!(b.as_ptr().align_offset(4), 0);
        assert_eq!(t.to_f32_vec().unwrap(), values(2, 4));
    }
}

#[test]
fn int8_and_int16_weights_are_dequantized() {
    let mut w = whisper();
    let name = "encoder/layer_0/self_attention/linear_0/weight";
    let q: Vec<i8> = (0..48).map(|i| (i as i8) - 20).collect();
    *w.data_mut(name) = q.iter().map(|&x| x as u8).collect();
    w.vars
        .iter_mut()
        .find(|v| v.name == name.as_bytes())
        .unwrap()
        .dtype = 1;
    let scales: Vec<f32> = (0..12).map(|r| 1.0 + r as f32).collect();
    w.f32(&format!("{name}_scale"), &[12], &scales);
    let h = hf(w.bytes()).unwrap();
    let k = h
        .tensor("model.encoder.layers.0.self_attn.k_proj.weight")
        .unwrap();
    assert_eq!(k.dtype(), DType::F32);
    let want: Vec<f32> = (16..32).map(|i| f32::from(q[i]) / scales[i / 4]).collect();
    assert_eq!(k.to_f32_vec().unwrap(), want);
    assert!(!h.tensor_in_place("model.encoder.layers.0.self_attn.k_proj.weight"));
    assert!(h.tensor_in_place("model.encoder.conv1.weight"));

    // Without its scale the weight cannot be read.
    w.remove(&format!("{name}_scale"));
    expect_format(hf(w.bytes()), record_of(&w, name), "without");

    // int16: one scale for the matrix.
    let mut w = whisper();
    let name = "encoder/layer_0/ffn/linear_0/weight";
    let q: Vec<i16> = (0..24).map(|i| i * 100 - 900).collect();
    *w.data_mut(name) = q.iter().flat_map(|x| x.to_le_bytes()).collect();
    w.vars
        .iter_mut()
        .find(|v| v.name == name.as_bytes())
        .unwrap()
        .dtype = 2;
    w.f32(&format!("{name}_scale"), &[], &[8.0]);
    let h = hf(w.bytes()).unwrap();
    let want: Vec<f32> = q.iter().map(|&x| f32::from(x) / 8.0).collect();
    assert_eq!(values_of(&h, "model.encoder.layers.0.fc1.weight"), want);
}

/// Where the record of `name` starts in `w.bytes()`.
fn record_of(w: &Writer, name: &str) -> usize {
    parse(w.bytes())
        .unwrap()
        .variable(name)
        .unwrap()
        .record_offset
}

#[test]
fn older_versions_read_the_same() {
    let want = hf(whisper().bytes()).unwrap();
    for version in [2, 3] {
        let mut w = whisper();
        w.version = version;
        for v in &mut w.vars {
            // Item sizes: float32 4, int16 2, int8 1.
            v.dtype = match v.dtype {
                0 => 4,
                1 => 1,
                2 => 2,
                x => x,
            };
        }
        if version == 2 {
            // No aliases before version 3: the projection is its own variable.
            w.aliases.clear();
            let emb = w.data_mut("decoder/embeddings/weight").clone();
            w.var("decoder/projection/weight", &[VOCAB, D], 4, emb);
        }
        let h = hf(w.bytes()).unwrap();
        assert_eq!(h.ctranslate2().unwrap().binary_version(), version);
        for (t, _) in want.tensor_infos() {
            assert_eq!(
                values_of(&h, &t.name),
                values_of(&want, &t.name),
                "{}",
                t.name
            );
        }
    }
    let mut w = whisper();
    w.version = 1;
    expect_format(parse(w.bytes()), 0, "version 1 is not supported");
    w.version = 7;
    expect_format(parse(w.bytes()), 0, "version 7 is not supported");
}

#[test]
fn layouts_that_are_not_whisper_are_refused() {
    let mut w = whisper();
    w.spec = b"TransformerSpec".to_vec();
    expect_format(hf(w.bytes()), 4, "only Whisper");
    let mut w = whisper();
    w.revision = 4;
    expect_format(hf(w.bytes()), 4, "revision 4");
    // A non-zero key bias cannot be dropped.
    let mut w = whisper();
    let b = "decoder/layer_0/attention/linear_1/bias";
    w.data_mut(b)[0..4].copy_from_slice(&1.0f32.to_le_bytes());
    expect_format(hf(w.bytes()), record_of(&w, b), "are not zero");
    // A weight with no place in transformers' Whisper.
    let mut w = whisper();
    w.f32("decoder/layernorm_embedding/gamma", &[D], &values(1, 4));
    let at = record_of(&w, "decoder/layernorm_embedding/gamma");
    expect_format(hf(w.bytes()), at, "no counterpart");
    // A shape that does not fit the others.
    let mut w = whisper();
    let n = "encoder/layer_0/ffn/linear_1/weight";
    w.vars
        .iter_mut()
        .find(|v| v.name == n.as_bytes())
        .unwrap()
        .dims = vec![FFN, D];
    expect_format(hf(w.bytes()), record_of(&w, n), "expected [4, 6]");
    // Another activation.
    let mut w = whisper();
    *w.data_mut("decoder/activation") = vec![0];
    expect_format(hf(w.bytes()), record_of(&w, "decoder/activation"), "GELU");
    // Heads that do not divide d_model.
    let mut w = whisper();
    *w.data_mut("encoder/num_heads") = 3i16.to_le_bytes().to_vec();
    expect_format(
        hf(w.bytes()),
        record_of(&w, "encoder/num_heads"),
        "do not divide",
    );
    // A missing weight.
    let mut w = whisper();
    w.remove("encoder/conv2/bias");
    assert!(
        matches!(hf(w.bytes()), Err(Error::MissingTensor { name, .. }) if name == "encoder/conv2/bias")
    );
}

#[test]
fn every_truncation_is_a_format_error() {
    let good = whisper().bytes();
    for cut in 0..good.len() {
        match parse(good[..cut].to_vec()) {
            Err(Error::Format { file, offset, .. }) => {
                assert_eq!(file, PathBuf::from("model.bin"));
                assert!(offset as usize <= cut, "cut {cut}: offset {offset}");
            }
            other => panic!("cut {cut}: {other:?}"),
        }
    }
    let mut long = good.clone();
    long.push(0);
    expect_format(parse(long), good.len(), "after the last alias");
}

#[test]
fn corrupted_fields_are_format_errors() {
    let w = whisper();
    let good = w.bytes();
    let name = "encoder/conv1/weight";
    let rec = record_of(&w, name);
    let rank_at = rec + 2 + name.len() + 1;
    let dims_at = rank_at + 1;
    let dtype_at = dims_at + 3 * 4;
    let num_bytes_at = dtype_at + 1;

    let mut b = good.clone();
    b[dims_at] ^= 0x01; // 4 rows → 5: the byte count no longer fits
    expect_format(parse(b), dtype_at, "needs");
    let mut b = good.clone();
    b[dims_at + 3] = 0xff; // a huge dim
    expect_format(parse(b), dtype_at, "needs");
    let mut b = good.clone();
    b[num_bytes_at + 3] = 0x40; // a huge num_bytes
    expect_format(parse(b), dtype_at, "needs");
    let mut b = good.clone();
    b[dtype_at] = 9;
    expect_format(parse(b), dtype_at, "unknown dtype id 9");
    let mut b = good.clone();
    b[rank_at] = 200; // rank 200: dims run past the end or the sizes disagree
    assert!(matches!(parse(b), Err(Error::Format { .. })));
    let mut b = good.clone();
    b[rec + 2] = 0xff; // not UTF-8
    expect_format(parse(b), rec, "not valid UTF-8");
    let mut b = good.clone();
    b[rec..rec + 2].copy_from_slice(&0u16.to_le_bytes());
    expect_format(parse(b), rec, "length 0");

    // A count no file could hold.
    let count_at = 4 + 2 + "WhisperSpec".len() + 1 + 4;
    let mut b = good.clone();
    b[count_at..count_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    expect_format(parse(b), count_at, "num_variables is 4294967295");

    // Duplicate names and aliases to nothing.
    let mut w2 = whisper();
    w2.f32(name, &[1], &[1.0]);
    let (b, vars, _) = w2.layout();
    expect_format(parse(b), *vars.last().unwrap(), "appears twice");
    let mut w2 = whisper();
    w2.alias("a", "nothing");
    let (b, _, aliases) = w2.layout();
    expect_format(parse(b), *aliases.last().unwrap(), "not a variable");
    let mut w2 = whisper();
    w2.alias("encoder/conv1/bias", "encoder/conv2/bias");
    let (b, _, aliases) = w2.layout();
    expect_format(parse(b), *aliases.last().unwrap(), "also the name");
}

#[test]
fn no_byte_flip_panics() {
    let good = whisper().bytes();
    for i in 0..good.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = good.clone();
            b[i] ^= flip;
            // Ok or an error; never a panic.
            if let Ok(h) = hf(b) {
                for (t, _) in h.tensor_infos() {
                    let _ = h.tensor(&t.name).map(|t| t.to_f32_vec());
                }
            }
        }
    }
}

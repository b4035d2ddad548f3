//! whisper.cpp's ggml model file (`ggml-tiny.en.bin`, `ggml-base-q5_1.bin`, ...), as its
//! converters (`convert-pt-to-ggml.py`, `convert-h5-to-ggml.py`) and its `quantize` tool write
//! it, opened as the Hugging Face Whisper model it holds.
//!
//! The file is little-endian and unpadded:
//!
//! ```text
//! u32 magic 0x67676d6c ("ggml")
//! i32 n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer,
//!     n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, ftype
//! i32 n_mel, n_fft, then n_mel * n_fft f32     (the mel filter bank)
//! i32 n_words, then per word: u32 length, bytes (the text tokens, raw bytes, in id order)
//! until the end, per tensor:
//!     i32 n_dims, name_length, ggml type; i32 ne[n_dims] (ne[0] is the row length);
//!     name bytes; the values (ggml's block layout for quantized types)
//! ```
//!
//! `ftype` is 0 (f32), 1 (f16) or, after `quantize`, 1000 × ggml's quantization version plus
//! ggml's file type; each tensor names its own type, and that is what is read. Tensors carry
//! openai-whisper's names (`encoder.blocks.0.attn.query.weight`); they are presented under
//! transformers' (`model.encoder.layers.0.self_attn.q_proj.weight`), with the conv biases'
//! `[n, 1]` shape as `[n]`, so the Whisper family reads them as it reads a Hugging Face
//! directory. The special tokens are not stored: like whisper.cpp, their ids follow from
//! `n_vocab` (51864 for English-only vocabularies, 51865 multilingual, 51866 with large-v3's
//! extra language), and the tokenizer is made from the words (see `tokenizer.rs`).

mod tokenizer;

use crate::cursor::{format_error, Cursor};
use crate::gguf::GgmlType;
use crate::hf::HfModel;
use crate::mapping::{map_file, SharedBytes};
use crate::safetensors::SafetensorsTensorInfo;
use crate::whisper_dims::WhisperDims;
use cyb_tensor::{AlignedBuf, DType, Error, Result, Shape, Storage, Tensor};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The language codes of multilingual Whisper, in token order (`<|en|>` is the first language
/// token, `<|yue|>` the 100th, which only large-v3's vocabulary has).
pub const LANGUAGES: [&str; 100] = [
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it",
    "id", "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur",
    "hr", "bg", "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn",
    "et", "mk", "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si",
    "km", "sn", "yo", "so", "af", "oc", "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo",
    "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl", "mg", "as", "tt", "haw", "ln",
    "ha", "ba", "jw", "su", "yue",
];

/// The first four bytes (`0x67676d6c` little-endian).
pub const MAGIC: [u8; 4] = 0x6767_6d6c_u32.to_le_bytes();

/// True when `bytes` start with whisper.cpp's ggml magic.
pub fn has_ggml_magic(bytes: &[u8]) -> bool {
    bytes.get(..4) == Some(&MAGIC[..])
}

/// The header's hyper-parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GgmlHparams {
    pub n_vocab: usize,
    pub n_audio_ctx: usize,
    pub n_audio_state: usize,
    pub n_audio_head: usize,
    pub n_audio_layer: usize,
    pub n_text_ctx: usize,
    pub n_text_state: usize,
    pub n_text_head: usize,
    pub n_text_layer: usize,
    pub n_mels: usize,
    pub ftype: u32,
}

/// One tensor record.
#[derive(Clone, Debug)]
pub struct GgmlTensor {
    /// The name in the file (openai-whisper's).
    pub name: String,
    pub ggml_type: GgmlType,
    /// The shape in PyTorch order (`ne` reversed).
    pub dims: Vec<usize>,
    /// Absolute byte range of the values.
    pub data: Range<usize>,
    /// Where its record starts (for errors).
    pub record_offset: usize,
}

/// A parsed whisper.cpp ggml file.
pub struct GgmlWhisperFile {
    path: PathBuf,
    bytes: SharedBytes,
    hparams: GgmlHparams,
    /// Byte range of each vocabulary word, in id order.
    words: Vec<Range<usize>>,
    tensors: Vec<GgmlTensor>,
}

impl std::fmt::Debug for GgmlWhisperFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgmlWhisperFile")
            .field("path", &self.path)
            .field("hparams", &self.hparams)
            .field("words", &self.words.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// The most dims a tensor record may have (ggml's limit).
const MAX_DIMS: usize = 4;
/// The longest tensor name accepted (whisper.cpp's are under 64 bytes).
const MAX_NAME: usize = 1024;

/// A non-negative i32 field as usize.
fn field(c: &mut Cursor<'_>, what: &str) -> Result<usize> {
    let at = c.pos();
    let v = c.u32(what)? as i32;
    usize::try_from(v).map_err(|_| c.error_at(at, format!("{what} is {v}, expected ≥ 0")))
}

impl GgmlWhisperFile {
    /// Maps and parses the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgmlWhisperFile> {
        let path = path.as_ref();
        GgmlWhisperFile::from_bytes(map_file(path)?, path)
    }

    /// Parses ggml file bytes; `name` is what errors call the file.
    pub fn from_bytes(bytes: SharedBytes, name: impl Into<PathBuf>) -> Result<GgmlWhisperFile> {
        let path = name.into();
        let buf: &[u8] = (*bytes).as_ref();
        let mut c = Cursor::new(buf, &path);
        let magic = c.take(4, "magic")?;
        if magic != MAGIC {
            return Err(c.error_at(
                0,
                format!(
                    "not a whisper.cpp ggml file: magic is {magic:02x?}, expected {MAGIC:02x?}"
                ),
            ));
        }
        let mut h = GgmlHparams::default();
        for (slot, what) in [
            (&mut h.n_vocab, "n_vocab"),
            (&mut h.n_audio_ctx, "n_audio_ctx"),
            (&mut h.n_audio_state, "n_audio_state"),
            (&mut h.n_audio_head, "n_audio_head"),
            (&mut h.n_audio_layer, "n_audio_layer"),
            (&mut h.n_text_ctx, "n_text_ctx"),
            (&mut h.n_text_state, "n_text_state"),
            (&mut h.n_text_head, "n_text_head"),
            (&mut h.n_text_layer, "n_text_layer"),
            (&mut h.n_mels, "n_mels"),
        ] {
            *slot = field(&mut c, what)?;
            if *slot == 0 {
                return Err(c.error_at(c.pos() - 4, format!("{what} is 0")));
            }
        }
        h.ftype = field(&mut c, "ftype")? as u32;
        let at = c.pos();
        let n_mel = field(&mut c, "mel filter rows")?;
        let n_fft = field(&mut c, "mel filter columns")?;
        let filter_bytes = n_mel
            .checked_mul(n_fft)
            .and_then(|n| n.checked_mul(4))
            .filter(|&n| n <= c.remaining())
            .ok_or_else(|| {
                c.error_at(
                    at,
                    format!(
                        "a {n_mel} × {n_fft} mel filter bank does not fit the {} bytes left",
                        c.remaining()
                    ),
                )
            })?;
        c.take(filter_bytes, "mel filter bank")?;
        let at = c.pos();
        let n_words = field(&mut c, "n_words")?;
        if n_words.saturating_mul(4) > c.remaining() || n_words > h.n_vocab {
            return Err(c.error_at(
                at,
                format!(
                    "{n_words} vocabulary words: more than n_vocab {} or than the file holds",
                    h.n_vocab
                ),
            ));
        }
        let mut words = Vec::with_capacity(n_words);
        for i in 0..n_words {
            let len = c.u32(&format!("length of word {i}"))? as usize;
            let start = c.pos();
            c.take(len, &format!("word {i}"))?;
            words.push(start..start + len);
        }
        let mut tensors = Vec::new();
        let mut seen = HashMap::new();
        while c.remaining() > 0 {
            let t = tensor_record(&mut c)?;
            if seen.insert(t.name.clone(), tensors.len()).is_some() {
                return Err(c.error_at(
                    t.record_offset,
                    format!("tensor {:?} appears twice", t.name),
                ));
            }
            tensors.push(t);
        }
        Ok(GgmlWhisperFile {
            path,
            bytes,
            hparams: h,
            words,
            tensors,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn hparams(&self) -> &GgmlHparams {
        &self.hparams
    }

    /// The tensor records in file order, under the file's names.
    pub fn tensors(&self) -> &[GgmlTensor] {
        &self.tensors
    }

    /// The vocabulary words (raw bytes) in id order.
    pub fn words(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let buf: &[u8] = (*self.bytes).as_ref();
        self.words
            .iter()
            .map(move |r| buf.get(r.clone()).unwrap_or_default())
    }

    /// Header keys and values for `inspect`: `ggml.<field>`.
    pub fn metadata(&self) -> Vec<(String, Value)> {
        let h = &self.hparams;
        [
            ("n_vocab", h.n_vocab),
            ("n_audio_ctx", h.n_audio_ctx),
            ("n_audio_state", h.n_audio_state),
            ("n_audio_head", h.n_audio_head),
            ("n_audio_layer", h.n_audio_layer),
            ("n_text_ctx", h.n_text_ctx),
            ("n_text_state", h.n_text_state),
            ("n_text_head", h.n_text_head),
            ("n_text_layer", h.n_text_layer),
            ("n_mels", h.n_mels),
            ("ftype", h.ftype as usize),
            ("n_words", self.words.len()),
        ]
        .into_iter()
        .map(|(k, v)| (format!("ggml.{k}"), Value::from(v)))
        .collect()
    }

    /// `"f16"`, `"q5_1"`, ...: the header's file type as whisper.cpp names it.
    pub fn ftype_name(&self) -> String {
        let f = self.hparams.ftype % 1000;
        let name = match f {
            0 => "f32",
            1 => "f16",
            2 => "q4_0",
            3 => "q4_1",
            7 => "q8_0",
            8 => "q5_0",
            9 => "q5_1",
            10 => "q2_k",
            11 => "q3_k",
            12 => "q4_k",
            13 => "q5_k",
            14 => "q6_k",
            _ => return format!("ftype {}", self.hparams.ftype),
        };
        name.to_string()
    }
}

/// One tensor record at the cursor, its data range checked.
fn tensor_record(c: &mut Cursor<'_>) -> Result<GgmlTensor> {
    let record_offset = c.pos();
    let n_dims = field(c, "tensor n_dims")?;
    let name_len = field(c, "tensor name length")?;
    let type_id = c.u32("tensor type")?;
    if !(1..=MAX_DIMS).contains(&n_dims) {
        return Err(c.error_at(
            record_offset,
            format!("tensor with {n_dims} dims (1 to {MAX_DIMS} are valid)"),
        ));
    }
    if !(1..=MAX_NAME).contains(&name_len) {
        return Err(c.error_at(
            record_offset,
            format!("tensor name of {name_len} bytes (1 to {MAX_NAME} are accepted)"),
        ));
    }
    let mut ne = Vec::with_capacity(n_dims);
    for k in 0..n_dims {
        let d = field(c, &format!("tensor ne[{k}]"))?;
        if d == 0 {
            return Err(c.error_at(record_offset, format!("tensor ne[{k}] is 0")));
        }
        ne.push(d);
    }
    let name_at = c.pos();
    let name = c.take(name_len, "tensor name")?;
    let name = String::from_utf8(name.to_vec())
        .map_err(|e| c.error_at(name_at, format!("tensor name is not valid UTF-8: {e}")))?;
    let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| {
        c.error_at(
            record_offset,
            format!("tensor {name:?}: ggml type {type_id} is not a type ggml defines"),
        )
    })?;
    let numel = ne.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let row = ne.first().copied().unwrap_or(1);
    let bytes = numel
        .filter(|_| row.is_multiple_of(ggml_type.block_elems))
        .and_then(|n| ggml_type.bytes_for(n))
        .ok_or_else(|| {
            c.error_at(
                record_offset,
                format!(
                    "tensor {name:?}: {} ne {ne:?} is not whole rows of {}-value blocks",
                    ggml_type.name, ggml_type.block_elems
                ),
            )
        })?;
    let start = c.pos();
    c.take(bytes, &format!("tensor {name:?}'s values"))?;
    ne.reverse();
    Ok(GgmlTensor {
        name,
        ggml_type,
        dims: ne,
        data: start..start + bytes,
        record_offset,
    })
}

/// transformers' name for an openai-whisper tensor name, `None` for one Whisper does not have.
fn hf_name(name: &str) -> Option<String> {
    let fixed = match name {
        "encoder.conv1.weight" => "model.encoder.conv1.weight",
        "encoder.conv1.bias" => "model.encoder.conv1.bias",
        "encoder.conv2.weight" => "model.encoder.conv2.weight",
        "encoder.conv2.bias" => "model.encoder.conv2.bias",
        "encoder.positional_embedding" => "model.encoder.embed_positions.weight",
        "encoder.ln_post.weight" => "model.encoder.layer_norm.weight",
        "encoder.ln_post.bias" => "model.encoder.layer_norm.bias",
        "decoder.token_embedding.weight" => "model.decoder.embed_tokens.weight",
        "decoder.positional_embedding" => "model.decoder.embed_positions.weight",
        "decoder.ln.weight" => "model.decoder.layer_norm.weight",
        "decoder.ln.bias" => "model.decoder.layer_norm.bias",
        "decoder.proj.weight" => "proj_out.weight",
        _ => "",
    };
    if !fixed.is_empty() {
        return Some(fixed.to_string());
    }
    let (side, rest) = name.split_once(".blocks.")?;
    let decoder = match side {
        "encoder" => false,
        "decoder" => true,
        _ => return None,
    };
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, param) = rest.rsplit_once('.')?;
    if param != "weight" && param != "bias" {
        return None;
    }
    let module = match module {
        "attn.query" => "self_attn.q_proj",
        "attn.key" => "self_attn.k_proj",
        "attn.value" => "self_attn.v_proj",
        "attn.out" => "self_attn.out_proj",
        "attn_ln" => "self_attn_layer_norm",
        "cross_attn.query" if decoder => "encoder_attn.q_proj",
        "cross_attn.key" if decoder => "encoder_attn.k_proj",
        "cross_attn.value" if decoder => "encoder_attn.v_proj",
        "cross_attn.out" if decoder => "encoder_attn.out_proj",
        "cross_attn_ln" if decoder => "encoder_attn_layer_norm",
        "mlp.0" => "fc1",
        "mlp.2" => "fc2",
        "mlp_ln" => "final_layer_norm",
        _ => return None,
    };
    Some(format!("model.{side}.layers.{layer}.{module}.{param}"))
}

/// The tensors of a ggml file under transformers' names.
pub(crate) struct GgmlWhisperWeights {
    file: GgmlWhisperFile,
    infos: Vec<SafetensorsTensorInfo>,
    /// Index into `file.tensors()` per entry of `infos`.
    source: Vec<usize>,
    by_name: HashMap<String, usize>,
}

impl std::fmt::Debug for GgmlWhisperWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgmlWhisperWeights")
            .field("file", &self.file)
            .finish()
    }
}

impl GgmlWhisperWeights {
    fn new(file: GgmlWhisperFile) -> Result<GgmlWhisperWeights> {
        let mut infos = Vec::with_capacity(file.tensors.len());
        let mut source = Vec::with_capacity(file.tensors.len());
        let mut by_name = HashMap::new();
        for (k, t) in file.tensors.iter().enumerate() {
            let err = |reason: String| format_error(&file.path, t.record_offset, reason);
            let hf = hf_name(&t.name).ok_or_else(|| {
                err(format!(
                    "tensor {:?} has no counterpart in Whisper (not a whisper.cpp Whisper model?)",
                    t.name
                ))
            })?;
            let dtype = t.ggml_type.dtype().ok_or_else(|| {
                err(format!(
                    "tensor {:?} is {}, which this build cannot compute with",
                    t.name, t.ggml_type.name
                ))
            })?;
            let mut dims = t.dims.clone();
            // The converters store the conv biases as [n, 1].
            if hf.ends_with("conv1.bias") || hf.ends_with("conv2.bias") {
                dims.retain(|&d| d != 1);
            }
            let shape = Shape::new(&dims).map_err(|e| err(format!("tensor {:?}: {e}", t.name)))?;
            if by_name.insert(hf.clone(), infos.len()).is_some() {
                return Err(err(format!("tensor {hf:?} appears twice")));
            }
            infos.push(SafetensorsTensorInfo {
                name: hf,
                dtype,
                shape,
                file_offset: t.data.start,
                byte_len: t.data.len(),
            });
            source.push(k);
        }
        Ok(GgmlWhisperWeights {
            file,
            infos,
            source,
            by_name,
        })
    }

    pub(crate) fn file(&self) -> &GgmlWhisperFile {
        &self.file
    }

    pub(crate) fn infos(&self) -> &[SafetensorsTensorInfo] {
        &self.infos
    }

    pub(crate) fn has_tensor(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The tensor `name`: the file's bytes in place when they are aligned for its type, else
    /// copied into aligned memory (the format has no padding).
    pub(crate) fn tensor(&self, name: &str) -> Result<Tensor> {
        let k = self.by_name.get(name).copied();
        let (Some(info), Some(t)) = (
            k.and_then(|k| self.infos.get(k)),
            k.and_then(|k| self.source.get(k))
                .and_then(|&s| self.file.tensors.get(s)),
        ) else {
            return Err(Error::MissingTensor {
                name: name.to_string(),
                required_by: self.file.path.display().to_string(),
            });
        };
        let buf: &[u8] = (*self.file.bytes).as_ref();
        let data = buf.get(t.data.clone()).ok_or_else(|| {
            format_error(
                &self.file.path,
                t.data.start,
                format!("tensor {:?} lies outside the file", t.name),
            )
        })?;
        let align = match info.dtype {
            DType::F32 | DType::I32 => 4,
            _ => 2,
        };
        let storage = if data.as_ptr().align_offset(align) == 0 {
            Storage::Shared {
                owner: self.file.bytes.clone(),
                offset: t.data.start,
                len: t.data.len(),
            }
        } else {
            Storage::Shared {
                owner: Arc::new(AlignedBuf::from_bytes(data)),
                offset: 0,
                len: data.len(),
            }
        };
        Tensor::new(info.shape.clone(), info.dtype, storage)
    }

    /// transformers' `WhisperConfig` keys for this file, plus the special token ids.
    fn config_json(&self) -> Result<Map<String, Value>> {
        let h = &self.file.hparams;
        let path = &self.file.path;
        let shape = |name: &str| {
            self.infos
                .get(*self.by_name.get(name)?)
                .map(|i| i.shape.dims())
        };
        let ffn = |side: &str| {
            shape(&format!("model.{side}.layers.0.fc1.weight"))
                .and_then(|d| d.first().copied())
                .unwrap_or(4 * h.n_audio_state)
        };
        if h.n_audio_state != h.n_text_state {
            return Err(format_error(
                path,
                4,
                format!(
                    "n_audio_state {} differs from n_text_state {}: Whisper has one width",
                    h.n_audio_state, h.n_text_state
                ),
            ));
        }
        let mut m = WhisperDims {
            d_model: h.n_audio_state,
            num_mel_bins: h.n_mels,
            encoder_layers: h.n_audio_layer,
            decoder_layers: h.n_text_layer,
            encoder_heads: h.n_audio_head,
            decoder_heads: h.n_text_head,
            encoder_ffn: ffn("encoder"),
            decoder_ffn: ffn("decoder"),
            vocab_size: h.n_vocab,
            max_source_positions: h.n_audio_ctx,
            max_target_positions: h.n_text_ctx,
            tied: !self.by_name.contains_key("proj_out.weight"),
        }
        .config_json();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        if let Some(s) = tokenizer::Specials::of(h.n_vocab) {
            put("eos_token_id", s.eot.into());
            put("pad_token_id", s.eot.into());
            put("bos_token_id", s.eot.into());
            put("decoder_start_token_id", s.sot.into());
        }
        Ok(m)
    }
}

/// Opens the whisper.cpp ggml file at `path` as a Hugging Face Whisper model, its tokenizer
/// written to the cache of generated tokenizers.
pub fn open(path: impl AsRef<Path>) -> Result<HfModel> {
    let file = GgmlWhisperFile::open(path)?;
    let tokenizer_json = tokenizer::materialize(&file)?;
    let mut h = from_file(file)?;
    h.tokenizer_json = tokenizer_json;
    Ok(h)
}

/// A parsed ggml file as a Hugging Face Whisper model, without a tokenizer.
pub fn from_file(file: GgmlWhisperFile) -> Result<HfModel> {
    let path = file.path.clone();
    let weights = GgmlWhisperWeights::new(file)?;
    let config = weights.config_json()?;
    Ok(HfModel::from_converted(
        path,
        Value::Object(config),
        crate::hf::Converted::Ggml(weights),
        None,
        None,
        None,
    ))
}

/// The tokenizer.json text made from a ggml file's word list (`None` when its vocabulary is
/// not Whisper's).
pub fn tokenizer_json(file: &GgmlWhisperFile) -> Option<String> {
    tokenizer::tokenizer_json(file)
}

#[cfg(test)]
mod tests;

//! A CTranslate2 Whisper model (`WhisperSpec`) presented as the Hugging Face directory of
//! transformers' `WhisperForConditionalGeneration` it was converted from.
//!
//! Names map one to one, except the attention projections CTranslate2 fuses by rows:
//! self-attention `linear_0` is `[q; k; v]` (`[3d, d]`), cross-attention `linear_1` is
//! `[k; v]` (`[2d, d]`); each part is a row range of the fused matrix (see `table.rs` for how
//! tensors are cut and read). The fused bias holds zeros where transformers' `k_proj` has no
//! bias; those rows are checked to be zero and dropped. `decoder/projection/weight` is
//! normally an alias of the token embedding (tied, so no `proj_out.weight`); when it is its own
//! variable it is `proj_out.weight`.
//!
//! The config.json equivalent is built from the shapes and settings (transformers'
//! `WhisperConfig` keys), plus every key of CTranslate2's `config.json` (`alignment_heads`,
//! `lang_ids`, `suppress_ids`, `suppress_ids_begin`), with `suppress_ids` and
//! `suppress_ids_begin` also under transformers' names (`suppress_tokens`,
//! `begin_suppress_tokens`). Special token ids come from CTranslate2's vocabulary file.

use super::table::{Builder, Part, Table};
use super::{Ct2File, MODEL_BIN};
use crate::cursor::format_error;
use crate::hf::{read_json, HfModel};
use crate::safetensors::SafetensorsTensorInfo;
use crate::whisper_dims::WhisperDims;
use cyb_tensor::{DType, Error, Result, Tensor};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// The newest Whisper spec revision this mapping knows (3 renumbered the activations).
const MAX_REVISION: u32 = 3;

/// Opens the CTranslate2 Whisper directory `dir` as a Hugging Face model.
pub fn open(dir: impl AsRef<Path>) -> Result<HfModel> {
    let dir = dir.as_ref();
    from_file(Ct2File::open(dir.join(MODEL_BIN))?, dir)
}

/// A parsed `model.bin` as a Hugging Face Whisper model; the other files (`config.json`, the
/// vocabulary, `tokenizer.json`) are read from `dir`.
pub fn from_file(file: Ct2File, dir: &Path) -> Result<HfModel> {
    let weights = WhisperWeights::new(file)?;
    let mut config = weights.config_json(dir)?;
    let optional = |name: &str| {
        let p = dir.join(name);
        p.is_file().then_some(p)
    };
    let tokenizer_config = optional("tokenizer_config.json")
        .as_deref()
        .map(read_json)
        .transpose()?;
    let generation_config = optional("generation_config.json")
        .as_deref()
        .map(read_json)
        .transpose()?;
    if let Some(ids) = special_ids(dir)? {
        for (k, v) in ids {
            config.entry(k).or_insert(v);
        }
    }
    Ok(HfModel::from_converted(
        dir.to_path_buf(),
        Value::Object(config),
        crate::hf::Converted::Ct2(weights),
        optional("tokenizer.json"),
        tokenizer_config,
        generation_config,
    ))
}

/// The Hugging Face view of a `WhisperSpec` model.bin.
pub(crate) struct WhisperWeights {
    file: Ct2File,
    table: Table,
    dims: WhisperDims,
}

impl std::fmt::Debug for WhisperWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhisperWeights")
            .field("file", &self.file)
            .field("tensors", &self.table.infos().len())
            .finish()
    }
}

/// Number of layers `prefix/layer_{i}` with `probe` under them, counting from 0.
fn layer_count(file: &Ct2File, prefix: &str, probe: &str) -> usize {
    (0..)
        .take_while(|i| {
            file.variable(&format!("{prefix}/layer_{i}/{probe}"))
                .is_some()
        })
        .count()
}

impl WhisperWeights {
    fn new(file: Ct2File) -> Result<WhisperWeights> {
        let spec_at = 4;
        if file.spec() != "WhisperSpec" {
            return Err(format_error(
                file.path(),
                spec_at,
                format!(
                    "CTranslate2 spec {:?}: only Whisper models (WhisperSpec) are read",
                    file.spec()
                ),
            ));
        }
        if file.spec_revision() > MAX_REVISION {
            return Err(format_error(
                file.path(),
                spec_at,
                format!(
                    "WhisperSpec revision {} is newer than this reader knows ({MAX_REVISION})",
                    file.spec_revision()
                ),
            ));
        }
        let mut b = Builder::new(&file);
        let dims = map_tensors(&mut b)?;
        let table = b.finish("transformers' Whisper (not a Whisper layout this reader knows)")?;
        Ok(WhisperWeights { file, table, dims })
    }

    /// The parsed `model.bin`.
    pub(crate) fn file(&self) -> &Ct2File {
        &self.file
    }

    /// Every tensor under its transformers name, encoder then decoder.
    pub(crate) fn infos(&self) -> &[SafetensorsTensorInfo] {
        self.table.infos()
    }

    pub(crate) fn has_tensor(&self, name: &str) -> bool {
        self.table.has(name)
    }

    /// False for a tensor computed when read (a dequantized weight).
    pub(crate) fn in_place(&self, name: &str) -> bool {
        self.table.in_place(name)
    }

    /// The tensor `name` (`required_by` names the model in the error when there is none).
    pub(crate) fn tensor(&self, name: &str, required_by: &Path) -> Result<Tensor> {
        self.table.tensor(&self.file, name, required_by)
    }

    /// transformers' `WhisperConfig` keys for these weights, then CTranslate2's config.json
    /// keys (read from `dir`) where they do not clash.
    fn config_json(&self, dir: &Path) -> Result<Map<String, Value>> {
        let mut m = self.dims.config_json();
        let ct2_config = dir.join("config.json");
        if ct2_config.is_file() {
            let v = read_json(&ct2_config)?;
            let Value::Object(o) = v else {
                return Err(format_error(
                    &ct2_config,
                    0,
                    "config.json is not a JSON object",
                ));
            };
            for (hf, ct2) in [
                ("suppress_tokens", "suppress_ids"),
                ("begin_suppress_tokens", "suppress_ids_begin"),
            ] {
                if let Some(v) = o.get(ct2) {
                    m.insert(hf.into(), v.clone());
                }
            }
            for (k, v) in o {
                m.entry(k).or_insert(v);
            }
        }
        Ok(m)
    }
}

/// Every tensor of transformers' `WhisperForConditionalGeneration`, in its module order.
fn map_tensors(b: &mut Builder<'_>) -> Result<WhisperDims> {
    let conv1 = b.var("encoder/conv1/weight", &[None, None, Some(3)])?;
    let (d, mels) = match conv1.shape.dims() {
        [d, mels, _] => (*d, *mels),
        _ => (0, 0),
    };
    let mut dims = WhisperDims {
        d_model: d,
        num_mel_bins: mels,
        encoder_layers: layer_count(b.file, "encoder", "self_attention/linear_0/weight"),
        decoder_layers: layer_count(b.file, "decoder", "self_attention/linear_0/weight"),
        encoder_heads: b.count_setting("encoder/num_heads")?,
        decoder_heads: b.count_setting("decoder/num_heads")?,
        ..WhisperDims::default()
    };
    for (heads, which) in [
        (dims.encoder_heads, "encoder"),
        (dims.decoder_heads, "decoder"),
    ] {
        if d == 0 || !d.is_multiple_of(heads) {
            let v = b.var(&format!("{which}/num_heads"), &[])?;
            return Err(b.error(v, format!("{heads} heads do not divide d_model {d}")));
        }
    }
    // Revision 3 renumbered the activations: GELU was 1 before, 3 since.
    let gelu = if b.file.spec_revision() >= 3 {
        3.0
    } else {
        1.0
    };
    b.setting("decoder/activation", &[gelu], "Whisper's decoder uses GELU")?;
    b.setting(
        "decoder/pre_norm",
        &[1.0],
        "Whisper normalizes before each block",
    )?;
    b.setting("decoder/alibi", &[0.0], "Whisper has no ALiBi")?;
    // A boolean (int8) true would scale by sqrt(d_model); a float is the factor itself.
    let no_scale = match b.file.variable("decoder/scale_embeddings") {
        Some(v) if v.dtype == DType::I8 => 0.0,
        _ => 1.0,
    };
    b.setting(
        "decoder/scale_embeddings",
        &[no_scale],
        "Whisper does not scale its token embeddings",
    )?;

    let e = "model.encoder";
    b.whole(
        "encoder/conv1/weight",
        &[Some(d), Some(mels), Some(3)],
        format!("{e}.conv1.weight"),
    )?;
    b.whole("encoder/conv1/bias", &[Some(d)], format!("{e}.conv1.bias"))?;
    b.whole(
        "encoder/conv2/weight",
        &[Some(d), Some(d), Some(3)],
        format!("{e}.conv2.weight"),
    )?;
    b.whole("encoder/conv2/bias", &[Some(d)], format!("{e}.conv2.bias"))?;
    let pos = b.var("encoder/position_encodings/encodings", &[None, Some(d)])?;
    dims.max_source_positions = pos.shape.dims().first().copied().unwrap_or(0);
    b.whole(
        "encoder/position_encodings/encodings",
        &[None, Some(d)],
        format!("{e}.embed_positions.weight"),
    )?;
    for i in 0..dims.encoder_layers {
        let (c, h) = (format!("encoder/layer_{i}"), format!("{e}.layers.{i}"));
        self_attention(b, &c, &h, d)?;
        dims.encoder_ffn = ffn(b, &c, &h, d, dims.encoder_ffn)?;
    }
    b.norm("encoder/layer_norm", d, &format!("{e}.layer_norm"))?;

    let dec = "model.decoder";
    let emb = b.var("decoder/embeddings/weight", &[None, Some(d)])?;
    dims.vocab_size = emb.shape.dims().first().copied().unwrap_or(0);
    b.whole(
        "decoder/embeddings/weight",
        &[None, Some(d)],
        format!("{dec}.embed_tokens.weight"),
    )?;
    let pos = b.var("decoder/position_encodings/encodings", &[None, Some(d)])?;
    dims.max_target_positions = pos.shape.dims().first().copied().unwrap_or(0);
    b.whole(
        "decoder/position_encodings/encodings",
        &[None, Some(d)],
        format!("{dec}.embed_positions.weight"),
    )?;
    for i in 0..dims.decoder_layers {
        let (c, h) = (format!("decoder/layer_{i}"), format!("{dec}.layers.{i}"));
        self_attention(b, &c, &h, d)?;
        b.norm(
            &format!("{c}/attention/layer_norm"),
            d,
            &format!("{h}.encoder_attn_layer_norm"),
        )?;
        let a = format!("{h}.encoder_attn");
        b.linear(
            &format!("{c}/attention/linear_0"),
            Some(d),
            d,
            &format!("{a}.q_proj"),
        )?;
        b.fused(
            &format!("{c}/attention/linear_1"),
            d,
            &[
                Part::Tensor(format!("{a}.k_proj.weight")),
                Part::Tensor(format!("{a}.v_proj.weight")),
            ],
            &[
                Part::Zero("the cross-attention key bias"),
                Part::Tensor(format!("{a}.v_proj.bias")),
            ],
        )?;
        b.linear(
            &format!("{c}/attention/linear_2"),
            Some(d),
            d,
            &format!("{a}.out_proj"),
        )?;
        dims.decoder_ffn = ffn(b, &c, &h, d, dims.decoder_ffn)?;
    }
    b.norm("decoder/layer_norm", d, &format!("{dec}.layer_norm"))?;

    // Tied when the projection is an alias of the embedding (CTranslate2 aliases equal values).
    let proj = b.var(
        "decoder/projection/weight",
        &[Some(dims.vocab_size), Some(d)],
    )?;
    dims.tied = b.file.variable_index("decoder/projection/weight")
        == b.file.variable_index("decoder/embeddings/weight");
    if !dims.tied {
        b.push(proj, 0..dims.vocab_size, "proj_out.weight".into())?;
    }
    if let Some(bias) = b.file.variable("decoder/projection/bias") {
        return Err(b.error(
            bias,
            "transformers' Whisper has no output projection bias".into(),
        ));
    }
    Ok(dims)
}

/// A layer's self-attention: norm, fused `[q; k; v]` (k without bias), output projection.
fn self_attention(b: &mut Builder<'_>, c: &str, h: &str, d: usize) -> Result<()> {
    b.norm(
        &format!("{c}/self_attention/layer_norm"),
        d,
        &format!("{h}.self_attn_layer_norm"),
    )?;
    let a = format!("{h}.self_attn");
    b.fused(
        &format!("{c}/self_attention/linear_0"),
        d,
        &[
            Part::Tensor(format!("{a}.q_proj.weight")),
            Part::Tensor(format!("{a}.k_proj.weight")),
            Part::Tensor(format!("{a}.v_proj.weight")),
        ],
        &[
            Part::Tensor(format!("{a}.q_proj.bias")),
            Part::Zero("the self-attention key bias"),
            Part::Tensor(format!("{a}.v_proj.bias")),
        ],
    )?;
    b.linear(
        &format!("{c}/self_attention/linear_1"),
        Some(d),
        d,
        &format!("{a}.out_proj"),
    )?;
    Ok(())
}

/// A layer's feed-forward block; returns its width, which must equal `prev` after the first.
fn ffn(b: &mut Builder<'_>, c: &str, h: &str, d: usize, prev: usize) -> Result<usize> {
    b.norm(
        &format!("{c}/ffn/layer_norm"),
        d,
        &format!("{h}.final_layer_norm"),
    )?;
    let want = (prev != 0).then_some(prev);
    let ffn = b.linear(&format!("{c}/ffn/linear_0"), want, d, &format!("{h}.fc1"))?;
    b.linear(
        &format!("{c}/ffn/linear_1"),
        Some(d),
        ffn,
        &format!("{h}.fc2"),
    )?;
    Ok(ffn)
}

/// `eos_token_id`, `pad_token_id` (`<|endoftext|>`) and `decoder_start_token_id`
/// (`<|startoftranscript|>`) from CTranslate2's vocabulary file, when there is one.
fn special_ids(dir: &Path) -> Result<Option<Vec<(String, Value)>>> {
    let json = dir.join("vocabulary.json");
    let txt = dir.join("vocabulary.txt");
    let tokens: Vec<String> = if json.is_file() {
        match read_json(&json)? {
            Value::Array(a) => a
                .into_iter()
                .map(|t| match t {
                    Value::String(s) => s,
                    _ => String::new(),
                })
                .collect(),
            _ => return Err(format_error(&json, 0, "is not a JSON list of tokens")),
        }
    } else if txt.is_file() {
        let text = std::fs::read_to_string(&txt).map_err(|source| Error::Io {
            path: PathBuf::from(&txt),
            source,
        })?;
        text.lines().map(str::to_string).collect()
    } else {
        return Ok(None);
    };
    let id = |t: &str| tokens.iter().position(|x| x == t).map(Value::from);
    let mut ids = Vec::new();
    if let Some(eot) = id("<|endoftext|>") {
        ids.push(("eos_token_id".to_string(), eot.clone()));
        ids.push(("pad_token_id".to_string(), eot));
    }
    if let Some(sot) = id("<|startoftranscript|>") {
        ids.push(("decoder_start_token_id".to_string(), sot));
    }
    Ok(Some(ids))
}

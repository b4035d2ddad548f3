//! LoRA adapters applied at run time, without merging: each adapted projection `y = x · Wᵀ`
//! gains `scale · (x · Aᵀ) · Bᵀ`, with A `[rank, in]` and B `[out, rank]` from the adapter and
//! `scale` the adapter's `alpha / rank` (`alpha / √rank` for rsLoRA) times the scale it is used
//! with. Several adapters may be loaded at once; a session picks the scale of each (0 leaves
//! one out).
//!
//! Two files are read:
//! - llama.cpp's GGUF adapters (`convert_lora_to_gguf.py`): `general.type = "adapter"`,
//!   `adapter.type = "lora"`, `adapter.lora.alpha`, and per adapted weight `NAME.lora_a` and
//!   `NAME.lora_b` under the base weight's GGUF name (`blk.3.attn_q.weight.lora_a`);
//! - PEFT directories: `adapter_config.json` (`r`, `lora_alpha`, `use_rslora`) and
//!   `adapter_model.safetensors` (`…layers.3.self_attn.q_proj.lora_A.weight`).
//!
//! A Llama-architecture GGUF model keeps its q and k rows in llama.cpp's order (each head's two
//! rotary halves interleaved); an adapter made for the other layout has the rows of its q and k
//! B matrices reordered the same way when it is loaded.

use super::config::{LlamaConfig, WeightNaming};
use cyb_ops::RopeLayout;
use cyb_tensor::{Error, Result, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A projection a LoRA adapter may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LoraTarget {
    Q,
    K,
    V,
    /// A fused q/k/v projection (Phi-3).
    Qkv,
    Out,
    Gate,
    Up,
    /// A fused gate/up projection (Phi-3).
    GateUp,
    Down,
}

impl LoraTarget {
    /// The target from llama.cpp's tensor name (`attn_q`) or Hugging Face's module name
    /// (`q_proj`).
    fn parse(name: &str) -> Option<LoraTarget> {
        Some(match name {
            "attn_q" | "q_proj" => LoraTarget::Q,
            "attn_k" | "k_proj" => LoraTarget::K,
            "attn_v" | "v_proj" => LoraTarget::V,
            "attn_qkv" | "qkv_proj" => LoraTarget::Qkv,
            "attn_output" | "o_proj" => LoraTarget::Out,
            "ffn_gate" | "gate_proj" => LoraTarget::Gate,
            "ffn_up" | "up_proj" => LoraTarget::Up,
            "gate_up_proj" => LoraTarget::GateUp,
            "ffn_down" | "down_proj" => LoraTarget::Down,
            _ => return None,
        })
    }

    /// (rows out, values in) of the base projection.
    fn shape(self, cfg: &LlamaConfig) -> (usize, usize) {
        let (h, d, f) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let (q, kv) = (cfg.num_heads * d, cfg.num_kv_heads * d);
        match self {
            LoraTarget::Q => (q, h),
            LoraTarget::K | LoraTarget::V => (kv, h),
            LoraTarget::Qkv => (q + 2 * kv, h),
            LoraTarget::Out => (h, q),
            LoraTarget::Gate | LoraTarget::Up => (f, h),
            LoraTarget::GateUp => (2 * f, h),
            LoraTarget::Down => (h, f),
        }
    }
}

/// One adapted projection: `A [rank, in]`, `B [out, rank]` (F32) and the adapter's own scale.
#[derive(Clone, Debug)]
pub struct LoraPair {
    pub a: Tensor,
    pub b: Tensor,
    pub scale: f32,
}

/// A loaded LoRA adapter: its pairs by (layer, projection).
#[derive(Debug)]
pub struct LoraAdapter {
    path: PathBuf,
    pairs: HashMap<(usize, LoraTarget), LoraPair>,
}

/// The layout an adapter's q/k rows are in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum QkRows {
    /// Hugging Face's: each head's rotary halves one after the other.
    Halves,
    /// llama.cpp's for the Llama architecture: the halves interleaved.
    Interleaved,
}

impl LoraAdapter {
    /// Reads the adapter at `path` (a GGUF file, a PEFT directory or its
    /// `adapter_model.safetensors`) for a model with `cfg`; every pair is checked against the
    /// model's projections (an unknown name, a missing half or a shape that does not fit is an
    /// error naming the tensor).
    pub fn load(path: &Path, cfg: &LlamaConfig) -> Result<LoraAdapter> {
        let meta = std::fs::metadata(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let dir = if meta.is_dir() {
            Some(path.to_path_buf())
        } else if path.extension().is_some_and(|e| e == "safetensors") {
            path.parent().map(Path::to_path_buf)
        } else {
            None
        };
        let (raw, alpha, layout) = match dir {
            Some(dir) => {
                let (raw, alpha) = read_peft(&dir)?;
                (raw, alpha, QkRows::Halves)
            }
            None => read_gguf(path)?,
        };
        let model_layout =
            if cfg.naming == WeightNaming::Gguf && cfg.rope_layout == RopeLayout::Normal {
                QkRows::Interleaved
            } else {
                QkRows::Halves
            };
        let mut pairs = HashMap::new();
        for ((layer, target), (a, b, name)) in raw {
            if layer >= cfg.num_layers {
                return Err(invalid(
                    path,
                    format!(
                        "{name}: layer {layer} is past the model's {}",
                        cfg.num_layers
                    ),
                ));
            }
            let (out, input) = target.shape(cfg);
            let (a, b) = (
                a.ok_or_else(|| half(path, &name, "A"))?,
                b.ok_or_else(|| half(path, &name, "B"))?,
            );
            let rank = a.dims().first().copied().unwrap_or(0);
            if a.dims() != [rank, input] || b.dims() != [out, rank] || rank == 0 {
                return Err(Error::ShapeMismatch {
                    op: format!(
                        "LoRA {name} in {} (A [rank, in], B [out, rank])",
                        path.display()
                    ),
                    expected: vec![rank, input, out, rank],
                    got: [a.dims(), b.dims()].concat(),
                });
            }
            let mut b = b.to_f32_vec()?;
            if layout != model_layout {
                let heads = match target {
                    LoraTarget::Q => Some(cfg.num_heads),
                    LoraTarget::K => Some(cfg.num_kv_heads),
                    _ => None,
                };
                if let Some(heads) = heads {
                    b = reorder_heads(&b, heads, out, rank, layout == QkRows::Halves);
                }
            }
            let a = shared(Tensor::from_f32(&[rank, input], &a.to_f32_vec()?)?);
            let b = shared(Tensor::from_f32(&[out, rank], &b)?);
            let scale = alpha.scale(rank);
            pairs.insert((layer, target), LoraPair { a, b, scale });
        }
        if pairs.is_empty() {
            return Err(invalid(
                path,
                "no LoRA pairs for the model's projections".into(),
            ));
        }
        Ok(LoraAdapter {
            path: path.to_path_buf(),
            pairs,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pair adapting `target` of block `layer`, if the adapter has one.
    pub fn pair(&self, layer: usize, target: LoraTarget) -> Option<&LoraPair> {
        self.pairs.get(&(layer, target))
    }
}

/// A tensor in shared storage, so that device backends keep one upload of it.
fn shared(t: Tensor) -> Tensor {
    crate::step::stack_rows(&[&t]).unwrap_or(t)
}

fn invalid(path: &Path, reason: String) -> Error {
    Error::invalid("lora", format!("{}: {reason}", path.display()))
}

fn half(path: &Path, name: &str, which: &str) -> Error {
    invalid(path, format!("{name} has no LoRA {which} matrix"))
}

/// Rows of B `[out, rank]` for `heads` heads reordered between the two q/k layouts: from
/// Hugging Face's halves to llama.cpp's interleaved pairs when `to_interleaved`, else back.
fn reorder_heads(
    b: &[f32],
    heads: usize,
    out: usize,
    rank: usize,
    to_interleaved: bool,
) -> Vec<f32> {
    let per = out / heads.max(1);
    let half = per / 2;
    let mut r = vec![0.0; b.len()];
    for h in 0..heads {
        for i in 0..half {
            for s in 0..2 {
                let halves = h * per + s * half + i;
                let pairs = h * per + 2 * i + s;
                let (from, to) = if to_interleaved {
                    (halves, pairs)
                } else {
                    (pairs, halves)
                };
                r[to * rank..(to + 1) * rank].copy_from_slice(&b[from * rank..(from + 1) * rank]);
            }
        }
    }
    r
}

/// What the readers give: per (layer, target) A, B and the name to report.
type RawPairs = HashMap<(usize, LoraTarget), (Option<Tensor>, Option<Tensor>, String)>;

/// How an adapter's own scale follows from its rank.
#[derive(Clone, Copy)]
enum Alpha {
    /// llama.cpp's rule: alpha / rank, or 1 when alpha is 0.
    Gguf(f32),
    /// PEFT's: lora_alpha / rank, or lora_alpha / √rank with rsLoRA.
    Peft { alpha: f32, rs: bool },
}

impl Alpha {
    fn scale(self, rank: usize) -> f32 {
        let r = rank as f32;
        match self {
            Alpha::Gguf(0.0) => 1.0,
            Alpha::Gguf(a) => a / r,
            Alpha::Peft { alpha, rs: true } => alpha / r.sqrt(),
            Alpha::Peft { alpha, .. } => alpha / r,
        }
    }
}

fn read_gguf(path: &Path) -> Result<(RawPairs, Alpha, QkRows)> {
    let file = cyb_format::GgufFile::open(path)?;
    let text = |k: &str| file.get(k).and_then(|v| v.as_str().map(str::to_string));
    if text("general.type").as_deref() != Some("adapter")
        || text("adapter.type").as_deref() != Some("lora")
    {
        return Err(invalid(
            path,
            "not a LoRA adapter (general.type \"adapter\" and adapter.type \"lora\" expected)"
                .into(),
        ));
    }
    let alpha = file
        .get("adapter.lora.alpha")
        .and_then(|v| v.as_f64())
        .unwrap_or(0.0) as f32;
    let layout = match text("general.architecture").as_deref() {
        Some("llama") => QkRows::Interleaved,
        _ => QkRows::Halves,
    };
    let names = file.tensor_infos().iter().map(|i| i.name.as_str());
    let raw = collect_pairs(
        path,
        names,
        [".weight.lora_a", ".weight.lora_b"],
        |base| Some((gguf_key(base)?, format!("{base}.weight"))),
        |name| file.tensor(name),
    )?;
    Ok((raw, Alpha::Gguf(alpha), layout))
}

/// The A and B matrices of `names` (ending in `suffixes` [A, B]) by (layer, target), `key`
/// giving those and the name to report from the part before the suffix.
fn collect_pairs<'n>(
    path: &Path,
    names: impl Iterator<Item = &'n str>,
    suffixes: [&str; 2],
    key: impl Fn(&str) -> Option<((usize, LoraTarget), String)>,
    tensor: impl Fn(&str) -> Result<Tensor>,
) -> Result<RawPairs> {
    let mut raw: RawPairs = HashMap::new();
    for name in names {
        let (base, is_a) = match (
            name.strip_suffix(suffixes[0]),
            name.strip_suffix(suffixes[1]),
        ) {
            (Some(b), _) => (b, true),
            (_, Some(b)) => (b, false),
            _ => {
                return Err(invalid(
                    path,
                    format!("tensor {name} is not a LoRA A or B matrix"),
                ))
            }
        };
        let (k, report) = key(base).ok_or_else(|| unknown(path, name))?;
        let t = tensor(name)?;
        let entry = raw.entry(k).or_insert_with(|| (None, None, report));
        *if is_a { &mut entry.0 } else { &mut entry.1 } = Some(t);
    }
    Ok(raw)
}

fn unknown(path: &Path, name: &str) -> Error {
    invalid(
        path,
        format!("tensor {name}: no projection of the model has this name"),
    )
}

/// (layer, target) of `blk.N.NAME`.
fn gguf_key(base: &str) -> Option<(usize, LoraTarget)> {
    let rest = base.strip_prefix("blk.")?;
    let (layer, name) = rest.split_once('.')?;
    Some((layer.parse().ok()?, LoraTarget::parse(name)?))
}

fn read_peft(dir: &Path) -> Result<(RawPairs, Alpha)> {
    let cfg_path = dir.join("adapter_config.json");
    let text = std::fs::read_to_string(&cfg_path).map_err(|source| Error::Io {
        path: cfg_path.clone(),
        source,
    })?;
    let cfg: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| invalid(&cfg_path, format!("not JSON: {e}")))?;
    let peft_type = cfg.get("peft_type").and_then(|v| v.as_str());
    if peft_type.is_some_and(|t| t != "LORA") {
        return Err(invalid(
            &cfg_path,
            format!("peft_type {} is not LORA", cfg["peft_type"]),
        ));
    }
    if cfg.get("use_dora").and_then(|v| v.as_bool()) == Some(true) {
        return Err(invalid(
            &cfg_path,
            "DoRA adapters (use_dora) are not supported".into(),
        ));
    }
    let saved = cfg.get("modules_to_save").and_then(|m| m.as_array());
    if saved.is_some_and(|a| !a.is_empty()) {
        return Err(invalid(
            &cfg_path,
            "modules_to_save (whole replaced modules) are not supported".into(),
        ));
    }
    let alpha = Alpha::Peft {
        alpha: cfg
            .get("lora_alpha")
            .and_then(|v| v.as_f64())
            .unwrap_or(8.0) as f32,
        rs: cfg.get("use_rslora").and_then(|v| v.as_bool()) == Some(true),
    };
    let st_path = dir.join("adapter_model.safetensors");
    let file = cyb_format::SafetensorsFile::open(&st_path)?;
    let names = file.tensor_infos().iter().map(|i| i.name.as_str());
    let raw = collect_pairs(
        &st_path,
        names,
        [".lora_A.weight", ".lora_B.weight"],
        |base| Some((peft_key(base)?, base.to_string())),
        |name| file.tensor(name),
    )?;
    Ok((raw, alpha))
}

/// (layer, target) of `…layers.N.self_attn.q_proj` (or `mlp.down_proj`, …).
fn peft_key(base: &str) -> Option<(usize, LoraTarget)> {
    let at = base.find("layers.")?;
    let rest = &base[at + "layers.".len()..];
    let (layer, rest) = rest.split_once('.')?;
    let module = rest.rsplit('.').next()?;
    Some((layer.parse().ok()?, LoraTarget::parse(module)?))
}

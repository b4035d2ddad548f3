//! The vision-language families and their connectors:
//! - LLaVA-1.5 (`model_type` llava): the CLIP tower's states after a chosen block
//!   (`vision_feature_layer`, Hugging Face's `hidden_states` index, −2 by default), without the
//!   class token (`vision_feature_select_strategy` "default") or with it ("full"), through
//!   `linear_2(gelu(linear_1(x)))`;
//! - Idefics3 / SmolVLM (`model_type` idefics3, smolvlm): a SigLIP-style tower's normalized
//!   states on each tile, pixel shuffle by `scale_factor` (each `s × s` block of patches becomes
//!   one token of `s²` times the width), one projection without bias.
//!
//! One embedding per kept token replaces one image placeholder token of the prompt.

use super::{has_prefix, rename, with_defaults};
use crate::llama::LlamaModel;
use crate::step::{run_step, Linear, Step};
use crate::vit::{VisionArch, VisionModel};
use cyb_backend::Dispatcher;
use cyb_format::ModelFile;
use cyb_ops::{GeluApprox, LinearAct};
use cyb_tensor::{Error, Result, Tensor};
use serde_json::{json, Value};
use std::sync::Arc;

/// Where each part's tensors live in the checkpoint (transformers 5 writes the first of each
/// pair of layouts, the published LLaVA checkpoints the second) and the names its own family
/// reads them under.
const VISION: &[(&str, &str)] = &[
    ("model.vision_tower.vision_model.", "vision_model."),
    ("model.vision_tower.", "vision_model."),
    ("vision_tower.vision_model.", "vision_model."),
    ("vision_tower.", "vision_model."),
];
const TEXT: &[(&str, &str)] = &[
    ("model.language_model.", "model."),
    ("language_model.model.", "model."),
    ("language_model.lm_head.", "lm_head."),
    ("lm_head.", "lm_head."),
];
const PROJECTOR: &[&str] = &["model.multi_modal_projector.", "multi_modal_projector."];
const IDEFICS3_VISION: &[(&str, &str)] = &[("model.vision_model.", "vision_model.")];
const IDEFICS3_TEXT: &[(&str, &str)] = &[("model.text_model.", "model."), ("lm_head.", "lm_head.")];
const IDEFICS3_PROJ: &str = "model.connector.modality_projection.proj.weight";

/// Which family, with what its connector needs.
#[derive(Clone, Debug, PartialEq)]
pub enum VlmFamily {
    Llava {
        /// Tower blocks run (Hugging Face's `hidden_states` index of the features).
        feature_blocks: usize,
        /// Keep the class token's feature ("full") or drop it ("default").
        keep_class_token: bool,
    },
    Idefics3 {
        /// Pixel shuffle: each `s × s` block of patch states becomes one token.
        scale_factor: usize,
    },
}

/// What a vision-language checkpoint's `config.json` says about joining its parts.
#[derive(Clone, Debug, PartialEq)]
pub struct VlmConfig {
    pub architecture: String,
    /// The placeholder token each image feature replaces.
    pub image_token: u32,
    pub family: VlmFamily,
}

impl VlmConfig {
    /// True for a Hugging Face directory whose `model_type` is a vision-language family.
    pub fn is_vlm_file(file: &ModelFile) -> bool {
        let ModelFile::HuggingFace(h) = file else {
            return false;
        };
        let ty = h.config_json().get("model_type").and_then(Value::as_str);
        matches!(ty, Some("llava" | "idefics3" | "smolvlm"))
    }
}

fn invalid(field: &str, reason: impl Into<String>) -> Error {
    Error::InvalidConfig {
        field: field.into(),
        reason: reason.into(),
    }
}

/// transformers' defaults for the fields a LLaVA config leaves out of its parts.
fn text_defaults(model_type: &str) -> Vec<(&'static str, Value)> {
    let mut d = vec![
        ("hidden_size", json!(4096)),
        ("num_hidden_layers", json!(32)),
        ("num_attention_heads", json!(32)),
        ("vocab_size", json!(32000)),
        ("rms_norm_eps", json!(1e-6)),
    ];
    match model_type {
        "mistral" => d.extend([
            ("intermediate_size", json!(14336)),
            ("num_key_value_heads", json!(8)),
            ("max_position_embeddings", json!(32768)),
        ]),
        _ => d.extend([
            ("intermediate_size", json!(11008)),
            ("max_position_embeddings", json!(2048)),
        ]),
    }
    d
}

fn vision_defaults() -> Vec<(&'static str, Value)> {
    vec![
        ("model_type", json!("clip_vision_model")),
        ("hidden_size", json!(768)),
        ("intermediate_size", json!(3072)),
        ("num_hidden_layers", json!(12)),
        ("num_attention_heads", json!(12)),
        ("image_size", json!(224)),
        ("patch_size", json!(32)),
    ]
}

/// What [`VlmModel::load`] gives: the image side, the decoder, and the decoder's part of the
/// checkpoint (its config and tokenizer are read from it).
pub struct VlmParts {
    pub image: VlmModel,
    pub text: LlamaModel,
    pub text_file: ModelFile,
}

/// A loaded vision-language model's image side: the tower and the connector. The decoder is
/// loaded beside it as a [`LlamaModel`].
pub struct VlmModel {
    config: VlmConfig,
    vision: VisionModel,
    /// LLaVA's two layers, or Idefics3's one projection.
    projector: Vec<Linear>,
    text_hidden: usize,
    dispatcher: Arc<Dispatcher>,
}

impl std::fmt::Debug for VlmModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VlmModel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl VlmModel {
    /// The image side and the decoder of a Hugging Face LLaVA or Idefics3/SmolVLM directory.
    pub fn load(file: &ModelFile, dispatcher: Arc<Dispatcher>) -> Result<VlmParts> {
        let ModelFile::HuggingFace(hf) = file else {
            return Err(Error::invalid(
                "load",
                format!(
                    "{}: vision-language models load from Hugging Face directories",
                    file.path().display()
                ),
            ));
        };
        let c = hf.config_json();
        let ty = c.get("model_type").and_then(Value::as_str).unwrap_or("");
        let idefics3 = match ty {
            "llava" => false,
            "idefics3" | "smolvlm" => true,
            other => {
                return Err(invalid(
                    "model_type",
                    format!(
                        "{other} is not a supported vision-language model (supported: llava, \
                         idefics3, smolvlm)"
                    ),
                ))
            }
        };
        let architecture = c
            .get("architectures")
            .and_then(|a| a.get(0))
            .and_then(Value::as_str)
            .unwrap_or(ty)
            .to_string();
        let part = |k: &str| {
            c.get(k)
                .filter(|v| v.is_object())
                .ok_or_else(|| invalid(k, "missing from config.json"))
        };
        // Each part under the names and model type its own family reads.
        let (vc, vision_names, text_names) = if idefics3 {
            let mut vc = part("vision_config")?.clone();
            vc["model_type"] = json!("siglip_vision_model");
            (vc, IDEFICS3_VISION, IDEFICS3_TEXT)
        } else {
            let vc = with_defaults(part("vision_config")?, &vision_defaults());
            let vty = vc.get("model_type").and_then(Value::as_str).unwrap_or("");
            if vty != "clip_vision_model" {
                return Err(invalid(
                    "vision_config.model_type",
                    format!("{vty}: LLaVA's tower is read as clip_vision_model only"),
                ));
            }
            (vc, VISION, TEXT)
        };
        let tc = part("text_config")?;
        let tty = tc
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("llama");
        let tc = with_defaults(tc, &text_defaults(tty));
        for (what, prefixes) in [
            ("vision tower", vision_names),
            ("language model", text_names),
        ] {
            if !has_prefix(hf, prefixes) {
                return Err(Error::MissingTensor {
                    name: format!("{}*", prefixes[0].0),
                    required_by: format!("{architecture} {what} in {}", hf.dir().display()),
                });
            }
        }
        let vision_file = ModelFile::HuggingFace(hf.part(vc, &|n| rename(n, vision_names))?);
        let vision = VisionModel::load(&vision_file, dispatcher.clone())?;
        let want_arch = if idefics3 {
            VisionArch::Siglip
        } else {
            VisionArch::Clip
        };
        if vision.config().arch != want_arch {
            return Err(invalid("vision_config", "the tower is not of this family"));
        }
        let text_file = ModelFile::HuggingFace(hf.part(tc, &|n| rename(n, text_names))?);
        let text = LlamaModel::load(&text_file, dispatcher.clone())?;
        let default_token = if idefics3 { 128257 } else { 32000 };
        let image_token = ["image_token_index", "image_token_id"]
            .iter()
            .find_map(|k| c.get(*k).and_then(Value::as_u64))
            .unwrap_or(default_token);
        let image_token = u32::try_from(image_token)
            .map_err(|_| invalid("image_token_index", format!("{image_token}")))?;
        let vocab = text.config().vocab_size;
        if image_token as usize >= vocab {
            return Err(invalid(
                "image_token_index",
                format!("{image_token} is outside the vocabulary of {vocab}"),
            ));
        }
        let vh = vision.config().tower.hidden;
        let th = text.config().hidden_size;
        let (family, projector) = if idefics3 {
            let scale_factor = idefics3_scale(c, vision.config())?;
            let w = hf.tensor(IDEFICS3_PROJ).map_err(|_| Error::MissingTensor {
                name: IDEFICS3_PROJ.into(),
                required_by: format!("the {architecture} connector in {}", hf.dir().display()),
            })?;
            let want = [th, vh * scale_factor * scale_factor];
            if w.dims() != want {
                return Err(Error::shape(
                    format!("tensor {IDEFICS3_PROJ}"),
                    &want,
                    w.dims(),
                ));
            }
            (
                VlmFamily::Idefics3 { scale_factor },
                vec![Linear { w, b: None }],
            )
        } else {
            let family = llava_family(c, vision.config().tower.layers)?;
            let linear = |k: &str, out: usize, inp: usize| -> Result<Linear> {
                let w = projector_tensor(hf, file, &format!("{k}.weight"), &[out, inp])?;
                let b = match PROJECTOR
                    .iter()
                    .any(|p| hf.has_tensor(&format!("{p}{k}.bias")))
                {
                    true => Some(projector_tensor(hf, file, &format!("{k}.bias"), &[out])?),
                    false => None,
                };
                Ok(Linear { w, b })
            };
            let projector = vec![linear("linear_1", th, vh)?, linear("linear_2", th, th)?];
            (family, projector)
        };
        let config = VlmConfig {
            architecture,
            image_token,
            family,
        };
        let model = VlmModel {
            config,
            vision,
            projector,
            text_hidden: th,
            dispatcher,
        };
        Ok(VlmParts {
            image: model,
            text,
            text_file,
        })
    }

    pub fn config(&self) -> &VlmConfig {
        &self.config
    }

    /// The square image (or tile) size the tower takes.
    pub fn image_size(&self) -> usize {
        self.vision.config().image_size
    }

    /// Placeholder tokens one image (one tile, for Idefics3) becomes.
    pub fn tokens_per_image(&self) -> usize {
        let v = self.vision.config();
        let n = v.image_size;
        match self.config.family {
            VlmFamily::Llava {
                keep_class_token, ..
            } => v.tokens(n, n) - usize::from(!keep_class_token),
            VlmFamily::Idefics3 { scale_factor } => v.tokens(n, n) / (scale_factor * scale_factor),
        }
    }

    /// Embeddings `[tokens_per_image, text hidden]` for each of `images` preprocessed images
    /// (tiles, for Idefics3; `3 × size × size` floats each, channels first, concatenated in
    /// `pixels`).
    pub fn encode(&self, pixels: &[f32], images: usize) -> Result<Vec<Tensor>> {
        let size = self.image_size();
        let v = self.vision.config();
        let tokens = v.tokens(size, size);
        let keep = self.tokens_per_image();
        let hidden = v.tower.hidden;
        let out = run_step(&self.dispatcher, |step: &mut Step<'_>| {
            match self.config.family {
                VlmFamily::Llava {
                    feature_blocks,
                    keep_class_token,
                } => {
                    let mut x = self.vision.features(
                        step,
                        pixels,
                        images,
                        size,
                        size,
                        feature_blocks,
                        false,
                    )?;
                    if !keep_class_token {
                        let x3 = step.reshape(&x, &[images, tokens, hidden])?;
                        let kept = step.run(
                            cyb_ops::Op::Slice {
                                axis: 1,
                                start: 1,
                                end: tokens as isize,
                                step: 1,
                            },
                            &[&x3],
                        )?;
                        x = step.reshape(&kept, &[images * keep, hidden])?;
                    }
                    let gelu = LinearAct::Gelu(GeluApprox::Erf);
                    let y = step.linear_act(&x, &self.projector[0], gelu)?;
                    step.linear(&y, &self.projector[1])
                }
                VlmFamily::Idefics3 { scale_factor: s } => {
                    let layers = v.tower.layers;
                    let x = self
                        .vision
                        .features(step, pixels, images, size, size, layers, true)?;
                    // Pixel shuffle: [n, h, w, d] → [n, h/s, w/s, d·s²], each new token the
                    // s × s block's states, row by row.
                    let side = size / v.patch;
                    let x = step.reshape(&x, &[images, side, side / s, hidden * s])?;
                    let x = step.permute(&x, &[0, 2, 1, 3])?;
                    let x = step.reshape(&x, &[images, side / s, side / s, hidden * s * s])?;
                    let x = step.permute(&x, &[0, 2, 1, 3])?;
                    let x = step.reshape(&x, &[images * keep, hidden * s * s])?;
                    step.linear(&x, &self.projector[0])
                }
            }
        })?;
        let all = out.to_f32_vec()?;
        let per = keep * self.text_hidden;
        all.chunks_exact(per)
            .map(|c| Tensor::from_f32(&[keep, self.text_hidden], c))
            .collect()
    }
}

/// LLaVA's feature layer and strategy from `config.json`.
fn llava_family(c: &Value, layers: usize) -> Result<VlmFamily> {
    let feature_blocks = match c.get("vision_feature_layer").unwrap_or(&json!(-2)) {
        Value::Number(n) => n
            .as_i64()
            .and_then(|i| {
                let i = if i < 0 { layers as i64 + 1 + i } else { i };
                usize::try_from(i).ok().filter(|&i| i <= layers)
            })
            .ok_or_else(|| {
                invalid(
                    "vision_feature_layer",
                    format!("{n} is not a hidden state of a {layers}-block tower"),
                )
            })?,
        other => {
            return Err(invalid(
                "vision_feature_layer",
                format!("{other}: features from several layers are not supported"),
            ))
        }
    };
    let keep_class_token = match c
        .get("vision_feature_select_strategy")
        .and_then(Value::as_str)
        .unwrap_or("default")
    {
        "default" => false,
        "full" => true,
        other => {
            return Err(invalid(
                "vision_feature_select_strategy",
                format!("{other} (expected default or full)"),
            ))
        }
    };
    match c.get("projector_hidden_act").and_then(Value::as_str) {
        None | Some("gelu") => {}
        Some(other) => {
            return Err(invalid(
                "projector_hidden_act",
                format!("{other} is not supported (gelu)"),
            ))
        }
    }
    Ok(VlmFamily::Llava {
        feature_blocks,
        keep_class_token,
    })
}

/// Idefics3's pixel-shuffle factor, which must divide the tower's patch grid.
fn idefics3_scale(c: &Value, v: &crate::VisionConfig) -> Result<usize> {
    let s = c.get("scale_factor").and_then(Value::as_u64).unwrap_or(2);
    let side = v.image_size / v.patch;
    match usize::try_from(s) {
        Ok(s) if s > 0 && side.is_multiple_of(s) => Ok(s),
        _ => Err(invalid(
            "scale_factor",
            format!("{s} does not divide the tower's {side} × {side} patches"),
        )),
    }
}

/// The projector's tensor `name` under either layout, checked against `dims`.
fn projector_tensor(
    hf: &cyb_format::hf::HfModel,
    file: &ModelFile,
    name: &str,
    dims: &[usize],
) -> Result<Tensor> {
    let Some(full) = PROJECTOR
        .iter()
        .map(|p| format!("{p}{name}"))
        .find(|n| hf.has_tensor(n))
    else {
        return Err(Error::MissingTensor {
            name: format!("{}{name}", PROJECTOR[1]),
            required_by: format!("the LLaVA projector in {}", file.path().display()),
        });
    };
    let t = hf.tensor(&full)?;
    if t.dims() != dims {
        return Err(Error::shape(format!("tensor {full}"), dims, t.dims()));
    }
    Ok(t)
}

//! Vision-language models: a ViTStyle vision tower, a connector that turns its states into
//! embeddings of the text model's width, and a LlamaStyle decoder that reads them in place of
//! the image placeholder tokens of the prompt.
//!
//! - `model`: LLaVA-1.5 (CLIP tower, a chosen hidden layer, two-layer MLP projector) and
//!   Idefics3 / SmolVLM (SigLIP-style tower on tiles, pixel shuffle, one projection).
//!
//! A composite Hugging Face checkpoint is split into its parts with [`HfModel::part`]: the
//! tower loads as the ViTStyle model its `vision_config` describes and the decoder as the
//! LlamaStyle model of its `text_config`, each under the names its own family reads.

mod model;

pub use model::{VlmConfig, VlmFamily, VlmModel, VlmParts};

use cyb_format::hf::HfModel;
use serde_json::Value;

/// The first of `prefixes` (from, to) that `name` starts with, applied.
pub(crate) fn rename(name: &str, prefixes: &[(&str, &str)]) -> Option<String> {
    prefixes
        .iter()
        .find_map(|(from, to)| name.strip_prefix(from).map(|rest| format!("{to}{rest}")))
}

/// `part` with every field of `defaults` it lacks (a composite config lists only the fields
/// of its parts that differ from their family's defaults).
pub(crate) fn with_defaults(part: &Value, defaults: &[(&str, Value)]) -> Value {
    let mut out = part.clone();
    if let Value::Object(map) = &mut out {
        for (k, v) in defaults {
            if map.get(*k).is_none_or(Value::is_null) {
                map.insert((*k).to_string(), v.clone());
            }
        }
    }
    out
}

/// True when `hf` names a tensor under one of `prefixes`.
pub(crate) fn has_prefix(hf: &HfModel, prefixes: &[(&str, &str)]) -> bool {
    hf.tensor_infos()
        .any(|(t, _)| prefixes.iter().any(|(p, _)| t.name.starts_with(p)))
}

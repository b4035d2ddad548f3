//! The normalisations: `layer.rs` (`Op::LayerNorm`, `Op::AddLayerNorm`, encoders) and `rms.rs`
//! (`Op::RmsNorm`, `Op::AddRmsNorm`, decoders), each with its fused residual add.

mod layer;
mod rms;

pub(crate) use layer::{add_layer_norm, layer_norm};
pub(crate) use rms::{add_rms_norm, rms_norm};

//! The ViTStyle family: image encoders made of a patch embedding and pre-LN transformer blocks —
//! ViT (with its classification head), CLIP (vision and text towers, projections, logit
//! scale), SigLIP and fixed-resolution SigLIP 2 (sigmoid pairs, the attention-pooling head),
//! DINOv2 (layer scale, register tokens, position embeddings interpolated to the image). One
//! block, whose differences are switches of [`VisionConfig`].
//!
//! ```text
//! x = [cls] + patches(image) (+ registers) + positions      (CLIP: then LayerNorm)
//! per block:  x = x + ls1 · attention(LN1(x))
//!             x = x + ls2 · mlp(LN2(x))
//! ```

mod config;
mod model;
mod weights;

pub use config::{TextConfig, TowerConfig, VisionArch, VisionConfig};
pub use model::{VisionModel, VisionOutput};

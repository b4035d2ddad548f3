//! Vision tasks on images: object detection with YOLO exports ([`detect`]), classification and
//! embeddings with the ViTStyle family ([`image_model`]), and the image
//! input shared by every vision entry point (files and uploads decoded by cyb-media, with its
//! errors as the runtime's).

pub mod detect;
pub mod image_model;
pub(crate) mod vlm;

use cyb_media::image::ImageError;
pub use cyb_media::image::RgbImage;
use cyb_tensor::{Error, Result};
use std::path::Path;

pub use detect::{DetectOptions, Detection, Detector};
pub use image_model::{ImageModel, DEFAULT_TEMPLATE};
pub use vlm::MAX_IMAGES;

/// The runtime's error for an image that cannot be read or preprocessed.
pub fn image_error(e: ImageError) -> Error {
    Error::InvalidArgument {
        op: "image".into(),
        reason: e.to_string(),
    }
}

/// Decodes an image file (PNG, JPEG, WebP, BMP, GIF).
pub fn load_image(path: &Path) -> Result<RgbImage> {
    cyb_media::image::decode_image_file(path).map_err(image_error)
}

/// Decodes an uploaded image; `name` names it in errors.
pub fn decode_image(bytes: &[u8], name: &str) -> Result<RgbImage> {
    cyb_media::image::decode_image_bytes(bytes, name).map_err(image_error)
}

/// True when a Hugging Face `model_type` is one of the ViTStyle family's.
pub fn is_vision_model_type(model_type: &str) -> bool {
    cyb_models::VisionConfig::is_vision_type(model_type)
}

//! cyb-format: model file readers.
//!
//! GGUF (llama.cpp) and Hugging Face directories (config.json + safetensors), each parsed into
//! tensor tables whose tensors borrow the mapped file in place, plus one normalized
//! [`ModelConfig`]. [`open`] picks the reader from what the path holds.
//!
//! This crate must not know about ops, backends or how a model is run.

mod cursor;
pub mod gguf;
mod mapping;
mod metadata;

pub use gguf::{GgufFile, GgufTensorInfo};
pub use mapping::{map_file, SharedBytes};
pub use metadata::MetaValue;

//! cyb-format: model file readers.
//!
//! GGUF (llama.cpp), Hugging Face directories (config.json + safetensors), CTranslate2 Whisper
//! directories (model.bin, opened as the Hugging Face model they were converted from),
//! whisper.cpp ggml files (likewise) and soma
//! directories (config.toml + safetensors, opened as the Hugging Face model they describe),
//! each parsed into tensor tables whose tensors borrow the mapped file in place, plus one
//! normalized [`ModelConfig`]. [`open`] picks the reader from what the path holds.
//!
//! ONNX files are imported into a `cyb_graph::Graph` ([`onnx`]), which is how this crate knows
//! about ops; it must not know about backends or how a model is run.

mod byte_level;
mod config;
pub mod ctranslate2;
mod cursor;
pub mod gguf;
pub mod hf;
mod mapping;
mod metadata;
pub mod model_container;
mod model_file;
pub mod npy;
pub mod onnx;
pub mod pytorch;
pub mod safetensors;
pub mod soma;
mod whisper_dims;
pub mod whisper_ggml;

pub use byte_level::byte_level_chars;
pub use config::{ModelConfig, RopeScaling};
pub use ctranslate2::{Ct2File, Ct2Variable};
pub use gguf::{GgmlType, GgufFile, GgufTensorInfo};
pub use hf::HfModel;
pub use mapping::{map_file, SharedBytes};
pub use metadata::{summarize_json, MetaArray, MetaValue};
pub use model_file::{open, ModelFile, TensorEntry};
pub use safetensors::{SafetensorsFile, SafetensorsTensorInfo};

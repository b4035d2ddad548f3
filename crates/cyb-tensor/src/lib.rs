//! cyb-tensor: the data model every other crate shares.
//!
//! `DType` (floats, integers and the ggml block-quantized formats with byte layouts identical to
//! ggml's), `Shape`, `Tensor` and its `Storage` (an owned host buffer, a slice of a shared
//! mapping such as a GGUF mmap, or a buffer that lives on a backend device), the reference
//! dequantize/quantize of every block format, and the structured `Error` of the execution
//! contract.
//!
//! This crate must not know about ops, backends, file formats or models.

mod dtype;
mod error;
pub mod memory;
pub mod quant;
mod shape;
mod storage;
mod tensor;

pub use dtype::DType;
pub use error::{Error, Result};
pub use shape::Shape;
pub use storage::{AlignedBuf, DeviceBuffer, Storage};
pub use tensor::{decode_f32_vec, Tensor, TensorInfo};

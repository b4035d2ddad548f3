//! cyb-backend: the `Backend` trait, the `Dispatcher` that picks a backend per op and falls back
//! along a chain that always ends at the CPU reference, and the `FrameAllocator` for per-step
//! activation buffers.
//!
//! This crate decides *where* an op runs; it must not know about models or file formats.

mod backend;
mod dispatcher;
mod frame;
mod reference;
mod registry;

pub use backend::{Backend, DeviceMemory, ExecContext, Recording};
pub use dispatcher::{DispatchLog, DispatchRecord, Dispatcher};
pub use frame::{BufferUsage, FrameAllocator, FrameStats};
pub use reference::ReferenceBackend;
pub use registry::{
    available_backends, create_backend, is_registered, register_backend, BackendDescription,
    BackendFactory,
};

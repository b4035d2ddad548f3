//! cyb-ops: the `Op` vocabulary and the CPU reference implementation of every op.
//!
//! The doc comment of each `Op` variant is its math spec; `reference::execute` is the
//! executable, portable form (plain Rust plus rayon; no `std::arch`, no `target_feature`) and
//! the oracle every backend is tested against. Threads split outputs, never reductions, so
//! results are identical for any thread count.
//!
//! This crate must not know about backends, file formats or models.

mod geometry;
mod op;
mod op_params;
pub mod reference;
mod shape_rule;
mod shape_rule_nd;

pub use geometry::{slice_steps, window_geometry, WindowGeometry};
pub use op::{GeluApprox, LinearAct, Op, RopeLayout, RopeScaling, SdpaLayout};
pub use op_params::{
    dtype_name, BinaryFn, PadMode, PadSpec, PoolKind, ReduceFn, ScatterReduction, UnaryFn,
};
pub use shape_rule::{broadcast_dims, check_outputs_fit, output_infos, resolve_axis, slice_range};

//! The register tile of the packed float GEMM: its shape (`MR` activation rows × `NR` outputs)
//! and the types of its kernels, shared by the driver (`mod.rs`), the x86-64 kernels (`x86.rs`)
//! and attention's tiled scores (`attention/mod.rs`).
//!
//! A leaf: it uses nothing of this crate.

/// Outputs per panel (two 16-lane vectors).
pub const NR: usize = 32;
/// Activation rows per register tile.
pub const MR: usize = 12;

/// `MR × NR` results of one register tile.
pub type TileOut = [[f32; NR]; MR];

/// One register tile: `nr` activation rows (`rows`, `lda` apart) times `panel` over `k` values
/// (a block of the weight's `k`: `panel` and `rows` start at its first value), into `nr` rows
/// of `NR` values at `out`, `ldo` apart, which hold the sums of the blocks before it unless
/// `first`; `bias`, when given, is added before the store (at the block that ends `k`).
pub type Tile = unsafe fn(
    panel: &[u8],
    rows: &[f32],
    lda: usize,
    k: usize,
    nr: usize,
    out: *mut f32,
    ldo: usize,
    first: bool,
    bias: Option<&[f32; NR]>,
);

/// One activation row times one whole panel: its `NR` results into `out`, plus `bias` when
/// given.
pub type RowTile =
    unsafe fn(panel: &[u8], row: &[f32], k: usize, out: &mut [f32; NR], bias: Option<&[f32; NR]>);

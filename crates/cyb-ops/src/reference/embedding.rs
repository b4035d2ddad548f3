//! Row lookup in an embedding table of any dtype.

use super::{decode_row, host};
use cyb_tensor::{Error, Result, Tensor};
use rayon::prelude::*;

/// `y[ids.., :] = table[id, :]`, decoding one table row per id.
pub(super) fn embedding(table: &Tensor, ids_t: &Tensor) -> Result<Tensor> {
    let ids = ids_t.to_i64_vec()?;
    let (vocab, dim) = (table.dims()[0], table.dims()[1]);
    let dtype = table.dtype();
    let row_bytes = dtype.bytes_for(dim).ok_or_else(|| {
        Error::invalid(
            "embedding",
            format!("rows of {dim} are not whole {dtype} blocks"),
        )
    })?;
    if let Some(bad) = ids.iter().find(|&&id| id < 0 || id as u64 >= vocab as u64) {
        return Err(Error::invalid(
            "embedding",
            format!("id {bad} is outside the table's 0..{vocab}"),
        ));
    }
    let bytes = host("embedding", table)?;
    let mut y = vec![0f32; ids.len() * dim];
    if dim > 0 {
        y.par_chunks_mut(dim)
            .zip(ids.par_iter())
            .try_for_each(|(out, &id)| {
                let start = id as usize * row_bytes;
                decode_row(dtype, &bytes[start..start + row_bytes], out)
            })?;
    }
    let mut dims = ids_t.dims().to_vec();
    dims.push(dim);
    Tensor::from_f32(&dims, &y)
}

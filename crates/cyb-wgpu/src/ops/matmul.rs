//! Matrix products with weights of any supported format, and embedding lookups (the same
//! dequantizing readers, `shaders/dequant.wgsl`).

use crate::backend::{device_view, gpu_buf, State, WgpuBackend};
use crate::kernels::{weight_format, Family, KernelKey};
use cyb_tensor::{DType, Error, Result, Tensor, TensorInfo};

/// From this many activation rows on, the tiled kernel is used.
const TILED_MIN_ROWS: usize = 16;

fn fits_binding(gpu: &WgpuBackend, w: &TensorInfo) -> bool {
    w.dtype
        .bytes_for(w.shape.numel())
        .is_some_and(|b| (b as u64) <= gpu.ctx.limits.max_storage_buffer_binding_size)
}

/// Whether `mv` (matmul.wgsl, matvec_fast.wgsl) reads rows of `k` values of `dtype`: block
/// formats always (a row is whole blocks), F16 and F32 when rows are whole groups of four
/// values.
fn whole_words(dtype: DType, k: usize) -> bool {
    match dtype {
        DType::F32 | DType::F16 => k.is_multiple_of(4),
        _ => true,
    }
}

/// The fewest lanes per weight row the decode matvec takes (see `mv_lanes`), also for
/// 256-value blocks: their 32 units of eight values then take one lane each
/// (matvec_fast.wgsl). The 128256-row Q6_K output projection of the 1B shape took 166 µs with
/// 32 lanes against 183 µs with 64 on the H200.
pub(crate) const MV_LEAST_LANES: u32 = 32;

/// Units per Q4_K / Q5_K block in the decode matvec: a lane takes 32 values of a block
/// (matvec_fast.wgsl's `kdot`) and decodes the block's packed scales once for them.
pub(crate) const K_UNITS: u32 = 8;

/// Weight values one lane of the decode matvec takes per step: four for F32/F16, one unit of a
/// block for the quantized formats (matvec_fast.wgsl).
fn values_per_lane_step(dtype: DType) -> usize {
    match weight_format(dtype) {
        Some((_, 1, _)) => 4,
        Some((7 | 8, block, _)) => block as usize / K_UNITS as usize,
        _ => 8,
    }
}

/// Lanes per weight row of the decode matvec `mv` for `n` rows of `k` values of `dtype`:
/// enough that the launch has about 2^18 threads (a large GPU full; with fewer, each lane
/// waits on its loads alone), but no more than a row has values for one step of every lane
/// (`values_per_lane_step`), and 32 .. 256.
pub(crate) fn mv_lanes(n: usize, k: usize, dtype: DType) -> u32 {
    let least = MV_LEAST_LANES as usize;
    let per_lane = values_per_lane_step(dtype);
    let mut lanes = ((1usize << 18) / n.max(1))
        .next_power_of_two()
        .clamp(least, 256);
    while lanes > least && lanes * per_lane > k {
        lanes /= 2;
    }
    lanes as u32
}

/// From this many weight rows on, a lane of the Q8_0 and Q4_0 decode matvec computes two rows
/// (matvec_fast.wgsl's `vdotm`: one load of each activation serves both): an output projection
/// over a vocabulary. On the H200 the 1B shape's Q8_0 output projection (128256 rows, two
/// launches) took 63.6 µs per launch against 70.2 with one row per lane, a Q4_0 one 97.5 against
/// 104.6; Q6_K's did not gain (158.1 against 157.6), and the layers' matvecs (≤ 8192 rows per
/// product) were slower with two, having fewer threads to spread.
pub(crate) const MV_TWO_ROWS_MIN: usize = 65536;

/// Weight rows per lane of the decode matvec `mv` for `n` rows of `dtype` (1 or 2).
pub(crate) fn mv_rows_per_lane(n: usize, dtype: DType) -> u32 {
    if matches!(dtype, DType::Q8_0 | DType::Q4_0) && n >= MV_TWO_ROWS_MIN {
        2
    } else {
        1
    }
}

/// From this many weight rows on, a decode matvec with Q8_0, Q4_0 or Q6_K weights first
/// quantizes its activation row to 16-bit levels (`qact`) and then takes integer dot products
/// (`mvq`, matvec_q16.wgsl): an output projection over a vocabulary.
pub(crate) const MVQ_MIN_ROWS: usize = 65536;

/// Whether matvec_q16.wgsl reads `dtype`.
fn q16_format(dtype: DType) -> bool {
    matches!(dtype, DType::Q8_0 | DType::Q4_0 | DType::Q6_K)
}

/// `a [.., m, k]` F32 times `w [n, k]ᵀ` with `w` in a format `dequant.wgsl` reads.
pub(crate) fn supports(gpu: &WgpuBackend, rhs_transposed: bool, inputs: &[TensorInfo]) -> bool {
    let [a, w] = inputs else {
        return false;
    };
    rhs_transposed
        && a.dtype == DType::F32
        && a.shape.rank() >= 2
        && w.shape.rank() == 2
        && weight_format(w.dtype).is_some()
        && fits_binding(gpu, w)
}

pub(crate) fn matmul(
    gpu: &WgpuBackend,
    st: &mut State,
    inputs: &[Tensor],
    out: &TensorInfo,
) -> Result<Tensor> {
    let (a, w) = (&inputs[0], &inputs[1]);
    let (n, k) = (w.dims()[0], w.dims()[1]);
    let m = a.numel().checked_div(k).unwrap_or(0);
    let (_, block, _) = weight_format(w.dtype()).unwrap_or((0, 1, 4));
    let row_bytes = w
        .dtype()
        .bytes_for(k)
        .ok_or_else(|| Error::invalid("matmul", format!("{} rows of {k}", w.dtype())))?;
    let (y, ybuf) = gpu.output(st, out.shape.dims(), DType::F32)?;
    let (abuf, wbuf) = (gpu_buf(a)?, gpu_buf(w)?);
    if m == 1
        && q16_format(w.dtype())
        && n >= gpu.mvq_min_rows.load(std::sync::atomic::Ordering::Relaxed)
    {
        mvq(gpu, st, [&abuf, &wbuf, &ybuf], w.dtype(), n, k, row_bytes)?;
        return Ok(y);
    }
    // Many rows (prefill): 64 × 64 output tiles, on cooperative matrices where the device has
    // them and the weights are not F32 (whose products stay f32 throughout); one (decode):
    // `mv_lanes` lanes per weight row; a few: one workgroup per weight row.
    let coop = m >= TILED_MIN_ROWS && w.dtype() != DType::F32 && gpu.coop_matmul();
    let (family, entry, rows, groups) = if coop {
        (
            Family::MatMulCoop,
            "coop",
            1,
            n.div_ceil(64) * m.div_ceil(64),
        )
    } else if m >= TILED_MIN_ROWS {
        (Family::MatMul, "tiled", 1, n.div_ceil(64) * m.div_ceil(64))
    } else if m == 1 && whole_words(w.dtype(), k) {
        let mr = mv_rows_per_lane(n, w.dtype());
        let lanes = mv_lanes(n.div_ceil(mr as usize), k, w.dtype());
        let groups = n.div_ceil(256 / lanes as usize * mr as usize);
        (Family::MatMul, "mv", lanes | (mr << 16), groups)
    } else {
        let rows = if m == 1 { 1 } else { 4 };
        (Family::MatMul, "main", rows, n * m.div_ceil(rows as usize))
    };
    let key = KernelKey {
        family,
        entry,
        weights: Some(w.dtype()),
        rows,
    };
    let params = [
        m as u32,
        n as u32,
        k as u32,
        k as u32 / block,
        row_bytes as u32,
        groups as u32,
    ];
    gpu.dispatch(st, &key, &params, &[&abuf, &wbuf, &ybuf], groups as u32)?;
    Ok(y)
}

/// The decode matvec on integer dot products: `qact` quantizes the row `a` (k values) into a
/// frame buffer, `mvq` multiplies it by the `n` rows of `w`.
fn mvq(
    gpu: &WgpuBackend,
    st: &mut State,
    [abuf, wbuf, ybuf]: [&crate::memory::GpuBuf; 3],
    dtype: DType,
    n: usize,
    k: usize,
    row_bytes: usize,
) -> Result<()> {
    let block = dtype.block_elems();
    // Two bytes per level, then an f32 scale per block (matvec_q16.wgsl), whose count is
    // rounded up to even: the scales are read as pairs, and a pair half past the buffer
    // would be an out-of-bounds read.
    let scales = (k / block).next_multiple_of(2);
    let qbuf = gpu.frame_out(st, 2 * k + 4 * scales)?;
    let qgroups = k.div_ceil(2048);
    let key = |entry, rows| KernelKey {
        family: Family::MatMul,
        entry,
        weights: Some(dtype),
        rows,
    };
    gpu.dispatch(
        st,
        &key("qact", 1),
        &[k as u32, qgroups as u32],
        &[abuf, wbuf, &qbuf],
        qgroups as u32,
    )?;
    let lanes = mv_lanes(n, k, dtype);
    let groups = n.div_ceil(256 / lanes as usize);
    let params = [
        1,
        n as u32,
        k as u32,
        (k / block) as u32,
        row_bytes as u32,
        groups as u32,
    ];
    gpu.dispatch(
        st,
        &key("mvq", lanes),
        &params,
        &[&qbuf, wbuf, ybuf],
        groups as u32,
    )
}

/// A `[vocab, dim]` table in a readable format and I32/I64 ids.
pub(crate) fn supports_embedding(gpu: &WgpuBackend, inputs: &[TensorInfo]) -> bool {
    let [table, ids] = inputs else {
        return false;
    };
    table.shape.rank() == 2
        && weight_format(table.dtype).is_some()
        && matches!(ids.dtype, DType::I32 | DType::I64)
        && fits_binding(gpu, table)
}

pub(crate) fn embedding(
    gpu: &WgpuBackend,
    st: &mut State,
    inputs: &[Tensor],
    out: &TensorInfo,
) -> Result<Option<Tensor>> {
    let (table, ids) = (&inputs[0], &inputs[1]);
    // Ids are checked on the host: an id outside the table is an error, not a read out of bounds.
    let Some(host) = device_view(ids)?.host.clone() else {
        return Ok(None);
    };
    let host_ids = Tensor::from_bytes(ids.dims(), ids.dtype(), &host)?.to_i64_vec()?;
    let (vocab, dim) = (table.dims()[0], table.dims()[1]);
    if let Some(bad) = host_ids.iter().find(|&&i| i < 0 || i as usize >= vocab) {
        return Err(Error::invalid(
            "embedding",
            format!("id {bad} is outside the table of {vocab} rows"),
        ));
    }
    let row_bytes = table
        .dtype()
        .bytes_for(dim)
        .ok_or_else(|| Error::invalid("embedding", format!("{} rows of {dim}", table.dtype())))?;
    let stride = if ids.dtype() == DType::I64 { 2 } else { 1 };
    let (y, ybuf) = gpu.output(st, out.shape.dims(), DType::F32)?;
    let n = host_ids.len() * dim;
    let key = KernelKey {
        family: Family::Embedding,
        entry: "main",
        weights: Some(table.dtype()),
        rows: 1,
    };
    let params = [host_ids.len() as u32, dim as u32, row_bytes as u32, stride];
    let (tbuf, ibuf) = (gpu_buf(table)?, gpu_buf(ids)?);
    gpu.dispatch(
        st,
        &key,
        &params,
        &[&tbuf, &ibuf, &ybuf],
        n.div_ceil(64) as u32,
    )?;
    Ok(Some(y))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lanes per row are a power of two from 32 (64 for 256-value blocks) to 256, fill about
    /// 2^18 threads, and leave no lane without values unless the row is shorter than the
    /// fewest lanes cover.
    #[test]
    fn mv_lanes_bounds() {
        for dt in [
            DType::F32,
            DType::F16,
            DType::Q8_0,
            DType::Q4_0,
            DType::Q4_K,
            DType::Q6_K,
        ] {
            let least = 32;
            for n in [1, 3, 512, 2048, 4100, 8192, 8200, 128_256] {
                for k in [dt.block_elems().max(4), 96, 256, 576, 1004, 2048, 8192] {
                    if k % dt.block_elems() != 0 {
                        continue;
                    }
                    let l = mv_lanes(n, k, dt) as usize;
                    assert!(
                        l.is_power_of_two() && (least..=256).contains(&l),
                        "{dt} {n} {k}: {l}"
                    );
                    // Values one step of a lane takes (matvec_fast.wgsl).
                    let per = match dt {
                        DType::Q4_K | DType::Q5_K => 32,
                        _ if dt.block_elems() == 1 => 4,
                        _ => 8,
                    };
                    assert!(l == least || l * per <= k, "{dt} {n} {k}: {l} lanes idle");
                    if l * per <= k / 2 && l < 256 {
                        assert!(n * l * 2 > 1 << 18, "{dt} {n} {k}: {l} lanes too few");
                    }
                }
            }
        }
        assert_eq!(mv_lanes(2048, 2048, DType::Q4_0), 128);
        assert_eq!(mv_lanes(128_256, 2048, DType::Q8_0), 32);
        assert_eq!(mv_lanes(128_256, 2048, DType::Q6_K), 32);
    }

    /// Two weight rows per lane for Q8_0 and Q4_0 vocabulary-sized products only.
    #[test]
    fn mv_rows_per_lane_for_vocabularies() {
        assert_eq!(mv_rows_per_lane(128_256, DType::Q4_0), 2);
        assert_eq!(mv_rows_per_lane(128_256, DType::Q6_K), 1);
        assert_eq!(mv_rows_per_lane(65_536, DType::Q8_0), 2);
        assert_eq!(mv_rows_per_lane(65_535, DType::Q8_0), 1);
        assert_eq!(mv_rows_per_lane(8192, DType::Q4_0), 1);
        assert_eq!(mv_rows_per_lane(128_256, DType::F16), 1);
        assert_eq!(mv_rows_per_lane(128_256, DType::F32), 1);
    }
}

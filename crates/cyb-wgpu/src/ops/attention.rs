//! Rotary embeddings (cos/sin table made on the host with the reference's frequencies) and
//! scaled dot-product attention.

use crate::backend::{device_view, gpu_buf, State, WgpuBackend};
use crate::kernels::{Family, KernelKey};
use crate::memory::GpuBuf;
use cyb_ops::{Op, RopeLayout, SdpaLayout};
use cyb_tensor::{DType, Result, Tensor, TensorInfo};
use std::sync::Arc;

pub(crate) fn supports_rope(inputs: &[TensorInfo]) -> bool {
    let ok_x = inputs
        .first()
        .is_some_and(|x| x.dtype == DType::F32 && x.shape.rank() >= 3);
    let ok_pos = inputs
        .get(1)
        .is_some_and(|p| matches!(p.dtype, DType::I32 | DType::I64));
    let ok_f = inputs.get(2).is_none_or(|f| f.dtype == DType::F32);
    ok_x && ok_pos && ok_f && inputs.len() <= 3
}

/// What a rope's cos/sin table is computed from besides the positions (all but the layout,
/// which the kernel applies): a replayed step (replay.rs) makes its table again from its own
/// positions.
#[derive(Clone, PartialEq)]
pub(crate) struct RopeRecipe {
    rot_dims: usize,
    /// The base's bits (compared exactly).
    base: u32,
    scaling: cyb_ops::RopeScaling,
    pos_dtype: DType,
    /// Per-frequency divisors, F32 bytes (a model's rope_freqs weight).
    factors: Option<Arc<[u8]>>,
}

/// What a staged table was made from: reused while the next rope's is equal.
#[derive(PartialEq)]
pub(crate) struct RopeSource {
    recipe: RopeRecipe,
    positions: Arc<[u8]>,
}

impl RopeRecipe {
    /// The cos/sin table (`[positions, rot_dims/2, 2]`, the reference's frequencies) for the
    /// positions in `pos` (bytes of `pos_dtype`).
    pub(crate) fn table(&self, pos: &[u8]) -> Result<Vec<f32>> {
        let width = self.pos_dtype.bytes_for(1).unwrap_or(8).max(1);
        let positions = Tensor::from_bytes(&[pos.len() / width], self.pos_dtype, pos)?;
        let positions = positions.to_i64_vec()?;
        let base = f32::from_bits(self.base) as f64;
        let (mut inv, attn_factor) =
            cyb_ops::reference::rope_frequencies(self.rot_dims, base, &self.scaling);
        if let Some(f) = &self.factors {
            let f = cyb_tensor::decode_f32_vec(DType::F32, f, f.len() / 4)?;
            for (i, d) in inv.iter_mut().zip(f) {
                *i /= d as f64;
            }
        }
        let half = self.rot_dims / 2;
        let mut table = Vec::with_capacity(positions.len() * half * 2);
        for &p in &positions {
            for f in inv.iter().take(half) {
                let theta = p as f64 * f;
                table.push((theta.cos() * attn_factor) as f32);
                table.push((theta.sin() * attn_factor) as f32);
            }
        }
        Ok(table)
    }
}

pub(crate) fn rope(
    gpu: &WgpuBackend,
    st: &mut State,
    op: &Op,
    inputs: &[Tensor],
    out: &TensorInfo,
) -> Result<Option<Tensor>> {
    let Op::Rope {
        layout,
        rot_dims,
        base,
        scaling,
    } = op
    else {
        return Ok(None);
    };
    // The table depends only on these; q and k of every layer share them, so it is made and
    // staged once per step, not per rope.
    let host_of = |t: &Tensor| device_view(t).map(|v| v.host.clone());
    let Some(pos_bytes) = host_of(&inputs[1])? else {
        return Ok(None);
    };
    let factor_bytes = match inputs.get(2) {
        Some(f) => match host_of(f)? {
            Some(b) => Some(b),
            None => return Ok(None),
        },
        None => None,
    };
    let source = RopeSource {
        recipe: RopeRecipe {
            rot_dims: *rot_dims,
            base: base.to_bits(),
            scaling: *scaling,
            pos_dtype: inputs[1].dtype(),
            factors: factor_bytes,
        },
        positions: pos_bytes,
    };
    let half = rot_dims / 2;
    let tbuf = match &st.rope_table {
        Some((src, b)) if *src == source => b.clone(),
        _ => {
            let table = source.recipe.table(&source.positions)?;
            let b = gpu.stage_rope(
                st,
                bytemuck::cast_slice(&table),
                source.recipe.clone(),
                &source.positions,
            )?;
            st.rope_table = Some((source, b.clone()));
            b
        }
    };
    let dims = inputs[0].dims();
    let r = dims.len();
    let (seq, heads, head_dim) = (dims[r - 3], dims[r - 2], dims[r - 1]);
    let (y, ybuf) = gpu.output(st, out.shape.dims(), DType::F32)?;
    let n = out.shape.numel();
    let params = [
        n as u32,
        heads as u32,
        seq as u32,
        head_dim as u32,
        half as u32,
        u32::from(*layout == RopeLayout::Neox),
    ];
    let x = gpu_buf(&inputs[0])?;
    let key = KernelKey::plain(Family::Rope, "rope");
    gpu.dispatch(
        st,
        &key,
        &params,
        &[&x, &tbuf, &ybuf],
        n.div_ceil(64) as u32,
    )?;
    Ok(Some(y))
}

/// Keys one attention workgroup takes: rows of more keys are split (sdpa_part.wgsl).
const SPLIT_KEYS: usize = 256;

pub(crate) fn supports_sdpa(op: &Op, inputs: &[TensorInfo]) -> bool {
    let Op::Sdpa {
        alibi_max_bias,
        sliding_window,
        layout: SdpaLayout::HeadMajor,
        ..
    } = op
    else {
        return false;
    };
    let [q, k, _v] = inputs else {
        return false;
    };
    let r = q.shape.rank();
    let (qd, kd) = (q.shape.dims(), k.shape.dims());
    alibi_max_bias.is_none()
        && *sliding_window != Some(0)
        && inputs.iter().all(|i| i.dtype == DType::F32)
        && r >= 3
        && kd.get(r - 2).is_some_and(|&lk| lk > 0)
        && qd[r - 1] > 0
}

/// The buffer attention reads keys or values `[.., lk, d]` from, and its rows per head: a lazy
/// slice of the KV cache whose copy is not recorded is read in place, in the cache.
fn in_place(t: &Tensor, lk: usize) -> Result<(Arc<GpuBuf>, usize)> {
    let view = device_view(t)?;
    match &view.lazy {
        Some(l) if l.dst.get().is_none() => Ok((l.src.clone(), l.src_rows)),
        _ => Ok((view.buffer()?, lk)),
    }
}

/// Query rows per tile of the prompt attention kernel (sdpa_tile.wgsl's BR): from this many
/// query rows on it takes the prompt's attention.
const TILE_ROWS: usize = 16;
/// The largest head (query/key and value sizes) sdpa_tile.wgsl's tiles hold.
const TILE_MAX_VALUES: usize = 128;
/// Workgroup memory sdpa_tile.wgsl declares (its `qt`, `kv` and `pt`).
const TILE_STORAGE: u32 = 512 * 16 + 1056 * 16 + 512 * 4;

/// Query heads per kv head, head size (values) and keys per chunk the grouped decode kernel
/// holds in workgroup memory (sdpa_dec.wgsl's GMAX, `qs` and `ws`), and values of a key one lane
/// keeps in registers (KPL).
const DEC_MAX_GROUP: usize = 8;
const DEC_MAX_VALUES: usize = 1024;
const DEC_VALUES_PER_LANE: usize = 8;
/// The fewest and most keys per chunk of the grouped decode kernel, and the workgroups it aims
/// for (chunks get smaller until a launch has about this many, so that a short context still
/// spreads over a large GPU).
const DEC_MIN_CHUNK: usize = 32;
const DEC_MAX_CHUNK: usize = 256;
const DEC_TARGET_GROUPS: usize = 256;

/// Keys per chunk of the grouped decode kernel (sdpa_dec.wgsl) for one query row per head
/// (`lq` 1), `hq` query heads on `hkv` kv heads of `d` values, `rows` query rows in all and
/// `keys` the power of two at or above the key count; `None` where it does not apply (no
/// subgroups, a prompt, heads too large or groups too wide), and the other kernels run.
/// Chunks follow `keys` alone, so a grid holds for one power of two (replay.rs).
pub(crate) fn grouped_decode_chunk(
    sg: usize,
    lq: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    rows: usize,
    keys: usize,
) -> Option<usize> {
    if sg == 0 || lq != 1 || hkv == 0 || !hq.is_multiple_of(hkv) {
        return None;
    }
    let g = hq / hkv;
    if g > DEC_MAX_GROUP || g * d > DEC_MAX_VALUES || d > DEC_VALUES_PER_LANE * sg {
        return None;
    }
    let units = rows / hq * hkv;
    let most = (DEC_MAX_VALUES / g).min(DEC_MAX_CHUNK);
    let most = 1 << most.ilog2();
    let ch = (keys * units / DEC_TARGET_GROUPS)
        .max(1)
        .next_power_of_two()
        .clamp(DEC_MIN_CHUNK, most);
    Some(ch)
}

/// Decode attention on the grouped kernel (sdpa_dec.wgsl): `keys / ch` chunks per kv head,
/// merged by sdpa_merge.wgsl where there are several.
#[allow(clippy::too_many_arguments)]
fn grouped_decode(
    gpu: &WgpuBackend,
    st: &mut State,
    mut params: Vec<u32>,
    [q, k, v, ybuf]: [&Arc<GpuBuf>; 4],
    (rows, dv): (usize, usize),
    keys: usize,
    ch: usize,
    rows_key: u32,
) -> Result<()> {
    let (hq, hkv) = (params[1] as usize, params[4] as usize);
    let units = rows / hq * hkv;
    let chunks = keys.div_ceil(ch);
    let groups = u32::try_from(units * chunks)
        .map_err(|_| cyb_tensor::Error::invalid("sdpa", "too many kv heads for one launch"))?;
    params.extend([chunks as u32, ch as u32]);
    // One float per chunk when there is no merge: the kernel binds PART either way.
    let parts = gpu.frame_out(st, rows * chunks * (dv + 2) * 4)?;
    let key = KernelKey {
        rows: rows_key,
        ..KernelKey::plain(Family::SdpaDec, "sdpa_dec")
    };
    gpu.dispatch(st, &key, &params, &[q, k, v, ybuf, &parts], groups)?;
    if chunks > 1 {
        let merge = KernelKey::plain(Family::SdpaMerge, "sdpa_merge");
        gpu.dispatch(
            st,
            &merge,
            &[rows as u32, dv as u32, chunks as u32],
            &[&parts, ybuf],
            rows as u32,
        )?;
    }
    Ok(())
}

pub(crate) fn sdpa(
    gpu: &WgpuBackend,
    st: &mut State,
    op: &Op,
    inputs: &[Tensor],
    out: &TensorInfo,
) -> Result<Tensor> {
    let Op::Sdpa {
        scale,
        causal,
        sliding_window,
        softcap,
        layout,
        ..
    } = op
    else {
        return Err(cyb_tensor::Error::invalid("sdpa", "not an sdpa op"));
    };
    if *layout != SdpaLayout::HeadMajor {
        return Err(cyb_tensor::Error::invalid(
            "sdpa",
            "the wgpu kernel takes the head-major layout only",
        ));
    }
    let (qd, kd, vd) = (inputs[0].dims(), inputs[1].dims(), inputs[2].dims());
    let r = qd.len();
    let (hq, lq, d) = (qd[r - 3], qd[r - 2], qd[r - 1]);
    let (hkv, lk, dv) = (kd[r - 3], kd[r - 2], vd[r - 1]);
    let rows = inputs[0].numel() / d;
    let (y, ybuf) = gpu.output(st, out.shape.dims(), DType::F32)?;
    let (q, (k, kcap), (v, vcap)) = (
        gpu_buf(&inputs[0])?,
        in_place(&inputs[1], lk)?,
        in_place(&inputs[2], lk)?,
    );
    let window = sliding_window.map_or(0, |w| w.min(u32::MAX as usize) as u32);
    let mut params = vec![
        rows as u32,
        hq as u32,
        lq as u32,
        d as u32,
        hkv as u32,
        lk as u32,
        dv as u32,
        scale.to_bits(),
        u32::from(*causal),
        window,
        softcap.unwrap_or(0.0).to_bits(),
        kcap as u32,
        vcap as u32,
    ];
    // Four values of q and k per load where every row starts at a multiple of four (`rows` 4),
    // of v likewise (plus 8).
    let rows_key = if d % 4 == 0 { 4 } else { 1 } + if dv % 4 == 0 { 8 } else { 0 };
    // Sizes follow the power of two above the key count, so that consecutive decode steps
    // keep one buffer and one grid (the frame allocator pools buffers by exact size, and a
    // replay plan holds for one power of two).
    let keys = lk.next_power_of_two();
    if let Some(ch) = grouped_decode_chunk(gpu.subgroup_size() as usize, lq, hq, hkv, d, rows, keys)
    {
        return grouped_decode(
            gpu,
            st,
            params,
            [&q, &k, &v, &ybuf],
            (rows, dv),
            keys,
            ch,
            rows_key,
        )
        .map(|()| y);
    }
    if lq >= TILE_ROWS
        && [d, dv].iter().all(|&n| n % 4 == 0 && n <= TILE_MAX_VALUES)
        && gpu.ctx.limits.max_compute_workgroup_storage_size >= TILE_STORAGE
    {
        let tiles = lq.div_ceil(TILE_ROWS);
        let groups = u32::try_from(rows / lq * tiles)
            .map_err(|_| cyb_tensor::Error::invalid("sdpa", "too many heads for one launch"))?;
        let key = KernelKey::plain(Family::SdpaTile, "sdpa_tile");
        gpu.dispatch(st, &key, &params, &[&q, &k, &v, &ybuf], groups)?;
        return Ok(y);
    }
    if keys <= SPLIT_KEYS {
        // One workgroup per query row, its scores in a scratch buffer.
        let scores = gpu.frame_out(st, rows * keys * 4)?;
        let key = KernelKey {
            rows: rows_key,
            ..KernelKey::plain(Family::Sdpa, "sdpa")
        };
        gpu.dispatch(
            st,
            &key,
            &params,
            &[&q, &k, &v, &ybuf, &scores],
            rows as u32,
        )?;
        return Ok(y);
    }
    // Longer rows are split over chunks of SPLIT_KEYS keys, one workgroup each (many more
    // workgroups for a decode step, no score matrix for a long prefill), then merged.
    let chunks = keys / SPLIT_KEYS;
    let groups = u32::try_from(rows * chunks)
        .map_err(|_| cyb_tensor::Error::invalid("sdpa", "too many query rows for one launch"))?;
    params.push(chunks as u32);
    let parts = gpu.frame_out(st, rows * chunks * (dv + 2) * 4)?;
    let key = KernelKey {
        rows: rows_key,
        ..KernelKey::plain(Family::SdpaPart, "sdpa_part")
    };
    gpu.dispatch(st, &key, &params, &[&q, &k, &v, &ybuf, &parts], groups)?;
    let merge = KernelKey::plain(Family::SdpaMerge, "sdpa_merge");
    gpu.dispatch(
        st,
        &merge,
        &[rows as u32, dv as u32, chunks as u32],
        &[&parts, &ybuf],
        rows as u32,
    )?;
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks are powers of two from 32 keys, fit the kernel's workgroup memory for the group,
    /// shrink until a launch has about 256 workgroups, and the kernel is declined where it does
    /// not apply.
    #[test]
    fn grouped_decode_chunks() {
        let ch = |hq, hkv, d, keys| grouped_decode_chunk(32, 1, hq, hkv, d, hq, keys);
        // Llama 3 8B: 32 query heads on 8 kv heads of 128.
        assert_eq!(ch(32, 8, 128, 1), Some(32));
        assert_eq!(ch(32, 8, 128, 1024), Some(32));
        assert_eq!(ch(32, 8, 128, 8192), Some(256));
        assert_eq!(ch(32, 8, 128, 16384), Some(256));
        // Groups of 8 and of 7 keep G · CH ≤ 1024.
        assert_eq!(ch(8, 1, 64, 1 << 20), Some(128));
        assert_eq!(ch(7, 1, 64, 1 << 20), Some(128));
        for (hq, hkv, d) in [(32, 8, 128), (8, 1, 64), (7, 1, 64), (2, 2, 256)] {
            for keys in (0..20).map(|p| 1usize << p) {
                let c = ch(hq, hkv, d, keys).unwrap();
                assert!(c.is_power_of_two() && (32..=256).contains(&c));
                assert!(hq / hkv * c <= 1024 && hq / hkv * d <= 1024);
            }
        }
        // No subgroups, a prompt, groups over 8, heads over 8 lanes' values or G · d over 1024.
        assert_eq!(grouped_decode_chunk(0, 1, 32, 8, 128, 32, 64), None);
        assert_eq!(grouped_decode_chunk(32, 2, 32, 8, 128, 64, 64), None);
        assert_eq!(ch(16, 1, 64, 64), None);
        assert_eq!(grouped_decode_chunk(8, 1, 8, 8, 128, 8, 64), None);
        assert_eq!(ch(8, 1, 256, 64), None);
        assert_eq!(ch(6, 4, 64, 64), None);
    }
}

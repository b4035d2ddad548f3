//! Recording kernel launches, and merging consecutive ones into one launch.
//!
//! A decode step's cost on a GPU is per launch (each is followed by a barrier), not per byte,
//! so launches that the op-at-a-time contract would record separately are merged when they are
//! independent and adjacent: the q, k and v matvecs of one activation (one multi-output matvec;
//! gate and up too, together with the gated unit that consumes exactly their two outputs), the
//! rope of q and of k (with the KV cache appends of the rotated k and of v that follow them),
//! two copies, two RMS norms (Qwen3's q and k norms) and two broadcasting binary ops (bias
//! adds). One merge spans a dependency: a decode matvec, the residual add + RMS norm of its
//! output and the matvecs of the normalized row become two launches (`ResNorm`: the first
//! matvec also writes the sum, the later ones compute the norm themselves), and one token's
//! attention joins the rope + appends before it (`Attend`: each workgroup writes its head's
//! rotated q and its KV head's new cache rows, then attends). The last launch is
//! held back in `State::pending` until the next one shows whether it joins; anything else that
//! records work (another launch, a copy, a submission) records the held one first, so the order
//! of effects never changes. Every merged kernel computes each output as the separate kernels
//! do (exactly, except that `ResNorm`'s norm sums the squares in another order, scales the
//! dot products by the inverse RMS after summing them, and multiplies its normalized row by
//! the weights before the inverse RMS), and still writes every output they
//! would have written (a later reader of the gate's, the rotated k's or the norm's output sees
//! it).

use crate::backend::{State, WgpuBackend, BIND_CACHE_MAX, MAX_BUFFERS, PARAM_BYTES, SPARE};
use crate::kernels::{Family, Kernel, KernelKey};
use crate::memory::GpuBuf;
use crate::ops::matmul::{mv_lanes, MV_LEAST_LANES};
use arrayvec::ArrayVec;
use cyb_backend::BufferUsage;
use cyb_tensor::{Error, Result};
use std::sync::Arc;

/// A launch's parameter words (at most one 32-word block) and buffers, held inline: recording
/// a launch allocates nothing.
type Params = ArrayVec<u32, 32>;
pub(crate) type Bufs = ArrayVec<(u64, wgpu::Buffer), MAX_BUFFERS>;
/// Launches held back: at most five (`Pending::Attend`).
type Held = ArrayVec<Launch, 5>;
/// What held launches become: one, or two for a `ResNorm`.
type Launches = ArrayVec<Launch, 2>;

/// One kernel launch as recorded: the buffers as (id, handle), reads first.
pub(crate) struct Launch {
    key: KernelKey,
    params: Params,
    bufs: Bufs,
    groups: u32,
}

impl Launch {
    fn is(&self, family: Family, entry: &str) -> bool {
        self.key.family == family && self.key.entry == entry
    }
    fn id(&self, i: usize) -> u64 {
        self.bufs.get(i).map_or(u64::MAX, |b| b.0)
    }
    fn param(&self, i: usize) -> u32 {
        self.params.get(i).copied().unwrap_or(0)
    }
    fn reads(&self) -> &[(u64, wgpu::Buffer)] {
        &self.bufs[..self.key.reads().min(self.bufs.len())]
    }
    fn writes(&self) -> &[(u64, wgpu::Buffer)] {
        &self.bufs[self.key.reads().min(self.bufs.len())..]
    }
}

/// True when `l` neither writes a buffer that `held` reads or writes nor reads one `held`
/// writes: running them in one launch (no barrier between) gives the same result.
fn independent(held: &[Launch], l: &Launch) -> bool {
    held.iter().all(|h| {
        let touches = |id: u64| h.bufs.iter().any(|b| b.0 == id);
        let h_writes = |id: u64| h.writes().iter().any(|b| b.0 == id);
        l.writes().iter().all(|w| !touches(w.0)) && l.reads().iter().all(|r| !h_writes(r.0))
    })
}

/// A `copy` launch from a contiguous source from its first element (an append of new rows).
fn plain_copy(l: &Launch) -> bool {
    // copy params: 0 n, 1-4 dims, 5-8 source strides, 9-12 destination strides, 13, 14 bases.
    let mut expect = 1u64;
    let mut contiguous = true;
    for i in (0..4).rev() {
        let dim = u64::from(l.param(1 + i));
        if dim != 1 && u64::from(l.param(5 + i)) != expect {
            contiguous = false;
        }
        expect *= dim;
    }
    l.is(Family::Copy, "copy") && contiguous && l.param(13) == 0
}

/// Whether copy `c` (a `plain_copy`) writes a `[heads, d]` row block to row `row` of a KV cache
/// laid out `[heads, cap, d]`: what `Op::KvAppend` records for one token.
fn appends_row(c: &Launch, heads: u32, d: u32, cap: u32, row: u32) -> bool {
    // copy params: 0 n, 1-4 dims, 9-12 destination strides, 14 destination base.
    let mut steps = (0..4)
        .filter(|&i| c.param(1 + i) != 1)
        .map(|i| (c.param(1 + i), c.param(9 + i)));
    let head_step = if heads == 1 { None } else { steps.next() };
    let row_step = steps.next();
    u64::from(c.param(0)) == u64::from(heads) * u64::from(d)
        && steps.next().is_none()
        && (heads == 1
            || head_step
                .is_some_and(|(n, s)| n == heads && u64::from(s) == u64::from(cap) * u64::from(d)))
        && row_step == Some((d, 1))
        && u64::from(c.param(14)) == u64::from(row) * u64::from(d)
}

/// Whether `l` is the decode attention of one token (one query row per head, `d` and `dv`
/// multiples of four) that reads what a complete `RopeAppend` `held` writes: its rotated q as
/// the queries, and the two KV caches its appends wrote the token's row into, as the last key.
/// Then one launch does both (sdpa_rope.wgsl).
fn attends(held: &[Launch], l: &Launch) -> bool {
    let [q, k, kc, vc] = held else {
        return false;
    };
    // sdpa params: 0 rows, 1 hq, 2 lq, 3 d, 4 hkv, 5 lk, 6 dv, 11 and 12 the caches' rows per
    // head; bufs q, k, v, o, s. rope params: 0 n, 1 heads, 2 seq, 3 head_dim.
    let (hq, d, hkv, lk, dv) = (l.param(1), l.param(3), l.param(4), l.param(5), l.param(6));
    let n = |h: u32, d: u32| u64::from(h) * u64::from(d);
    let written = |id: u64| held.iter().any(|h| h.writes().iter().any(|b| b.0 == id));
    l.is(Family::Sdpa, "sdpa")
        && l.key.rows == 12
        && l.param(0) == hq
        && l.param(2) == 1
        && hkv > 0
        && hq.is_multiple_of(hkv)
        && lk > 0
        && u64::from(q.param(0)) == n(hq, d)
        && q.param(1) == hq
        && q.param(2) == 1
        && q.param(3) == d
        && u64::from(k.param(0)) == n(hkv, d)
        && k.param(1) == hkv
        && l.id(0) == q.id(2)
        && l.id(1) == kc.id(1)
        && l.id(2) == vc.id(1)
        && kc.id(1) != vc.id(1)
        && appends_row(kc, hkv, d, l.param(11), lk - 1)
        && appends_row(vc, hkv, dv, l.param(12), lk - 1)
        && !written(vc.id(0))
        && l.writes()
            .iter()
            .all(|w| held.iter().all(|h| h.bufs.iter().all(|b| b.0 != w.0)))
}

/// A matmul launch of few activation rows: `main`, or `mv` for one.
fn matvec(l: &Launch) -> bool {
    l.is(Family::MatMul, "main") || l.is(Family::MatMul, "mv")
}

/// A launch a `Pair` starts with.
fn pairable(l: &Launch) -> bool {
    l.is(Family::Norm, "rms_norm")
        || ["add", "sub", "mul", "div"]
            .iter()
            .any(|e| l.is(Family::Binary, e))
}

/// A decode matvec (`prod`) and the residual add + RMS norm of its output (`norm`), held until
/// the matvecs of the norm's output come: then `prod` also writes the sum (matvec_res.wgsl) and
/// they compute the norm themselves (matvec_norm.wgsl), one launch fewer.
pub(crate) struct ResNorm {
    prod: Launch,
    norm: Launch,
}

impl ResNorm {
    /// The two launches of this matvec, its add + norm and the held matvecs `after` of it.
    fn around(self, after: Pending, spare: &[Arc<GpuBuf>; SPARE]) -> Launches {
        // The weighted sum goes to the last spare buffer (`NORM_FUSE_MAX_D` values), which the
        // next launch reads before any other `ResNorm` writes it again.
        let sw = (spare[SPARE - 1].id, spare[SPARE - 1].buffer.clone());
        let (prod, norm) = res_norm_launches(self, sw.clone());
        let l = after.into_launch(spare, true);
        Launches::from_iter(
            [Some(prod), l.map(|l| with_norm(l, &norm, sw))]
                .into_iter()
                .flatten(),
        )
    }
}

/// Longest row a merged norm normalizes (matvec_norm.wgsl: 256 threads, four `vec4`s each).
pub(crate) const NORM_FUSE_MAX_D: u32 = 4096;
/// Most weight rows of the matvecs merged with a norm, over all of them: every workgroup sums
/// the row's squares again, so the output projection over a vocabulary stays separate.
const NORM_FUSE_MAX_ROWS: u32 = 32768;

/// Whether `norm` is the residual add + RMS norm of decode matvec `prod`'s output that
/// matvec_res.wgsl and matvec_norm.wgsl can take over (no buffer of one written where the
/// merged kernels read or write it).
fn res_norm(prod: &Launch, norm: &Launch) -> bool {
    // matmul params: 0 m, 1 n, 2 k; bufs a, w, y. add_rms_norm params: 0 rows, 1 d; bufs a, b,
    // wt, s, y.
    let d = norm.param(1);
    let y = prod.id(2);
    let r = if norm.id(0) == y {
        norm.id(1)
    } else if norm.id(1) == y {
        norm.id(0)
    } else {
        return false;
    };
    let (s, yn) = (norm.id(3), norm.id(4));
    prod.is(Family::MatMul, "mv")
        && prod.param(0) == 1
        && prod.param(1) == d
        && norm.is(Family::AddNorm, "add_rms_norm")
        && norm.param(0) == 1
        && d > 0
        && d.is_multiple_of(4)
        && d <= NORM_FUSE_MAX_D
        && r != y
        && norm.id(2) != y
        && s != yn
        && [prod.id(0), prod.id(1), y, r, norm.id(2)]
            .iter()
            .all(|b| *b != s && *b != yn)
}

/// Whether matvec `l` reads the normalized row of `rn` (then it may compute the norm itself):
/// `l` writes none of their buffers, reads none they write but that row, and the merged
/// launch stays small.
fn takes_norm(rn: &ResNorm, l: &Launch, rows: u32) -> bool {
    let (p, n) = (&rn.prod, &rn.norm);
    let written = [p.id(2), n.id(3), n.id(4)];
    // matmul params: 0 m, 1 n, 2 k; bufs a, w, y.
    l.is(Family::MatMul, "mv")
        && l.param(0) == 1
        && l.param(2) == n.param(1)
        && l.id(0) == n.id(4)
        && !written.contains(&l.id(1))
        && l.writes()
            .iter()
            .all(|w| p.bufs.iter().chain(&n.bufs).all(|b| b.0 != w.0))
        && rows <= NORM_FUSE_MAX_ROWS
}

/// Launches held back while the next one may join them.
pub(crate) enum Pending {
    /// `matmul.wgsl` `main` or `mv` launches (few activation rows) of one activation, weights of one
    /// dtype and the same `k`: up to three; perhaps reading the output of a held `ResNorm`,
    /// whose norm they then compute.
    Matvec(Option<ResNorm>, Held),
    /// Two of them and the gated unit (`swiglu`/`geglu` of two inputs) reading exactly their
    /// outputs: gate, up, unit. Complete.
    Glu(Option<ResNorm>, Held),
    /// A decode matvec and the add + norm of its output.
    ResNorm(ResNorm),
    /// Rope launches sharing one cos/sin table: up to two.
    Rope(Held),
    /// Strided copies: up to two.
    Copy(Held),
    /// The two ropes, the copy of the second one's output (k) from its first element on (its
    /// KV cache append), and perhaps one more copy from a contiguous source (v's append).
    RopeAppend(Held),
    /// A `RopeAppend` of both appends and the decode attention reading its rotated q and the
    /// two caches (`attends`). Complete.
    Attend(Held),
    /// Two `rms_norm` launches with one eps and offset, or two broadcasting binary launches of
    /// one kind (`add`, `sub`, `mul`, `div`).
    Pair(Held),
}

impl Pending {
    /// Whether a held launch binds buffer `id` (a frame buffer is not handed out again while a
    /// held launch names it: the launches it would be written by could then not join).
    pub(crate) fn binds(&self, id: u64) -> bool {
        let (rn, held): (Option<&ResNorm>, &[Launch]) = match self {
            Pending::Matvec(rn, v) | Pending::Glu(rn, v) => (rn.as_ref(), v),
            Pending::ResNorm(rn) => (Some(rn), &[]),
            Pending::Rope(v)
            | Pending::Copy(v)
            | Pending::RopeAppend(v)
            | Pending::Attend(v)
            | Pending::Pair(v) => (None, v),
        };
        rn.into_iter()
            .flat_map(|r| [&r.prod, &r.norm])
            .chain(held)
            .any(|l| l.bufs.iter().any(|b| b.0 == id))
    }

    /// Whether a later launch could join `l` (then it is held: [`Pending::start`]).
    fn holds(l: &Launch) -> bool {
        matvec(l) || l.is(Family::Rope, "rope") || l.is(Family::Copy, "copy") || pairable(l)
    }

    /// Holds `l`, which [`Pending::holds`] accepts.
    fn start(l: Launch) -> Pending {
        let one = Held::from_iter([l]);
        let first = &one[0];
        if matvec(first) {
            Pending::Matvec(None, one)
        } else if first.is(Family::Rope, "rope") {
            Pending::Rope(one)
        } else if first.is(Family::Copy, "copy") {
            Pending::Copy(one)
        } else {
            Pending::Pair(one)
        }
    }

    /// Joins `l` to the held launches; gives it back when it cannot join. `norms`: whether
    /// norms merge with the matvecs around them (`ResNorm`).
    fn absorb(&mut self, l: Launch, norms: bool) -> Option<Launch> {
        match self {
            Pending::Matvec(None, v) if norms && v.len() == 1 && res_norm(&v[0], &l) => {
                let prod = v.pop()?;
                *self = Pending::ResNorm(ResNorm { prod, norm: l });
                None
            }
            Pending::ResNorm(rn) => {
                if !takes_norm(rn, &l, l.param(1)) {
                    return Some(l);
                }
                let Pending::ResNorm(rn) = std::mem::replace(self, Pending::Copy(Held::new()))
                else {
                    return Some(l);
                };
                *self = Pending::Matvec(Some(rn), Held::from_iter([l]));
                None
            }
            Pending::Matvec(norm, v) => {
                let first = &v[0];
                // matmul params: 0 m, 1 n, 2 k, 3 blocks, 4 row bytes, 5 groups; bufs a, w, y.
                // Decode matvecs of different row counts join: the merged launch picks its
                // own lanes per row.
                let same_kernel = l.key == first.key
                    || (l.is(Family::MatMul, "mv")
                        && first.is(Family::MatMul, "mv")
                        && l.key.weights == first.key.weights);
                let rows: u32 = v.iter().map(|m| m.param(1)).sum::<u32>() + l.param(1);
                let joins = matvec(&l)
                    && v.len() < 3
                    && same_kernel
                    && l.param(0) == first.param(0)
                    && l.param(2) == first.param(2)
                    && l.id(0) == first.id(0)
                    && independent(v, &l)
                    && norm.as_ref().is_none_or(|rn| takes_norm(rn, &l, rows));
                if joins {
                    v.push(l);
                    return None;
                }
                let gate_up = v.len() == 2
                    && (l.is(Family::Binary, "swiglu") || l.is(Family::Binary, "geglu"))
                    && l.id(0) == v[0].id(2)
                    && l.id(1) == v[1].id(2)
                    && v[0].param(1) == v[1].param(1)
                    && u64::from(l.param(0)) == u64::from(v[0].param(0)) * u64::from(v[0].param(1))
                    && l.id(2) != v[0].id(0)
                    && norm.as_ref().is_none_or(|rn| {
                        rn.prod
                            .bufs
                            .iter()
                            .chain(&rn.norm.bufs)
                            .all(|b| b.0 != l.id(2))
                    });
                if gate_up {
                    let mut parts = std::mem::take(v);
                    parts.push(l);
                    *self = Pending::Glu(norm.take(), parts);
                    return None;
                }
                Some(l)
            }
            Pending::Rope(v) => {
                let first = &v[0];
                // rope params: 0 n, 1 heads, 2 seq, 3 head_dim, 4 half, 5 layout; bufs x, t, o.
                let joins = l.is(Family::Rope, "rope")
                    && v.len() < 2
                    && l.id(1) == first.id(1)
                    && (2..6).all(|i| l.param(i) == first.param(i))
                    && independent(v, &l);
                if joins {
                    v.push(l);
                    return None;
                }
                // rope of k → copy of all of it: the merged kernel writes each rotated
                // element to both places.
                let k_append = v.len() == 2
                    && plain_copy(&l)
                    && l.id(0) == v[1].id(2)
                    && l.param(0) == v[1].param(0)
                    && v.iter().all(|r| r.bufs.iter().all(|b| b.0 != l.id(1)));
                if !k_append {
                    return Some(l);
                }
                let mut parts = std::mem::take(v);
                parts.push(l);
                *self = Pending::RopeAppend(parts);
                None
            }
            Pending::RopeAppend(v) => {
                if norms && attends(v, &l) {
                    let mut parts = std::mem::take(v);
                    parts.push(l);
                    *self = Pending::Attend(parts);
                    return None;
                }
                if !(v.len() == 3 && plain_copy(&l) && independent(v, &l)) {
                    return Some(l);
                }
                v.push(l);
                None
            }
            Pending::Copy(v) => {
                if !(l.is(Family::Copy, "copy") && v.len() < 2 && independent(v, &l)) {
                    return Some(l);
                }
                v.push(l);
                None
            }
            Pending::Pair(v) => {
                let joins = v.len() < 2
                    && l.key == v[0].key
                    && (l.key.family != Family::Norm || l.params[2..4] == v[0].params[2..4])
                    && independent(v, &l);
                if !joins {
                    return Some(l);
                }
                v.push(l);
                None
            }
            Pending::Glu(..) | Pending::Attend(..) => Some(l),
        }
    }

    /// The one launch that does what the held launches do (a single one unchanged).
    /// `spare`: buffers for the write bindings a merged kernel leaves unused.
    fn into_launches(self, spare: &[Arc<GpuBuf>; SPARE]) -> Launches {
        match self {
            Pending::ResNorm(rn) => Launches::from_iter([rn.prod, rn.norm]),
            Pending::Matvec(Some(rn), v) => rn.around(Pending::Matvec(None, v), spare),
            Pending::Glu(Some(rn), v) => rn.around(Pending::Glu(None, v), spare),
            other => Launches::from_iter(other.into_launch(spare, false)),
        }
    }

    /// The one launch that does what the held launches (without a `ResNorm`) do; `norm`: a
    /// decode matvec launch to become a `MatVecNorm` one (`with_norm`), in the merged kernel's
    /// form even for one matvec, with the fewest lanes per row (each workgroup sums the row's
    /// squares once for all its rows).
    fn into_launch(self, spare: &[Arc<GpuBuf>; SPARE], norm: bool) -> Option<Launch> {
        let spare_ref = |i: usize| (spare[i].id, spare[i].buffer.clone());
        match self {
            // Two launches: only `into_launches` takes these (and never passes them here).
            Pending::ResNorm(_) | Pending::Matvec(Some(_), _) | Pending::Glu(Some(_), _) => None,
            Pending::Matvec(None, v) if v.len() <= 1 && !norm => v.into_iter().next(),
            Pending::Rope(v) | Pending::Copy(v) | Pending::Pair(v) if v.len() <= 1 => {
                v.into_iter().next()
            }
            Pending::Matvec(None, v) => {
                let f = &v[0];
                let n = |i: usize| v.get(i).map_or(0, |l| l.param(1));
                let blocks = f.groups / f.param(1).max(1);
                let mut lanes = f.key.rows;
                let mut groups: u32 = v.iter().map(|l| l.groups).sum();
                if let (true, Some(dtype)) = (f.is(Family::MatMul, "mv"), f.key.weights) {
                    let all = (n(0) + n(1) + n(2)) as usize;
                    lanes = if norm {
                        MV_LEAST_LANES
                    } else {
                        mv_lanes(all, f.param(2) as usize, dtype)
                    };
                    groups = (0..3).map(|i| n(i).div_ceil(256 / lanes)).sum();
                }
                let params = Params::from_iter([
                    f.param(0),
                    f.param(2),
                    f.param(4),
                    blocks,
                    n(0),
                    n(1),
                    n(2),
                    0,
                    groups,
                ]);
                let w = |i: usize| v.get(i).unwrap_or(f).bufs[1].clone();
                let y = |i: usize| match v.get(i) {
                    Some(l) => l.bufs[2].clone(),
                    None => spare_ref(if i == 1 { 2 } else { 0 }),
                };
                let bufs = Bufs::from_iter([
                    f.bufs[0].clone(),
                    w(0),
                    w(1),
                    w(2),
                    y(0),
                    y(1),
                    y(2),
                    spare_ref(1),
                ]);
                Some(multi_launch(f, lanes, params, bufs, groups))
            }
            Pending::Glu(None, v) => {
                // Always three: `absorb` makes it from two matvecs and the unit.
                let [g, u, glu] = &v[..] else {
                    return None;
                };
                let mode = if glu.is(Family::Binary, "swiglu") {
                    1
                } else if glu.param(13) == 1 {
                    3
                } else {
                    2
                };
                let blocks = g.groups / g.param(1).max(1);
                let (mut lanes, mut groups) = (g.key.rows, g.groups);
                if let (true, Some(dtype)) = (g.is(Family::MatMul, "mv"), g.key.weights) {
                    // Each lane computes a gate and an up row.
                    lanes = if norm {
                        MV_LEAST_LANES
                    } else {
                        mv_lanes(2 * g.param(1) as usize, g.param(2) as usize, dtype)
                    };
                    groups = g.param(1).div_ceil(256 / lanes);
                }
                let params = Params::from_iter([
                    g.param(0),
                    g.param(2),
                    g.param(4),
                    blocks,
                    g.param(1),
                    u.param(1),
                    0,
                    mode,
                    groups,
                ]);
                let bufs = Bufs::from_iter([
                    g.bufs[0].clone(),
                    g.bufs[1].clone(),
                    u.bufs[1].clone(),
                    g.bufs[1].clone(),
                    g.bufs[2].clone(),
                    u.bufs[2].clone(),
                    spare_ref(0),
                    glu.bufs[2].clone(),
                ]);
                Some(multi_launch(g, lanes, params, bufs, groups))
            }
            Pending::Rope(v) => {
                let (a, b) = (&v[0], &v[1]);
                let mut params: Params = (0..6).map(|i| a.param(i)).collect();
                params.extend([b.param(0), b.param(1), a.groups]);
                let bufs = Bufs::from_iter([
                    a.bufs[0].clone(),
                    b.bufs[0].clone(),
                    a.bufs[1].clone(),
                    a.bufs[2].clone(),
                    b.bufs[2].clone(),
                ]);
                Some(Launch {
                    key: KernelKey::plain(Family::RopePair, "rope_pair"),
                    params,
                    bufs,
                    groups: a.groups + b.groups,
                })
            }
            Pending::RopeAppend(v) => {
                let (q, k, kc) = (&v[0], &v[1], &v[2]);
                let vc = v.get(3);
                let mut params: Params = (0..6).map(|i| q.param(i)).collect();
                params.extend([k.param(0), k.param(1), q.groups, q.groups + k.groups]);
                params.extend((1..5).chain(9..13).map(|i| kc.param(i)));
                params.push(kc.param(14));
                match vc {
                    Some(c) => params.extend((0..5).chain(9..13).map(|i| c.param(i))),
                    None => params.extend([0; 9]),
                }
                params.push(vc.map_or(0, |c| c.param(14)));
                let bufs = Bufs::from_iter([
                    q.bufs[0].clone(),
                    k.bufs[0].clone(),
                    q.bufs[1].clone(),
                    vc.map_or_else(|| q.bufs[0].clone(), |c| c.bufs[0].clone()),
                    q.bufs[2].clone(),
                    k.bufs[2].clone(),
                    kc.bufs[1].clone(),
                    vc.map_or_else(|| spare_ref(0), |c| c.bufs[1].clone()),
                ]);
                Some(Launch {
                    key: KernelKey::plain(Family::RopeAppend, "rope_append"),
                    params,
                    bufs,
                    groups: q.groups + k.groups + vc.map_or(0, |c| c.groups),
                })
            }
            Pending::Attend(v) => {
                // Always five: `absorb` makes it from a complete `RopeAppend` and attention.
                let [q, k, kc, vc, at] = &v[..] else {
                    return None;
                };
                let mut params: Params = (0..6).map(|i| q.param(i)).collect();
                params.extend([k.param(0), k.param(1)]);
                params.extend([0; 8]);
                params.extend((0..13).map(|i| at.param(i)));
                let bufs = Bufs::from_iter([
                    q.bufs[0].clone(),
                    k.bufs[0].clone(),
                    q.bufs[1].clone(),
                    vc.bufs[0].clone(),
                    q.bufs[2].clone(),
                    k.bufs[2].clone(),
                    kc.bufs[1].clone(),
                    vc.bufs[1].clone(),
                    at.bufs[3].clone(),
                    at.bufs[4].clone(),
                ]);
                Some(Launch {
                    key: KernelKey {
                        family: Family::SdpaRope,
                        entry: "sdpa_rope",
                        ..at.key.clone()
                    },
                    params,
                    bufs,
                    groups: at.groups,
                })
            }
            Pending::Pair(v) => {
                let (a, b) = (&v[0], &v[1]);
                let (key, params) = if a.key.family == Family::Norm {
                    // norm params: 0 rows, 1 d, 2 eps, 3 offset.
                    let p = Params::from_iter([
                        a.param(0),
                        a.param(1),
                        a.param(2),
                        a.param(3),
                        b.param(0),
                        b.param(1),
                    ]);
                    (KernelKey::plain(Family::NormPair, "norm_pair"), p)
                } else {
                    let op = ["add", "sub", "mul", "div"]
                        .iter()
                        .position(|e| a.key.entry == *e)
                        .unwrap_or(0) as u32;
                    let mut p: Params = (0..13).map(|i| a.param(i)).collect();
                    p.extend((0..13).map(|i| b.param(i)));
                    p.extend([a.groups, op]);
                    (KernelKey::plain(Family::BinaryPair, "binary_pair"), p)
                };
                // Both read two inputs and write one; norm_pair binds X0, X1, W0, W1 and
                // binary_pair A0, B0, A1, B1.
                let b_ = |i: usize, l: &Launch| l.bufs[i].clone();
                let mut bufs = if key.family == Family::NormPair {
                    Bufs::from_iter([b_(0, a), b_(0, b), b_(1, a), b_(1, b)])
                } else {
                    Bufs::from_iter([b_(0, a), b_(1, a), b_(0, b), b_(1, b)])
                };
                bufs.extend([b_(2, a), b_(2, b)]);
                Some(Launch {
                    key,
                    params,
                    bufs,
                    groups: a.groups + b.groups,
                })
            }
            Pending::Copy(v) => {
                let (a, b) = (&v[0], &v[1]);
                let mut params: Params = (0..15).map(|i| a.param(i)).collect();
                params.extend((0..15).map(|i| b.param(i)));
                params.push(a.groups);
                let bufs = Bufs::from_iter([
                    a.bufs[0].clone(),
                    b.bufs[0].clone(),
                    a.bufs[1].clone(),
                    b.bufs[1].clone(),
                ]);
                Some(Launch {
                    key: KernelKey::plain(Family::CopyPair, "copy_pair"),
                    params,
                    bufs,
                    groups: a.groups + b.groups,
                })
            }
        }
    }
}

/// The merged matvec launch; `rows` as in `KernelKey`.
fn multi_launch(first: &Launch, rows: u32, params: Params, bufs: Bufs, groups: u32) -> Launch {
    Launch {
        key: KernelKey {
            family: Family::MatVecMulti,
            entry: first.key.entry,
            weights: first.key.weights,
            rows,
        },
        params,
        bufs,
        groups,
    }
}

/// The matvec of a `ResNorm` as matvec_res.wgsl's `mv_res` (also writing the residual sum the
/// norm would have, and that sum times the norm's weights into `sw`), and the norm launch,
/// whose buffers and parameters `with_norm` takes.
fn res_norm_launches(rn: ResNorm, sw: (u64, wgpu::Buffer)) -> (Launch, Launch) {
    let (p, n) = (rn.prod, rn.norm);
    // add_rms_norm bufs: a, b, wt, s, y; one of a and b is the matvec's output y.
    let r = if n.id(0) == p.id(2) {
        &n.bufs[1]
    } else {
        &n.bufs[0]
    };
    let bufs = Bufs::from_iter([
        p.bufs[0].clone(),
        p.bufs[1].clone(),
        r.clone(),
        n.bufs[2].clone(),
        p.bufs[2].clone(),
        n.bufs[3].clone(),
        sw,
    ]);
    // mv params: 0-5; then the norm's weight offset (add_rms_norm param 3).
    let mut params = p.params;
    params.truncate(6);
    params.push(n.param(3));
    let prod = Launch {
        key: KernelKey {
            family: Family::MatVecRes,
            entry: "mv_res",
            ..p.key
        },
        params,
        bufs,
        groups: p.groups,
    };
    (prod, n)
}

/// `multi` (a merged `mv` launch, matvec_multi.wgsl's bindings) as matvec_norm.wgsl's
/// `mv_norm`: it reads the residual sum `norm` normalizes (for its squares) and that sum times
/// the norm's weights, `sw` (for its dot products), instead of the normalized row, and writes
/// that row too.
fn with_norm(multi: Launch, norm: &Launch, sw: (u64, wgpu::Buffer)) -> Launch {
    // add_rms_norm params: 0 rows, 1 d, 2 eps, 3 offset; bufs a, b, wt, s, y.
    let mut params = multi.params;
    params.push(norm.param(2));
    let m = &multi.bufs;
    let bufs = Bufs::from_iter([
        norm.bufs[3].clone(),
        m[1].clone(),
        m[2].clone(),
        m[3].clone(),
        sw,
        m[4].clone(),
        m[5].clone(),
        m[6].clone(),
        m[7].clone(),
        norm.bufs[4].clone(),
    ]);
    Launch {
        key: KernelKey {
            family: Family::MatVecNorm,
            entry: "mv_norm",
            ..multi.key
        },
        params,
        bufs,
        groups: multi.groups,
    }
}

/// Storage buffers the merged kernels other than `MatVecNorm` bind.
const MERGED_BUFFERS: u32 = 8;

/// Whether launches are merged: not on an adapter that binds fewer storage buffers per kernel
/// than the merged kernels use.
pub(crate) fn merging_enabled(limits: &wgpu::Limits) -> bool {
    limits.max_storage_buffers_per_shader_stage >= MERGED_BUFFERS
}

/// Whether norms merge with the matvecs around them (`ResNorm`): the adapter binds
/// matvec_norm.wgsl's ten buffers.
pub(crate) fn norm_merging(limits: &wgpu::Limits) -> bool {
    limits.max_storage_buffers_per_shader_stage as usize >= MAX_BUFFERS
}

impl WgpuBackend {
    /// Records one kernel launch of `groups` workgroups into the step's encoder (perhaps
    /// merged with the next or the previous one; see the module comment).
    pub(crate) fn dispatch(
        &self,
        st: &mut State,
        key: &KernelKey,
        params: &[u32],
        buffers: &[&GpuBuf],
        groups: u32,
    ) -> Result<()> {
        if groups == 0 {
            return Ok(());
        }
        if buffers.len() > MAX_BUFFERS {
            return Err(Error::invalid(
                "wgpu",
                "internal: a kernel binds too many buffers",
            ));
        }
        // Words past one parameter block are dropped, as the block holds no more.
        let launch = Launch {
            key: key.clone(),
            params: params.iter().copied().take(32).collect(),
            bufs: buffers.iter().map(|b| (b.id, b.buffer.clone())).collect(),
            groups,
        };
        let launch = match st.pending.as_mut() {
            Some(p) => match p.absorb(launch, self.norm_merge) {
                None => return Ok(()),
                Some(l) => {
                    if let Some(held) = st.pending.take() {
                        self.record_pending(st, held)?;
                    }
                    l
                }
            },
            None => launch,
        };
        if !self.merge.load(std::sync::atomic::Ordering::Relaxed) {
            return self.record(st, launch);
        }
        if !Pending::holds(&launch) {
            return self.record(st, launch);
        }
        st.pending = Some(Pending::start(launch));
        Ok(())
    }

    fn record_pending(&self, st: &mut State, held: Pending) -> Result<()> {
        let spare = match &st.spare {
            Some(s) => s.clone(),
            None => {
                let s = [
                    self.create(16, BufferUsage::Storage, crate::memory::MemKind::Other)?,
                    self.create(16, BufferUsage::Storage, crate::memory::MemKind::Other)?,
                    self.create(16, BufferUsage::Storage, crate::memory::MemKind::Other)?,
                    self.create(
                        4 * u64::from(NORM_FUSE_MAX_D),
                        BufferUsage::Storage,
                        crate::memory::MemKind::Other,
                    )?,
                ];
                st.spare = Some(s.clone());
                s
            }
        };
        for l in held.into_launches(&spare) {
            self.record(st, l)?;
        }
        Ok(())
    }

    /// Records the held launches, if any (before other work is recorded or submitted). An
    /// error is kept for the step's end to report.
    pub(crate) fn emit_pending(&self, st: &mut State) {
        if let Some(p) = st.pending.take() {
            if let Err(e) = self.record_pending(st, p) {
                self.ctx.keep_error(e.to_string());
            }
        }
    }

    /// Records `l` into the step's one compute pass.
    fn record(&self, st: &mut State, l: Launch) -> Result<()> {
        let key = &l.key;
        let kernel = self.kernels.get(&self.ctx.device, key);
        let mut words = [0u32; 32];
        for (w, p) in words.iter_mut().zip(&l.params) {
            *w = *p;
        }
        let (ubuf, offset) = self.param_slot(st, bytemuck::cast_slice(&words))?;
        let mut ids = [u64::MAX; MAX_BUFFERS];
        for (id, b) in ids.iter_mut().zip(&l.bufs) {
            *id = b.0;
        }
        let bind_key = (Arc::as_ptr(&kernel) as usize, ubuf.id, offset, ids);
        let bind = match st.bind_groups.get(&bind_key) {
            Some(b) => b.clone(),
            None => {
                if st.bind_groups.len() >= BIND_CACHE_MAX {
                    st.bind_groups.clear();
                }
                let bind = self.bind_group(&kernel, &ubuf, offset, &l.bufs);
                st.bind_groups.insert(bind_key, bind.clone());
                bind
            }
        };
        if let Some(c) = st.capture.as_mut() {
            c.events.push(crate::replay::Event::Launch(Box::new(
                crate::replay::Launched {
                    key: key.clone(),
                    kernel: kernel.clone(),
                    words,
                    bufs: l.bufs.clone(),
                    groups: l.groups,
                },
            )));
        }
        self.encode(st, key, &kernel, &bind, l.groups)
    }

    /// The bind group of a launch of `kernel`: its parameter block at `offset` in `ubuf`, then
    /// `bufs` in order.
    pub(crate) fn bind_group(
        &self,
        kernel: &Kernel,
        ubuf: &GpuBuf,
        offset: u64,
        bufs: &Bufs,
    ) -> wgpu::BindGroup {
        let mut entries: ArrayVec<wgpu::BindGroupEntry, { MAX_BUFFERS + 1 }> = ArrayVec::new();
        entries.push(wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &ubuf.buffer,
                offset,
                size: std::num::NonZeroU64::new(PARAM_BYTES),
            }),
        });
        for (i, b) in bufs.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry {
                binding: (i + 1) as u32,
                resource: b.1.as_entire_binding(),
            });
        }
        self.ctx
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &kernel.layout,
                entries: &entries,
            })
    }

    /// `kernel` with `bind` over `groups` workgroups in `pass` (grids wider than the adapter's
    /// limit folded into y; the kernels' `flat_wg` unfolds them).
    pub(crate) fn dispatch_in(
        &self,
        pass: &mut wgpu::ComputePass<'_>,
        kernel: &Kernel,
        bind: &wgpu::BindGroup,
        groups: u32,
    ) {
        let max = self.ctx.limits.max_compute_workgroups_per_dimension.max(1);
        let x = groups.min(max);
        pass.set_pipeline(&kernel.pipeline);
        pass.set_bind_group(0, bind, &[]);
        pass.dispatch_workgroups(x, groups.div_ceil(x), 1);
    }

    /// Records a launch of `kernel` with `bind` over `groups` workgroups into the step's one
    /// compute pass (submitting every `SUBMIT_EVERY` launches).
    pub(crate) fn encode(
        &self,
        st: &mut State,
        key: &KernelKey,
        kernel: &Kernel,
        bind: &wgpu::BindGroup,
        groups: u32,
    ) -> Result<()> {
        let device = &self.ctx.device;
        let State {
            encoder,
            pass,
            gpu_time,
            ..
        } = st;
        let label = || {
            let dt = key.weights.map(|d| format!(" {d}")).unwrap_or_default();
            format!("{:?}/{}{dt}", key.family, key.entry)
        };
        if gpu_time.as_ref().is_some_and(|g| g.per_kernel) {
            *pass = None;
        }
        let pass = match pass {
            Some(p) => p,
            None => {
                let enc = encoder.get_or_insert_with(|| {
                    device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None })
                });
                let p = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: gpu_time.as_mut().and_then(|g| g.writes(label)),
                });
                pass.insert(p.forget_lifetime())
            }
        };
        self.dispatch_in(pass, kernel, bind, groups);
        self.launches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        st.since_submit += 1;
        let every = if st.submitted_in_step {
            crate::backend::SUBMIT_EVERY
        } else {
            crate::backend::FIRST_SUBMIT
        };
        if st.since_submit >= every {
            self.flush(st);
        }
        if let Some(p) = &self.profile {
            let t0 = std::time::Instant::now();
            self.flush(st);
            self.submitter.idle();
            self.ctx
                .device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| Error::invalid("profile", format!("wgpu: {e}")))?;
            p.add(label(), t0.elapsed());
        }
        Ok(())
    }
}

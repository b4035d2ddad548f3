//! The ops of one forward step, as every family calls them: a [`Step`] runs `Op` values through
//! the dispatcher inside one step's context and picks the fused form (`Op::Linear`,
//! `Op::AddLayerNorm`, token-major attention) where the primary backend runs it.

use cyb_backend::{Dispatcher, ExecContext};
use cyb_ops::{LinearAct, Op, SdpaLayout};
use cyb_tensor::{DType, Error, Result, Shape, Tensor, TensorInfo};

/// `y = x · wᵀ + b`.
pub(crate) struct Linear {
    pub w: Tensor,
    pub b: Option<Tensor>,
}

/// LayerNorm weight and bias.
pub(crate) struct Norm {
    pub w: Tensor,
    pub b: Tensor,
}

/// Runs ops through the dispatcher within one forward step.
pub(crate) struct Step<'a> {
    pub dispatcher: &'a Dispatcher,
    pub ctx: ExecContext,
}

impl Step<'_> {
    pub(crate) fn run(&mut self, op: Op, inputs: &[&Tensor]) -> Result<Tensor> {
        let inputs: Vec<Tensor> = inputs.iter().map(|&t| t.clone()).collect();
        let mut out = self.dispatcher.run_with(&op, &inputs, &mut self.ctx)?;
        if out.is_empty() {
            return Err(Error::invalid(op.name(), "returned no output"));
        }
        Ok(out.swap_remove(0))
    }

    pub(crate) fn linear(&mut self, x: &Tensor, l: &Linear) -> Result<Tensor> {
        self.linear_act(x, l, LinearAct::None)
    }

    /// `act(x · wᵀ + b)`: one `Op::Linear` where the primary backend runs it (and there is a
    /// bias), else `MatMul`, `Add` and the activation op.
    pub(crate) fn linear_act(&mut self, x: &Tensor, l: &Linear, act: LinearAct) -> Result<Tensor> {
        if let Some(b) = &l.b {
            let fused = Op::Linear {
                rhs_transposed: true,
                act,
            };
            if self.primary_supports(&fused, &[x, &l.w, b]) {
                return self.run(fused, &[x, &l.w, b]);
            }
        }
        let mm = Op::MatMul {
            rhs_transposed: true,
        };
        let mut y = self.run(mm, &[x, &l.w])?;
        if let Some(b) = &l.b {
            y = self.run(Op::Add, &[&y, b])?;
        }
        match act.op() {
            Some(op) => self.run(op, &[&y]),
            None => Ok(y),
        }
    }

    pub(crate) fn primary_supports(&self, op: &Op, inputs: &[&Tensor]) -> bool {
        let infos: Vec<TensorInfo> = inputs.iter().map(|t| t.info()).collect();
        self.dispatcher.primary().supports(op, &infos)
    }

    /// Attention (scale `1/sqrt(head_dim)`) of q, k, v `[.., seq, heads, head_dim]` (the
    /// projections reshaped) with an optional additive mask; the output is
    /// `[.., seq, heads, head_dim]` too. Token-major where the primary backend runs it, else
    /// head-major between permutes.
    pub(crate) fn attend(
        &mut self,
        head_dim: usize,
        qkv: [&Tensor; 3],
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        self.attend_as(head_dim, false, qkv, mask)
    }

    /// [`Step::attend`] with causal masking: query row `i` of `lq` sees the keys up to
    /// position `lk - lq + i` (the earlier ones come from a KV cache).
    pub(crate) fn attend_causal(&mut self, head_dim: usize, qkv: [&Tensor; 3]) -> Result<Tensor> {
        self.attend_as(head_dim, true, qkv, None)
    }

    fn attend_as(
        &mut self,
        head_dim: usize,
        causal: bool,
        [q, k, v]: [&Tensor; 3],
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let tokens = sdpa_op(SdpaLayout::TokenMajor, head_dim, causal);
        let mut inputs = vec![q, k, v];
        inputs.extend(mask);
        let infos = inputs
            .iter()
            .map(|t| (t.dims().to_vec(), t.dtype()))
            .collect();
        if runs_as(self.dispatcher, &tokens, infos) {
            return self.run(tokens, &inputs);
        }
        let r = q.dims().len();
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 3, r - 2);
        let (q, k, v) = (
            self.permute(q, &perm)?,
            self.permute(k, &perm)?,
            self.permute(v, &perm)?,
        );
        let mut inputs = vec![&q, &k, &v];
        inputs.extend(mask);
        let a = self.run(sdpa_op(SdpaLayout::HeadMajor, head_dim, causal), &inputs)?;
        self.permute(&a, &perm)
    }

    /// `LayerNorm(a + b)`: one `Op::AddLayerNorm` where the primary backend runs it.
    pub(crate) fn add_layer_norm(
        &mut self,
        a: &Tensor,
        b: &Tensor,
        n: &Norm,
        eps: f32,
    ) -> Result<Tensor> {
        let fused = Op::AddLayerNorm { eps };
        let inputs = [a, b, &n.w, &n.b];
        if self.primary_supports(&fused, &inputs) {
            let owned: Vec<Tensor> = inputs.iter().map(|&t| t.clone()).collect();
            let mut out = self.dispatcher.run_with(&fused, &owned, &mut self.ctx)?;
            if out.len() != 2 {
                return Err(Error::invalid(
                    fused.name(),
                    "expected the sum and its norm",
                ));
            }
            return Ok(out.swap_remove(1));
        }
        let s = self.run(Op::Add, &[a, b])?;
        self.layer_norm(&s, n, eps)
    }

    /// `x` cut along `axis` into pieces of `sizes`.
    pub(crate) fn split(
        &mut self,
        x: &Tensor,
        axis: isize,
        sizes: &[usize],
    ) -> Result<Vec<Tensor>> {
        let op = Op::Split {
            axis,
            sizes: sizes.to_vec(),
        };
        let parts = self
            .dispatcher
            .run_with(&op, std::slice::from_ref(x), &mut self.ctx)?;
        if parts.len() != sizes.len() {
            return Err(Error::invalid(
                op.name(),
                "returned the wrong number of parts",
            ));
        }
        Ok(parts)
    }

    pub(crate) fn layer_norm(&mut self, x: &Tensor, n: &Norm, eps: f32) -> Result<Tensor> {
        self.run(Op::LayerNorm { eps }, &[x, &n.w, &n.b])
    }

    pub(crate) fn reshape(&mut self, x: &Tensor, dims: &[usize]) -> Result<Tensor> {
        let dims = dims.iter().map(|&d| d as isize).collect();
        self.run(Op::Reshape { dims }, &[x])
    }

    pub(crate) fn permute(&mut self, x: &Tensor, perm: &[usize]) -> Result<Tensor> {
        self.run(
            Op::Permute {
                perm: perm.to_vec(),
            },
            &[x],
        )
    }
}

pub(crate) fn sdpa_op(layout: SdpaLayout, head_dim: usize, causal: bool) -> Op {
    Op::Sdpa {
        layout,
        scale: 1.0 / (head_dim as f32).sqrt(),
        causal,
        sliding_window: None,
        softcap: None,
        alibi_max_bias: None,
    }
}

/// Whether the primary backend of `dispatcher` runs `op` on F32 inputs of these dims.
pub(crate) fn runs(dispatcher: &Dispatcher, op: &Op, dims: Vec<Vec<usize>>) -> bool {
    runs_as(
        dispatcher,
        op,
        dims.into_iter().map(|d| (d, DType::F32)).collect(),
    )
}

/// Whether the primary backend of `dispatcher` runs `op` on inputs of these dims and dtypes.
pub(crate) fn runs_as(dispatcher: &Dispatcher, op: &Op, inputs: Vec<(Vec<usize>, DType)>) -> bool {
    let infos = inputs
        .into_iter()
        .map(|(dims, dtype)| Shape::new(dims).map(|shape| TensorInfo { shape, dtype }))
        .collect::<Result<Vec<_>>>();
    infos.is_ok_and(|infos| dispatcher.primary().supports(op, &infos))
}

/// The rows of rank-2 host tensors of one dtype and width stacked into one tensor (in shared
/// storage, so the cpu backend's weight caches take it like a file's), or `None` when they are
/// not all such tensors.
pub(crate) fn stack_rows(parts: &[&Tensor]) -> Option<Tensor> {
    let first = parts.first()?;
    let (dtype, width) = (first.dtype(), *first.dims().get(1)?);
    let fit = |p: &Tensor| p.dtype() == dtype && p.dims().len() == 2 && p.dims()[1] == width;
    if !parts.iter().all(|p| fit(p)) {
        return None;
    }
    let rows = parts.iter().map(|p| p.dims()[0]).sum();
    let bytes = parts
        .iter()
        .map(|p| p.host_bytes())
        .collect::<Option<Vec<_>>>()?;
    let len = bytes.iter().map(|b| b.len()).sum();
    let mut buf = cyb_tensor::AlignedBuf::for_overwrite(len);
    let mut at = 0;
    for b in bytes {
        buf.as_bytes_mut()[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    }
    let storage = cyb_tensor::Storage::Shared {
        owner: std::sync::Arc::new(buf),
        offset: 0,
        len,
    };
    Tensor::new(
        cyb_tensor::Shape::new(vec![rows, width]).ok()?,
        dtype,
        storage,
    )
    .ok()
}

/// Runs `body` inside one forward step of `dispatcher` (always ended, also after an error, once
/// the result is on the host) and returns its host result.
pub(crate) fn run_step(
    dispatcher: &Dispatcher,
    body: impl FnOnce(&mut Step<'_>) -> Result<Tensor>,
) -> Result<Tensor> {
    let mut out = None;
    run_ops(dispatcher, |step| {
        let t = body(step)?;
        out = Some(step.dispatcher.to_host(&t)?);
        Ok(())
    })?;
    out.ok_or_else(|| Error::invalid("step", "produced no output"))
}

/// Runs `body`'s ops within one step's context, bringing nothing back to the host: for work
/// whose results stay on the device (a cache copied into another).
pub(crate) fn run_ops(
    dispatcher: &Dispatcher,
    body: impl FnOnce(&mut Step<'_>) -> Result<()>,
) -> Result<()> {
    let mut step = Step {
        dispatcher,
        ctx: ExecContext::default(),
    };
    let begun = dispatcher.begin_step(&mut step.ctx);
    let result = begun.and_then(|()| body(&mut step));
    let ended = dispatcher.end_step(&mut step.ctx);
    result?;
    ended
}

/// A host tensor of `data` in shared (read-only) storage, as weights loaded from a file are:
/// what a family derives from its weights at load, so the backends cache their own forms of
/// it (repacked panels) as they do for the file's.
pub(crate) fn shared_f32(dims: &[usize], data: &[f32]) -> Result<Tensor> {
    let bytes: &[u8] = bytemuck::cast_slice(data);
    let mut buf = cyb_tensor::AlignedBuf::for_overwrite(bytes.len());
    buf.as_bytes_mut().copy_from_slice(bytes);
    let storage = cyb_tensor::Storage::Shared {
        len: bytes.len(),
        owner: std::sync::Arc::new(buf),
        offset: 0,
    };
    Tensor::new(Shape::new(dims)?, DType::F32, storage)
}

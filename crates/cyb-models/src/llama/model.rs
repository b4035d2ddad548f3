//! The LlamaStyle family: Llama 2/3/3.1/3.2, Mistral, SmolLM, Qwen2/2.5, Qwen3, Gemma 1/2/3
//! and Phi-3, as one decoder block whose differences are switches of [`LlamaConfig`].
//!
//! One block, pre-norm residual:
//! ```text
//! h = rms_norm(x) → q, k, v (+ biases) → [q/k norm] → rope → attention with the KV cache
//!   → o_proj → [post-attention norm] → x += ·
//! h = rms_norm(x) → act(gate) · up → down → [post-feed-forward norm] → x += ·
//! ```
//! then the final norm, the output projection and an optional logit softcap. Every step is an
//! `Op` run by the dispatcher, so the same code runs on every backend; weights are passed in
//! whatever dtype the file stores (quantized matmuls read the packed blocks in place).

use super::config::{Activation, LayerAttention, LlamaConfig};
use super::graph::llama_graph;
use super::kv_cache::KvCache;
use super::lora::{LoraAdapter, LoraTarget};
use super::replay::StepKind;
use super::weights::{GateUpWeights, LayerWeights, LlamaWeights, QkvWeights};
use cyb_backend::{Dispatcher, ExecContext};
use cyb_format::ModelFile;
use cyb_graph::{ExecPlan, Executor, Graph};
use cyb_ops::{GeluApprox, Op, SdpaLayout};
use cyb_tensor::{Error, Result, Tensor};
use std::collections::HashMap;
use std::sync::Arc;

/// A loaded LlamaStyle model: its config, its weights (in place in the file mapping) and the
/// dispatcher that runs its ops.
pub struct LlamaModel {
    config: LlamaConfig,
    weights: LlamaWeights,
    dispatcher: Arc<Dispatcher>,
    /// Set by [`LlamaModel::use_graph_path`]: steps run the graph template instead.
    graphs: Option<Box<GraphTemplates>>,
    /// Unique per loaded model: a cache's replay plans (replay.rs) hold this model's weights,
    /// so they are dropped when the cache is used with another model.
    id: u64,
    /// LoRA adapters loaded with the model and the scale each is used with unless a session
    /// sets its own ([`KvCache::set_lora_scales`]).
    loras: Vec<(Arc<LoraAdapter>, f32)>,
}

/// One sequence of a batched step ([`LlamaModel::forward_batch`]): the tokens it feeds and
/// its own cache.
pub struct BatchSeq<'a> {
    pub tokens: &'a [u32],
    pub cache: &'a mut KvCache,
}

/// `n` new tokens are at least one and fit in what `cache` has left.
fn check_fits(n: usize, cache: &KvCache) -> Result<()> {
    if n == 0 {
        return Err(Error::invalid("forward", "no tokens to process"));
    }
    if n > cache.remaining() {
        return Err(Error::invalid(
            "forward",
            format!(
                "{n} tokens do not fit in the context: {} of {} positions are already used \
                 ({} left); start a session with a larger context",
                cache.len(),
                cache.capacity(),
                cache.remaining()
            ),
        ));
    }
    Ok(())
}

/// The graph template twice: logits of the last token only, and of every token.
struct GraphTemplates {
    last: Graph,
    all: Graph,
    /// Their execution plans, made once.
    plans: [ExecPlan; 2],
}

impl std::fmt::Debug for LlamaModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaModel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Runs ops through the dispatcher within one forward step.
struct Step<'a> {
    dispatcher: &'a Dispatcher,
    ctx: ExecContext,
    /// The LoRA adapters this step applies, with their scales (none of 0).
    lora: Vec<(Arc<LoraAdapter>, f32)>,
}

impl Step<'_> {
    fn run(&mut self, op: Op, inputs: &[&Tensor]) -> Result<Tensor> {
        let inputs: Vec<Tensor> = inputs.iter().map(|&t| t.clone()).collect();
        let mut out = self.dispatcher.run_with(&op, &inputs, &mut self.ctx)?;
        if out.is_empty() {
            return Err(Error::invalid(op.name(), "returned no output"));
        }
        Ok(out.swap_remove(0))
    }

    /// `x · wᵀ (+ b)`.
    fn linear(&mut self, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let y = self.run(
            Op::MatMul {
                rhs_transposed: true,
            },
            &[x, w],
        )?;
        match bias {
            Some(b) => self.run(Op::Add, &[&y, b]),
            None => Ok(y),
        }
    }

    /// `y` (the projection `target` of block `layer` applied to `x`) plus each active LoRA
    /// adapter's `scale · (x · Aᵀ) · Bᵀ` for it.
    fn lora(&mut self, y: Tensor, x: &Tensor, layer: usize, target: LoraTarget) -> Result<Tensor> {
        let mut y = y;
        for k in 0..self.lora.len() {
            let (adapter, scale) = self.lora[k].clone();
            let Some(pair) = adapter.pair(layer, target) else {
                continue;
            };
            let low = self.linear(x, &pair.a, None)?;
            let delta = self.linear(&low, &pair.b, None)?;
            let delta = self.run(
                Op::Scale {
                    factor: scale * pair.scale,
                },
                &[&delta],
            )?;
            y = self.run(Op::Add, &[&y, &delta])?;
        }
        Ok(y)
    }

    /// Whether an active adapter changes `target` of block `layer`.
    fn adapts(&self, layer: usize, target: LoraTarget) -> bool {
        self.lora
            .iter()
            .any(|(a, _)| a.pair(layer, target).is_some())
    }

    fn rms_norm(&mut self, cfg: &LlamaConfig, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        let op = Op::RmsNorm {
            eps: cfg.norm_eps,
            weight_offset: cfg.norm_weight_offset,
        };
        self.run(op, &[x, w])
    }

    /// `(a + b, rms_norm(a + b, w))` as one `Op::AddRmsNorm`.
    fn add_rms_norm(
        &mut self,
        cfg: &LlamaConfig,
        a: &Tensor,
        b: &Tensor,
        w: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let op = Op::AddRmsNorm {
            eps: cfg.norm_eps,
            weight_offset: cfg.norm_weight_offset,
        };
        let inputs = [a.clone(), b.clone(), w.clone()];
        let mut out = self.dispatcher.run_with(&op, &inputs, &mut self.ctx)?;
        if out.len() != 2 {
            return Err(Error::invalid(op.name(), "expected the sum and its norm"));
        }
        let normed = out.swap_remove(1);
        Ok((out.swap_remove(0), normed))
    }

    /// Rows `start..end` of `x` (along its first dim).
    fn rows(&mut self, x: &Tensor, start: usize, end: usize) -> Result<Tensor> {
        let op = Op::Slice {
            axis: 0,
            start: start as isize,
            end: end as isize,
            step: 1,
        };
        self.run(op, &[x])
    }

    fn reshape(&mut self, x: &Tensor, dims: &[usize]) -> Result<Tensor> {
        let dims = dims.iter().map(|&d| d as isize).collect();
        self.run(Op::Reshape { dims }, &[x])
    }

    /// `c · tanh(x / c)`.
    fn softcap(&mut self, x: &Tensor, c: f32) -> Result<Tensor> {
        let y = self.run(Op::Scale { factor: 1.0 / c }, &[x])?;
        let y = self.run(Op::Tanh, &[&y])?;
        self.run(Op::Scale { factor: c }, &[&y])
    }
}

impl LlamaModel {
    /// Resolves the config from `file` and checks that every tensor it needs is present with
    /// the right shape (`MissingTensor` / `ShapeMismatch` name the tensor; an architecture
    /// outside the family is an `InvalidConfig` naming it).
    pub fn load(file: &ModelFile, dispatcher: Arc<Dispatcher>) -> Result<LlamaModel> {
        let config = LlamaConfig::from_file(file)?;
        LlamaModel::load_with_config(file, config, dispatcher)
    }

    /// As [`load`](LlamaModel::load) with a config resolved (or adjusted) by the caller.
    pub fn load_with_config(
        file: &ModelFile,
        config: LlamaConfig,
        dispatcher: Arc<Dispatcher>,
    ) -> Result<LlamaModel> {
        // A backend that pays per op gets small projections of one input stacked.
        let stack = dispatcher.primary().prefers_stacked_projections();
        let weights = LlamaWeights::load(file, &config, stack)?;
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Ok(LlamaModel {
            config,
            weights,
            dispatcher,
            graphs: None,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            loras: Vec::new(),
        })
    }

    /// Loads the LoRA adapter at `path` (llama.cpp GGUF adapter or PEFT directory) and applies
    /// it to every later step at `scale` unless a session sets its own scales; adapters apply
    /// in the order they were added, and a session's scales follow that order.
    pub fn add_lora(&mut self, path: &std::path::Path, scale: f32) -> Result<()> {
        if self.graphs.is_some() {
            return Err(Error::invalid(
                "lora",
                "LoRA adapters run on the curated path only, not with --path graph",
            ));
        }
        let adapter = LoraAdapter::load(path, &self.config)?;
        self.loras.push((Arc::new(adapter), scale));
        Ok(())
    }

    /// The LoRA adapters loaded with the model and their default scales.
    pub fn loras(&self) -> &[(Arc<LoraAdapter>, f32)] {
        &self.loras
    }

    /// The adapters a step for `cache` applies: the model's, at the cache's scales where it
    /// has its own; none with a scale of 0.
    fn active_lora(&self, cache: &KvCache) -> Result<Vec<(Arc<LoraAdapter>, f32)>> {
        let scales: Vec<f32> = match cache.lora_scales() {
            Some(s) if s.len() != self.loras.len() => {
                return Err(Error::invalid(
                    "lora",
                    format!(
                        "the session sets {} LoRA scales; the model has {} adapters",
                        s.len(),
                        self.loras.len()
                    ),
                ))
            }
            Some(s) => s.to_vec(),
            None => self.loras.iter().map(|(_, s)| *s).collect(),
        };
        Ok(self
            .loras
            .iter()
            .zip(scales)
            .filter(|(_, s)| *s != 0.0)
            .map(|((a, _), s)| (a.clone(), s))
            .collect())
    }

    /// Runs every later step through the graph executor over the family's graph template
    /// (`--path graph`) instead of the curated code; the KV cache stays on the host.
    pub fn use_graph_path(&mut self) -> Result<()> {
        if !self.loras.is_empty() {
            return Err(Error::invalid(
                "lora",
                "LoRA adapters run on the curated path only, not with --path graph",
            ));
        }
        let fused = |mut g: Graph| -> Result<Graph> {
            cyb_graph::infer_types(&mut g)?;
            cyb_graph::fuse_for_backend(&mut g, self.dispatcher.primary().as_ref());
            Ok(g)
        };
        let (last, all) = (
            fused(self.template_graph(true)?)?,
            fused(self.template_graph(false)?)?,
        );
        self.graphs = Some(Box::new(GraphTemplates {
            plans: [ExecPlan::new(&last)?, ExecPlan::new(&all)?],
            last,
            all,
        }));
        Ok(())
    }

    /// The graphs the graph path runs (last-token logits, all logits), after type inference
    /// and the fusion pass for the primary backend; `None` on the curated path.
    pub fn graph_path_graphs(&self) -> Option<(&Graph, &Graph)> {
        self.graphs.as_ref().map(|g| (&g.last, &g.all))
    }

    /// Whether steps run through the graph executor.
    pub fn uses_graph_path(&self) -> bool {
        self.graphs.is_some()
    }

    /// The model as a graph (see `llama_graph`): logits of the last token when `last_only`,
    /// else of every token.
    pub fn template_graph(&self, last_only: bool) -> Result<Graph> {
        llama_graph(&self.config, &self.weights, last_only)
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.dispatcher
    }

    /// A KV cache for a session of up to `max_ctx` tokens.
    pub fn new_cache(&self, max_ctx: usize) -> Result<KvCache> {
        let c = &self.config;
        let (l, h, d) = (c.num_layers, c.num_kv_heads, c.head_dim);
        // A device backend that can append keeps the cache in its own memory (the graph path
        // writes host caches).
        if self.graphs.is_none() {
            return KvCache::on_backend_or_host(
                self.dispatcher.primary().as_ref(),
                l,
                h,
                d,
                max_ctx,
            );
        }
        KvCache::new(l, h, d, max_ctx)
    }

    /// Feeds `tokens` after what `cache` holds and returns the logits `[vocab]` of the last one.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<f32>> {
        let d = &self.dispatcher;
        self.run_forward(tokens, cache, StepKind::LastLogits, &[], |l| {
            d.to_host_f32(l)
        })
    }

    /// As [`forward`](LlamaModel::forward) with some inputs given as embeddings: each
    /// `(row, e)` puts `e` `[k, hidden]` (image features from a vision-language connector) in
    /// place of the embeddings of `tokens[row..row + k]` (their ids, an image placeholder, are
    /// not looked up). The spans are in order and do not overlap; after the model's embedding
    /// scale, so the features go in as the connector made them.
    pub fn forward_with_embeds(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        inject: &[(usize, Tensor)],
    ) -> Result<Vec<f32>> {
        let d = &self.dispatcher;
        self.run_forward(tokens, cache, StepKind::LastLogits, inject, |l| {
            d.to_host_f32(l)
        })
    }

    /// As [`forward`](LlamaModel::forward), returning the logits of every token,
    /// `[tokens.len(), vocab]` row-major (for perplexity).
    pub fn forward_all(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<f32>> {
        let d = &self.dispatcher;
        self.run_forward(tokens, cache, StepKind::AllLogits, &[], |l| {
            d.to_host_f32(l)
        })
    }

    /// As [`forward`](LlamaModel::forward), returning only the index of the largest logit
    /// (greedy decoding; `Op::ArgMax`: the first on ties, and a NaN logit counts as the
    /// largest). On a device backend the logits stay there and one index is read back.
    pub fn forward_argmax(&self, tokens: &[u32], cache: &mut KvCache) -> Result<u32> {
        let d = &self.dispatcher;
        self.run_forward(tokens, cache, StepKind::ArgMax, &[], |i| {
            let i = d.to_host(i)?.to_i64_vec()?;
            let first = i.first().copied().unwrap_or(0);
            u32::try_from(first).map_err(|_| Error::invalid("argmax", format!("index {first}")))
        })
    }

    /// Several sequences advanced in one forward step: each feeds its `tokens` after what its
    /// own cache holds, and gets the logits `[vocab]` of its last token. The projections and
    /// feed-forwards run once over the tokens of all sequences (their matmuls read each weight
    /// once for the whole batch); attention runs per sequence over its own cache and positions.
    pub fn forward_batch(&self, seqs: &mut [BatchSeq<'_>]) -> Result<Vec<Vec<f32>>> {
        if let [one] = seqs {
            return Ok(vec![self.forward(one.tokens, one.cache)?]);
        }
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        if self.graphs.is_some() {
            // The graph template takes one sequence: run them in turn.
            return seqs
                .iter_mut()
                .map(|s| self.forward(s.tokens, s.cache))
                .collect();
        }
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut lens = Vec::with_capacity(seqs.len());
        for s in seqs.iter() {
            self.check_cache(s.cache)?;
            check_fits(s.tokens.len(), s.cache)?;
            let start = s.cache.len();
            ids.extend(s.tokens.iter().map(|&t| i64::from(t)));
            positions.extend((start..start + s.tokens.len()).map(|p| p as i64));
            lens.push(s.tokens.len());
        }
        // Sequences with different LoRA scales cannot share the step's projections.
        let lora = self.active_lora(seqs[0].cache)?;
        let same = |l: &[(Arc<LoraAdapter>, f32)]| {
            l.len() == lora.len()
                && l.iter()
                    .zip(&lora)
                    .all(|(a, b)| Arc::ptr_eq(&a.0, &b.0) && a.1 == b.1)
        };
        for s in seqs.iter().skip(1) {
            if !same(&self.active_lora(s.cache)?) {
                return seqs
                    .iter_mut()
                    .map(|s| self.forward(s.tokens, s.cache))
                    .collect();
            }
        }
        let m = ids.len();
        let ids = Tensor::from_i64(&[m], &ids)?;
        let positions = Tensor::from_i64(&[m], &positions)?;
        let mut caches: Vec<&mut KvCache> = seqs.iter_mut().map(|s| &mut *s.cache).collect();
        let mut step = Step {
            dispatcher: &self.dispatcher,
            ctx: ExecContext::default(),
            lora,
        };
        let d = &self.dispatcher;
        let begun = d.begin_step(&mut step.ctx);
        let result = begun
            .and_then(|()| {
                self.step_body(&mut step, &mut caches, &lens, &ids, &positions, true, &[])
            })
            .and_then(|logits| d.to_host_f32(&logits));
        let ended = d.end_step(&mut step.ctx);
        let logits = result?;
        ended?;
        let vocab = logits.len() / lens.len();
        Ok(logits.chunks_exact(vocab).map(<[f32]>::to_vec).collect())
    }

    /// One forward step: the step's result (`kind`) is made on the backend, then `read`
    /// brings it to the host before the step ends.
    ///
    /// A decode step (one token) on a device backend with the cache in its memory may instead
    /// run from the backend's recording of earlier steps (`Backend::replay`, replay.rs): the
    /// same launches with this token's id and position, without the model's op-by-op path.
    fn run_forward<T>(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        kind: StepKind,
        inject: &[(usize, Tensor)],
        read: impl FnOnce(&Tensor) -> Result<T>,
    ) -> Result<T> {
        self.check_cache(cache)?;
        let n = tokens.len();
        check_fits(n, cache)?;
        if !inject.is_empty() && self.graphs.is_some() {
            return Err(Error::invalid(
                "forward",
                "the graph path takes token ids only; run a vision-language model with --path \
                 curated or auto",
            ));
        }
        let start = cache.len();
        let ids: Vec<i64> = tokens.iter().map(|&t| i64::from(t)).collect();
        let ids = Tensor::from_i64(&[n], &ids)?;
        let positions: Vec<i64> = (start..start + n).map(|p| p as i64).collect();
        let positions = Tensor::from_i64(&[n], &positions)?;
        let last_only = kind != StepKind::AllLogits;

        let mut step = Step {
            dispatcher: &self.dispatcher,
            ctx: ExecContext::default(),
            lora: self.active_lora(cache)?,
        };
        if let Some(graphs) = &self.graphs {
            let (graph, plan) = match last_only {
                true => (&graphs.last, &graphs.plans[0]),
                false => (&graphs.all, &graphs.plans[1]),
            };
            let logits = self.graph_step(graph, plan, cache, ids, positions, n)?;
            let begun = self.dispatcher.begin_step(&mut step.ctx);
            let result = begun
                .and_then(|()| Self::finish(&mut step, kind, logits))
                .and_then(|out| read(&out));
            let ended = self.dispatcher.end_step(&mut step.ctx);
            let out = result?;
            ended?;
            return Ok(out);
        }
        // A replayed step's host inputs, in this order: the token id, the position.
        let host = ids.host_bytes().zip(positions.host_bytes());
        let replayable = n == 1 && inject.is_empty() && cache.on_device() && host.is_some();
        cache.replays.bind(self.id);
        let primary = self.dispatcher.primary();
        let len = start + n;
        // The step is always ended, also after an error, and only once the result is on the
        // host: a backend may recycle the step's buffers when the next step begins.
        let begun = self.dispatcher.begin_step(&mut step.ctx);
        if let (true, Some((i, p))) = (begun.is_ok() && replayable, host) {
            if let Some((plan, steps)) = cache.replays.plan(kind, len) {
                let result = self
                    .check_ids(tokens)
                    .and_then(|()| primary.replay(plan, steps, &[i, p]));
                let result = result.and_then(|out| {
                    cache.commit(n)?;
                    read(&out)
                });
                let ended = self.dispatcher.end_step(&mut step.ctx);
                let out = result?;
                ended?;
                return Ok(out);
            }
        }
        let capturing = begun.is_ok()
            && replayable
            && cache.replays.wants(kind, len)
            && primary.begin_capture();
        let result = begun
            .and_then(|()| {
                let lens = [n];
                let caches: &mut [&mut KvCache] = &mut [&mut *cache];
                self.step_body(
                    &mut step, caches, &lens, &ids, &positions, last_only, inject,
                )
            })
            .and_then(|logits| Self::finish(&mut step, kind, logits));
        let result = result.and_then(|out| {
            if capturing {
                let rec = primary.end_capture(&out);
                let rec = rec
                    .zip(host)
                    .map(|(r, (i, p))| (r, vec![i.to_vec(), p.to_vec()]));
                // A plan that cannot be made (its buffers cannot be allocated) only means the
                // steps go on through the model.
                cache.replays.add(kind, len, rec, |steps| {
                    primary.plan_replay(steps, &out).ok().flatten()
                });
            }
            read(&out)
        });
        let ended = self.dispatcher.end_step(&mut step.ctx);
        let out = result?;
        ended?;
        Ok(out)
    }

    /// The step's result on the backend from its logits: the logits, or their argmax.
    fn finish(step: &mut Step<'_>, kind: StepKind, logits: Tensor) -> Result<Tensor> {
        match kind {
            StepKind::ArgMax => step.run(Op::ArgMax { axis: -1 }, &[&logits]),
            StepKind::LastLogits | StepKind::AllLogits => Ok(logits),
        }
    }

    /// The embedding op's check of token ids, for a step that does not run the op.
    fn check_ids(&self, tokens: &[u32]) -> Result<()> {
        let rows = self.weights.embed.dims().first().copied().unwrap_or(0);
        match tokens.iter().find(|&&t| t as usize >= rows) {
            Some(bad) => Err(Error::invalid(
                "embedding",
                format!("id {bad} is outside the table of {rows} rows"),
            )),
            None => Ok(()),
        }
    }

    /// The body of one forward step over one or more sequences (`lens[j]` new tokens of
    /// sequence `j`, in order in `ids` and `positions`, each with its cache): embedding, the
    /// blocks, the final norm and the output projection; returns the logits where the
    /// backend left them (the last token's of each sequence when `last_only`). `inject`
    /// replaces rows of the embeddings (see [`LlamaModel::forward_with_embeds`]).
    #[allow(clippy::too_many_arguments)]
    fn step_body(
        &self,
        step: &mut Step<'_>,
        caches: &mut [&mut KvCache],
        lens: &[usize],
        ids: &Tensor,
        positions: &Tensor,
        last_only: bool,
        inject: &[(usize, Tensor)],
    ) -> Result<Tensor> {
        let cfg = &self.config;
        let mut x = step.run(Op::Embedding, &[&self.weights.embed, ids])?;
        if let Some(s) = cfg.embedding_scale {
            x = step.run(Op::Scale { factor: s }, &[&x])?;
        }
        if !inject.is_empty() {
            x = self.splice_rows(step, x, inject)?;
        }
        // Each block's input norm is fused with the residual add that precedes it
        // (`Op::AddRmsNorm`: the sum and its norm from one op).
        let layers = &self.weights.layers;
        let mut h = match layers.first() {
            Some(l) => step.rms_norm(cfg, &x, &l.attn_norm)?,
            None => x.clone(),
        };
        for (i, (layer, attn)) in layers.iter().zip(&cfg.layers).enumerate() {
            let a = self.attention(step, i, layer, attn, &h, positions, caches, lens)?;
            let (sum, normed) = step.add_rms_norm(cfg, &x, &a, &layer.ffn_norm)?;
            let m = self.feed_forward(step, i, layer, &normed)?;
            match layers.get(i + 1) {
                Some(next) => (x, h) = step.add_rms_norm(cfg, &sum, &m, &next.attn_norm)?,
                None => x = step.run(Op::Add, &[&sum, &m])?,
            }
        }
        for (cache, &n) in caches.iter_mut().zip(lens) {
            cache.commit(n)?;
        }
        let total: usize = lens.iter().sum();
        if last_only && total > lens.len() {
            let mut end = 0;
            let mut rows = Vec::with_capacity(lens.len());
            for &n in lens {
                end += n;
                rows.push(step.rows(&x, end - 1, end)?);
            }
            x = match rows.len() {
                1 => rows.swap_remove(0),
                _ => step.run(Op::Concat { axis: 0 }, &rows.iter().collect::<Vec<_>>())?,
            };
        }
        x = step.rms_norm(cfg, &x, &self.weights.output_norm)?;
        let mut logits = step.linear(&x, &self.weights.output, None)?;
        if let Some(c) = cfg.final_softcap {
            logits = step.softcap(&logits, c)?;
        }
        Ok(logits)
    }

    /// `x` `[n, hidden]` with the spans of `inject` in place of its rows.
    fn splice_rows(
        &self,
        step: &mut Step<'_>,
        x: Tensor,
        inject: &[(usize, Tensor)],
    ) -> Result<Tensor> {
        let (n, hidden) = (x.dims()[0], self.config.hidden_size);
        let mut parts = Vec::with_capacity(2 * inject.len() + 1);
        let mut at = 0;
        for (row, e) in inject {
            let k = e.dims().first().copied().unwrap_or(0);
            if *row < at || row + k > n || k == 0 || e.dims() != [k, hidden] {
                return Err(Error::invalid(
                    "forward",
                    format!(
                        "embeddings {:?} at row {row} do not fit {n} tokens of width {hidden} \
                         (spans must be in order and apart)",
                        e.dims()
                    ),
                ));
            }
            if *row > at {
                parts.push(step.rows(&x, at, *row)?);
            }
            parts.push(e.clone());
            at = row + k;
        }
        if at < n {
            parts.push(step.rows(&x, at, n)?);
        }
        match parts.len() {
            1 => Ok(parts.swap_remove(0)),
            _ => step.run(Op::Concat { axis: 0 }, &parts.iter().collect::<Vec<_>>()),
        }
    }

    /// One step through the graph executor: the cached prefix goes in, the new keys and
    /// values come out and are appended to the cache; returns the logits (on the host).
    fn graph_step(
        &self,
        graph: &Graph,
        plan: &ExecPlan,
        cache: &mut KvCache,
        ids: Tensor,
        positions: Tensor,
        n: usize,
    ) -> Result<Tensor> {
        let exec = Executor::with_plan(graph, plan, &self.dispatcher)?;
        let mut inputs = HashMap::new();
        inputs.insert("ids".to_string(), ids);
        inputs.insert("positions".to_string(), positions);
        for i in 0..self.config.num_layers {
            let (k, v) = cache.host_prefix(i)?;
            inputs.insert(format!("past_k.{i}"), k);
            inputs.insert(format!("past_v.{i}"), v);
        }
        let (outs, _) = exec.run(&inputs)?;
        let mut outs: HashMap<String, Tensor> = outs.into_iter().collect();
        let mut take = |name: String| {
            outs.remove(&name).ok_or_else(|| Error::MissingTensor {
                name,
                required_by: "llama graph template outputs".into(),
            })
        };
        for i in 0..self.config.num_layers {
            let k = take(format!("k.{i}"))?;
            let v = take(format!("v.{i}"))?;
            cache.append(i, &k, &v)?;
        }
        let logits = take("logits".to_string())?;
        cache.commit(n)?;
        Ok(logits)
    }

    fn check_cache(&self, cache: &KvCache) -> Result<()> {
        let c = &self.config;
        let want = [c.num_layers, c.num_kv_heads, c.head_dim];
        let got = [cache.num_layers(), cache.kv_heads(), cache.head_dim()];
        if want != got {
            return Err(Error::ShapeMismatch {
                op: "forward: kv cache [layers, kv_heads, head_dim]".into(),
                expected: want.to_vec(),
                got: got.to_vec(),
            });
        }
        Ok(())
    }

    /// Self-attention of block `i` for the new tokens, `h` `[n, hidden]` (the block input
    /// after its norm; `lens[j]` rows for sequence `j`, with cache `caches[j]`); writes their
    /// keys and values into the caches and returns the block's attention output `[n, hidden]`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        step: &mut Step,
        i: usize,
        layer: &LayerWeights,
        attn: &LayerAttention,
        h: &Tensor,
        positions: &Tensor,
        caches: &mut [&mut KvCache],
        lens: &[usize],
    ) -> Result<Tensor> {
        let cfg = &self.config;
        let (n, d) = (h.dims()[0], cfg.head_dim);
        let (hq, hkv) = (cfg.num_heads, cfg.num_kv_heads);
        let (q, k, v) = match &layer.qkv {
            QkvWeights::Split { q, k, v } => (
                step.linear(h, q, None)?,
                step.linear(h, k, None)?,
                step.linear(h, v, None)?,
            ),
            QkvWeights::Fused(w) => {
                let qkv = step.linear(h, w, None)?;
                let qkv = step.lora(qkv, h, i, LoraTarget::Qkv)?;
                let split = Op::Split {
                    axis: -1,
                    sizes: vec![hq * d, hkv * d, hkv * d],
                };
                let inputs = [qkv];
                let mut parts = self.dispatcher.run_with(&split, &inputs, &mut step.ctx)?;
                if parts.len() != 3 {
                    return Err(Error::invalid("split", "expected q, k and v"));
                }
                let v = parts.swap_remove(2);
                let k = parts.swap_remove(1);
                (parts.swap_remove(0), k, v)
            }
        };
        // Adapters of the split projections apply to q, k and v also where the weights were
        // stacked into one.
        let q = step.lora(q, h, i, LoraTarget::Q)?;
        let k = step.lora(k, h, i, LoraTarget::K)?;
        let v = step.lora(v, h, i, LoraTarget::V)?;
        let add_bias = |step: &mut Step, t: Tensor, b: &Option<Tensor>| match b {
            Some(b) => step.run(Op::Add, &[&t, b]),
            None => Ok(t),
        };
        let q = add_bias(step, q, &layer.q_bias)?;
        let k = add_bias(step, k, &layer.k_bias)?;
        let v = add_bias(step, v, &layer.v_bias)?;
        let mut q = step.reshape(&q, &[n, hq, d])?;
        let mut k = step.reshape(&k, &[n, hkv, d])?;
        let v = step.reshape(&v, &[n, hkv, d])?;
        if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
            q = step.rms_norm(cfg, &q, qn)?;
            k = step.rms_norm(cfg, &k, kn)?;
        }
        let rope = Op::Rope {
            layout: cfg.rope_layout,
            rot_dims: cfg.rot_dims,
            base: attn.rope_base,
            scaling: attn.rope_scaling,
        };
        let (q, k) = match &self.weights.rope_freqs {
            Some(f) => (
                step.run(rope.clone(), &[&q, positions, f])?,
                step.run(rope, &[&k, positions, f])?,
            ),
            None => (
                step.run(rope.clone(), &[&q, positions])?,
                step.run(rope, &[&k, positions])?,
            ),
        };
        let a = match caches {
            [cache] => self.attend(step, i, attn, q, k, v, cache)?,
            _ => {
                // Each sequence attends over its own cache: its rows of q, k and v.
                let mut outs = Vec::with_capacity(lens.len());
                let mut start = 0;
                for (cache, &len) in caches.iter_mut().zip(lens) {
                    let end = start + len;
                    let (q, k, v) = (
                        step.rows(&q, start, end)?,
                        step.rows(&k, start, end)?,
                        step.rows(&v, start, end)?,
                    );
                    outs.push(self.attend(step, i, attn, q, k, v, cache)?);
                    start = end;
                }
                step.run(Op::Concat { axis: 0 }, &outs.iter().collect::<Vec<_>>())?
            }
        };
        let o = step.linear(&a, &layer.attn_out, None)?;
        let a = step.lora(o, &a, i, LoraTarget::Out)?;
        match &layer.post_attn_norm {
            Some(w) => step.rms_norm(cfg, &a, w),
            None => Ok(a),
        }
    }

    /// Attention of one sequence's new tokens (`q` `[n, heads, d]`, `k` and `v`
    /// `[n, kv_heads, d]`, after rope) over its cache in block `i`, after appending `k` and
    /// `v` there; returns `[n, heads · d]`.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        step: &mut Step,
        i: usize,
        attn: &LayerAttention,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        let cfg = &self.config;
        let (n, d, hq) = (q.dims()[0], cfg.head_dim, cfg.num_heads);
        // A device cache is head-major (`[kv_heads, capacity, d]`, the prefix sliced there); a
        // host cache hands out its token-major prefix in place (`[len, kv_heads, d]`), which
        // attention reads as it is, with q and the output in the projections' layout.
        let (k_all, v_all, layout) = if cache.on_device() {
            let (start, (ck, cv)) = (cache.len(), cache.device_layer(i)?);
            let append = Op::KvAppend { start };
            let k_cap = step.run(append.clone(), &[&ck, &k])?;
            let v_cap = step.run(append, &[&cv, &v])?;
            cache.set_device_layer(i, k_cap.clone(), v_cap.clone())?;
            let prefix = Op::Slice {
                axis: 1,
                start: 0,
                end: (start + n) as isize,
                step: 1,
            };
            (
                step.run(prefix.clone(), &[&k_cap])?,
                step.run(prefix, &[&v_cap])?,
                SdpaLayout::HeadMajor,
            )
        } else {
            // A host cache keeps f32 rows; a device backend's outputs are brought back first.
            let k = self.dispatcher.to_host(&k)?;
            let v = self.dispatcher.to_host(&v)?;
            let (k_all, v_all) = cache.write(i, &k, &v)?;
            (k_all, v_all, SdpaLayout::TokenMajor)
        };
        let swap = Op::Permute {
            perm: vec![1, 0, 2],
        };
        let head_major = layout == SdpaLayout::HeadMajor;
        let q = match head_major {
            true => step.run(swap.clone(), &[&q])?,
            false => q,
        };
        let sdpa = Op::Sdpa {
            layout,
            scale: cfg.attention_scale,
            causal: true,
            sliding_window: attn.sliding_window,
            softcap: cfg.attn_softcap,
            alibi_max_bias: None,
        };
        let a = step.run(sdpa, &[&q, &k_all, &v_all])?;
        let a = match head_major {
            true => step.run(swap, &[&a])?,
            false => a,
        };
        step.reshape(&a, &[n, hq * d])
    }

    /// The gated feed-forward of one block for `h` `[n, hidden]`, the residual stream after
    /// the block's feed-forward norm.
    fn feed_forward(
        &self,
        step: &mut Step,
        i: usize,
        layer: &LayerWeights,
        h: &Tensor,
    ) -> Result<Tensor> {
        let cfg = &self.config;
        let glu = match cfg.activation {
            Activation::SwiGlu => Op::SwiGlu,
            Activation::GeGluTanh => Op::GeGlu {
                approx: GeluApprox::Tanh,
            },
        };
        let split_lora = step.adapts(i, LoraTarget::Gate) || step.adapts(i, LoraTarget::Up);
        let act = match &layer.gate_up {
            GateUpWeights::Split { gate, up } => {
                let g = step.linear(h, gate, None)?;
                let u = step.linear(h, up, None)?;
                let g = step.lora(g, h, i, LoraTarget::Gate)?;
                let u = step.lora(u, h, i, LoraTarget::Up)?;
                step.run(glu, &[&g, &u])?
            }
            // One [.., 2·inter] input: the first half is the gate, as SwiGlu/GeGlu specify.
            GateUpWeights::Fused(w) => {
                let gu = step.linear(h, w, None)?;
                let gu = step.lora(gu, h, i, LoraTarget::GateUp)?;
                if split_lora {
                    // Weights stacked at load, adapters of the gate and up projections.
                    let inter = cfg.intermediate_size;
                    let split = Op::Split {
                        axis: -1,
                        sizes: vec![inter, inter],
                    };
                    let mut parts = self.dispatcher.run_with(&split, &[gu], &mut step.ctx)?;
                    if parts.len() != 2 {
                        return Err(Error::invalid("split", "expected gate and up"));
                    }
                    let u = step.lora(parts.swap_remove(1), h, i, LoraTarget::Up)?;
                    let g = step.lora(parts.swap_remove(0), h, i, LoraTarget::Gate)?;
                    step.run(glu, &[&g, &u])?
                } else {
                    step.run(glu, &[&gu])?
                }
            }
        };
        let down = step.linear(&act, &layer.down, None)?;
        let y = step.lora(down, &act, i, LoraTarget::Down)?;
        match &layer.post_ffw_norm {
            Some(w) => step.rms_norm(cfg, &y, w),
            None => Ok(y),
        }
    }
}

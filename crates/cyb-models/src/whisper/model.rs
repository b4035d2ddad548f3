//! The WhisperStyle encoder–decoder, every step an `Op` run by the dispatcher:
//!
//! ```text
//! encoder:  x = gelu(conv2(gelu(conv1(mel))))  (kernel 3, padding 1; conv2 of stride 2)
//!           x = x + position[0..n]             (sinusoidal, stored as a table)
//!           per block (pre-LN):  x = x + out(attention(LN(x)))
//!                                x = x + fc2(gelu(fc1(LN(x))))
//!           states = LN(x);  per decoder layer, cross keys/values = states · Wk, Wv (once)
//! decoder:  x = token[id] + position[p]
//!           per block (pre-LN):  x = x + out(causal self-attention(LN(x)), KV cache)
//!                                x = x + out(attention(LN(x) · Wq, cross keys/values))
//!                                x = x + fc2(gelu(fc1(LN(x))))
//!           logits = LN(x) · tokenᵀ            (tied)
//! ```

use super::config::{WhisperConfig, LAYER_NORM_EPS};
use super::weights::{Conv3, Qkv, WhisperWeights};
use crate::encdec::CrossKv;
use crate::llama::KvCache;
use crate::step::{run_step, runs_as, sdpa_op, Step};
use cyb_backend::Dispatcher;
use cyb_format::ModelFile;
use cyb_ops::{GeluApprox, LinearAct, Op, SdpaLayout};
use cyb_tensor::{DType, Error, Result, Tensor};
use std::sync::Arc;

const GELU: LinearAct = LinearAct::Gelu(GeluApprox::Erf);

/// Cross-attention scores of the heads asked for (each `[tokens, source]`), then the logits of
/// every token.
pub type CrossAttention = (Vec<Vec<f32>>, Vec<Vec<f32>>);

/// A loaded WhisperStyle model: config, weights and the dispatcher that runs its ops.
pub struct WhisperModel {
    config: WhisperConfig,
    weights: WhisperWeights,
    dispatcher: Arc<Dispatcher>,
}

impl std::fmt::Debug for WhisperModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhisperModel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// One window's encoder output: the final states and the cross-attention keys and values of
/// every decoder layer, computed once and read by every decoder step of the window.
#[derive(Debug)]
pub struct EncodedAudio {
    /// `[max_source_positions, d]`.
    pub states: Tensor,
    pub cross: CrossKv,
}

impl WhisperModel {
    /// Resolves the config of `file` and checks every tensor it needs.
    pub fn load(file: &ModelFile, dispatcher: Arc<Dispatcher>) -> Result<WhisperModel> {
        let config = WhisperConfig::from_file(file)?;
        let stack = dispatcher.primary().prefers_stacked_projections();
        let weights = WhisperWeights::load(file, &config, stack)?;
        Ok(WhisperModel {
            config,
            weights,
            dispatcher,
        })
    }

    pub fn config(&self) -> &WhisperConfig {
        &self.config
    }

    /// Alignment heads named outside the config (transformers keeps them in
    /// generation_config.json); checked against the decoder's size.
    pub fn set_alignment_heads(&mut self, heads: Vec<(usize, usize)>) -> Result<()> {
        let c = &self.config;
        if let Some(&(l, h)) = heads
            .iter()
            .find(|&&(l, h)| l >= c.decoder_layers || h >= c.decoder_heads)
        {
            return Err(Error::invalid(
                "alignment heads",
                format!(
                    "({l}, {h}) is outside the decoder's {} layers × {} heads",
                    c.decoder_layers, c.decoder_heads
                ),
            ));
        }
        self.config.alignment_heads = heads;
        Ok(())
    }

    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.dispatcher
    }

    /// A self-attention cache for one decoded sequence of up to `max_target_positions` tokens:
    /// in the primary backend's memory where it is a device that appends to caches (the
    /// decoder then never brings keys and values back to the host), else on the host.
    pub fn new_cache(&self) -> Result<KvCache> {
        let c = &self.config;
        KvCache::on_backend_or_host(
            self.dispatcher.primary().as_ref(),
            c.decoder_layers,
            c.decoder_heads,
            c.d_model / c.decoder_heads,
            c.max_target_positions,
        )
    }

    /// Encodes one window of log-mel features `mel` (row-major `[num_mel_bins, frames]`,
    /// `frames` = [`WhisperConfig::window_frames`]).
    pub fn encode(&self, mel: &[f32]) -> Result<EncodedAudio> {
        let c = &self.config;
        let frames = c.window_frames();
        if mel.len() != c.num_mel_bins * frames {
            return Err(Error::invalid(
                "whisper encode",
                format!(
                    "expected {} mel bins × {frames} frames ({} values), got {} values",
                    c.num_mel_bins,
                    c.num_mel_bins * frames,
                    mel.len()
                ),
            ));
        }
        // Token-major: frame t is row t.
        let mut rows = vec![0f32; mel.len()];
        for (m, bin) in mel.chunks_exact(frames).enumerate() {
            for (t, &v) in bin.iter().enumerate() {
                rows[t * c.num_mel_bins + m] = v;
            }
        }
        let x = Tensor::from_f32(&[frames, c.num_mel_bins], &rows)?;
        let w = &self.weights;
        let mut cross = Vec::with_capacity(c.decoder_layers);
        let states = run_step(&self.dispatcher, |step| {
            let mut x = conv3(step, &x, &w.conv1)?;
            x = conv3(step, &x, &w.conv2)?;
            x = step.run(Op::Add, &[&x, &w.encoder_positions])?;
            for layer in &w.encoder_layers {
                let h = step.layer_norm(&x, &layer.attn_norm, LAYER_NORM_EPS)?;
                let a = self_attention(step, &h, &layer.qkv, c.d_model, c.encoder_heads, None)?;
                let a = step.linear(&a, &layer.attn_out)?;
                x = step.run(Op::Add, &[&x, &a])?;
                let h = step.layer_norm(&x, &layer.mlp_norm, LAYER_NORM_EPS)?;
                let f = step.linear_act(&h, &layer.fc1, GELU)?;
                let f = step.linear(&f, &layer.fc2)?;
                x = step.run(Op::Add, &[&x, &f])?;
            }
            let states = step.layer_norm(&x, &w.encoder_norm, LAYER_NORM_EPS)?;
            let (n, heads) = (c.max_source_positions, c.decoder_heads);
            let hd = c.d_model / heads;
            let half = self.half_cross_kv();
            for layer in &w.decoder_layers {
                let k = step.linear(&states, &layer.cross_k)?;
                let v = step.linear(&states, &layer.cross_v)?;
                let (mut k, mut v) = (
                    step.reshape(&k, &[n, heads, hd])?,
                    step.reshape(&v, &[n, heads, hd])?,
                );
                if half {
                    k = step.run(Op::Cast { to: DType::F16 }, &[&k])?;
                    v = step.run(Op::Cast { to: DType::F16 }, &[&v])?;
                }
                cross.push((k, v));
            }
            Ok(states)
        })?;
        Ok(EncodedAudio {
            states,
            cross: CrossKv::new(cross),
        })
    }

    /// Whether the cross-attention keys and values are kept in f16: where the primary backend
    /// attends to them in f16 as it reads them (half the bytes every decoder step reads; the
    /// transcripts of the tests stay equal to faster-whisper's).
    fn half_cross_kv(&self) -> bool {
        // The reference backend takes any dtype, computing in f32 after widening.
        if self.dispatcher.primary().name() == "reference" {
            return false;
        }
        let c = &self.config;
        let (n, heads) = (c.max_source_positions, c.decoder_heads);
        let hd = c.d_model / heads;
        let kv = || (vec![n, heads, hd], DType::F16);
        runs_as(
            &self.dispatcher,
            &Op::Cast { to: DType::F16 },
            vec![(vec![n, heads, hd], DType::F32)],
        ) && runs_as(
            &self.dispatcher,
            &sdpa_op(SdpaLayout::TokenMajor, hd, false),
            vec![(vec![1, heads, hd], DType::F32), kv(), kv()],
        )
    }

    /// One decoder forward over `tokens[s]`, the new tokens of sequence `s` (every sequence the
    /// same number of them), each after the past in its own `caches[s]`, which the step extends.
    /// Returns, for each sequence, the logits (`vocab_size` each) of its new tokens at the
    /// indices `at` (`&[n - 1]`: the next-token logits).
    pub fn decode(
        &self,
        audio: &EncodedAudio,
        tokens: &[&[u32]],
        caches: &mut [KvCache],
        at: &[usize],
    ) -> Result<Vec<Vec<Vec<f32>>>> {
        self.forward(audio, tokens, caches, at, &mut |_, _| Ok(()))
    }

    /// The cross-attention scores (scaled `q·kᵀ`, before the softmax) of `heads`
    /// (`(layer, head)` pairs) for `tokens` run from position 0, each `[tokens, source]`
    /// row-major, and the logits of every token: what word-level alignment needs.
    pub fn cross_attention_scores(
        &self,
        audio: &EncodedAudio,
        tokens: &[u32],
        heads: &[(usize, usize)],
    ) -> Result<CrossAttention> {
        let c = &self.config;
        let (h, hd) = (c.decoder_heads, c.d_model / c.decoder_heads);
        let src = c.max_source_positions;
        let n = tokens.len();
        let scale = 1.0 / (hd as f32).sqrt();
        let mut scores = vec![Vec::new(); heads.len()];
        let mut cache = self.new_cache()?;
        let all: Vec<usize> = (0..n).collect();
        let logits = self.forward(
            audio,
            &[tokens],
            std::slice::from_mut(&mut cache),
            &all,
            &mut |layer, q| {
                let wanted: Vec<usize> =
                    (0..heads.len()).filter(|&i| heads[i].0 == layer).collect();
                if wanted.is_empty() {
                    return Ok(());
                }
                let q = self.dispatcher.to_host_f32(q)?;
                let k = self.dispatcher.to_host_f32(audio.cross.layer(layer)?.0)?;
                for i in wanted {
                    let head = heads[i].1;
                    let mut m = vec![0f32; n * src];
                    for t in 0..n {
                        let qv = &q[(t * h + head) * hd..][..hd];
                        for (j, out) in m[t * src..][..src].iter_mut().enumerate() {
                            let kv = &k[(j * h + head) * hd..][..hd];
                            *out = qv.iter().zip(kv).map(|(a, b)| a * b).sum::<f32>() * scale;
                        }
                    }
                    scores[i] = m;
                }
                Ok(())
            },
        )?;
        Ok((scores, logits.into_iter().next().unwrap_or_default()))
    }

    /// [`WhisperModel::decode`], handing each layer's cross-attention queries
    /// (`[rows, heads, head_dim]`) to `probe`.
    fn forward(
        &self,
        audio: &EncodedAudio,
        tokens: &[&[u32]],
        caches: &mut [KvCache],
        at: &[usize],
        probe: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
    ) -> Result<Vec<Vec<Vec<f32>>>> {
        let c = &self.config;
        let n = tokens.first().map_or(0, |t| t.len());
        if n == 0 || tokens.iter().any(|t| t.len() != n) || caches.len() != tokens.len() {
            return Err(Error::invalid(
                "whisper decode",
                "every sequence needs the same number (≥ 1) of new tokens and its own cache",
            ));
        }
        let past = caches[0].len();
        if caches.iter().any(|k| k.len() != past) || past + n > c.max_target_positions {
            return Err(Error::invalid(
                "whisper decode",
                format!(
                    "{past} + {n} tokens exceed the decoder's {} positions, or the sequences' \
                     pasts differ in length",
                    c.max_target_positions
                ),
            ));
        }
        if at.is_empty() || at.iter().any(|&r| r >= n) {
            return Err(Error::invalid(
                "whisper decode",
                format!("logit rows {at:?} are not among the {n} new tokens"),
            ));
        }
        if let Some(&bad) = tokens
            .iter()
            .flat_map(|t| t.iter())
            .find(|&&t| t as usize >= c.vocab_size)
        {
            return Err(Error::invalid(
                "whisper decode",
                format!("token {bad} is outside the vocabulary of {}", c.vocab_size),
            ));
        }
        let seqs = tokens.len();
        let ids: Vec<i64> = tokens
            .iter()
            .flat_map(|t| t.iter().map(|&t| t as i64))
            .collect();
        let ids = Tensor::from_i64(&[seqs * n], &ids)?;
        let pos: Vec<i64> = (0..seqs)
            .flat_map(|_| (past..past + n).map(|p| p as i64))
            .collect();
        let pos = Tensor::from_i64(&[seqs * n], &pos)?;
        let w = &self.weights;
        let (d, heads) = (c.d_model, c.decoder_heads);
        let hd = d / heads;
        let logits = run_step(&self.dispatcher, |step| {
            let mut x = step.run(Op::Embedding, &[&w.tokens, &ids])?;
            let p = step.run(Op::Embedding, &[&w.decoder_positions, &pos])?;
            x = step.run(Op::Add, &[&x, &p])?;
            for (i, layer) in w.decoder_layers.iter().enumerate() {
                let h = step.layer_norm(&x, &layer.self_norm, LAYER_NORM_EPS)?;
                let a = self_attention(
                    step,
                    &h,
                    &layer.self_qkv,
                    d,
                    heads,
                    Some((i, n, &mut *caches)),
                )?;
                let a = step.linear(&a, &layer.self_out)?;
                x = step.run(Op::Add, &[&x, &a])?;
                let h = step.layer_norm(&x, &layer.cross_norm, LAYER_NORM_EPS)?;
                let q = step.linear(&h, &layer.cross_q)?;
                let q = step.reshape(&q, &[seqs * n, heads, hd])?;
                probe(i, &q)?;
                let (k, v) = audio.cross.layer(i)?;
                let a = step.attend(hd, [&q, k, v], None)?;
                let a = step.reshape(&a, &[seqs * n, d])?;
                let a = step.linear(&a, &layer.cross_out)?;
                x = step.run(Op::Add, &[&x, &a])?;
                let h = step.layer_norm(&x, &layer.mlp_norm, LAYER_NORM_EPS)?;
                let f = step.linear_act(&h, &layer.fc1, GELU)?;
                let f = step.linear(&f, &layer.fc2)?;
                x = step.run(Op::Add, &[&x, &f])?;
            }
            if at.len() != n || at.iter().enumerate().any(|(i, &r)| i != r) {
                let rows: Vec<i64> = (0..seqs)
                    .flat_map(|s| at.iter().map(move |&r| (s * n + r) as i64))
                    .collect();
                let rows = Tensor::from_i64(&[rows.len()], &rows)?;
                x = step.run(Op::Embedding, &[&x, &rows])?;
            }
            let x = step.layer_norm(&x, &w.decoder_norm, LAYER_NORM_EPS)?;
            step.run(
                Op::MatMul {
                    rhs_transposed: true,
                },
                &[&x, &w.tokens],
            )
        })?;
        for cache in caches.iter_mut() {
            cache.commit(n)?;
        }
        let v = logits.to_f32_vec()?;
        let mut rows = v.chunks_exact(c.vocab_size).map(<[f32]>::to_vec);
        Ok((0..seqs)
            .map(|_| rows.by_ref().take(at.len()).collect())
            .collect())
    }
}

/// `gelu(conv(x))` of `x` `[t, c]` (token-major): the three taps of each output position side
/// by side (`[x(t·s-1), x(t·s), x(t·s+1)]`, zero outside) times the stacked kernel.
fn conv3(step: &mut Step<'_>, x: &Tensor, conv: &Conv3) -> Result<Tensor> {
    let (t, c) = (x.dims()[0], x.dims()[1]);
    let s = conv.stride;
    let out = (t + 2 - 3) / s + 1;
    let x = step.dispatcher.to_host_f32(x)?;
    let mut cols = vec![0f32; out * 3 * c];
    for (o, row) in cols.chunks_exact_mut(3 * c).enumerate() {
        for q in 0..3 {
            // Input row o·s + q - 1 (padding 1 on each side).
            if let Some(src) = (o * s + q).checked_sub(1).filter(|&r| r < t) {
                row[q * c..(q + 1) * c].copy_from_slice(&x[src * c..(src + 1) * c]);
            }
        }
    }
    let cols = Tensor::from_f32(&[out, 3 * c], &cols)?;
    step.linear_act(&cols, &conv.lin, GELU)
}

/// Multi-head self-attention of `h` `[rows, d]`: bidirectional without a cache; with
/// `(layer, n, caches)`, causal over each sequence's past in `caches[s]` plus its `n` new rows
/// (rows `s·n ..`). Returns `[rows, d]` before the output projection.
fn self_attention(
    step: &mut Step<'_>,
    h: &Tensor,
    qkv: &Qkv,
    d: usize,
    heads: usize,
    cache: Option<(usize, usize, &mut [KvCache])>,
) -> Result<Tensor> {
    let rows = h.dims()[0];
    let hd = d / heads;
    let Some((layer, n, caches)) = cache else {
        let (q, k, v) = project(step, h, qkv, d)?;
        let shape = [rows, heads, hd];
        let (q, k, v) = (
            step.reshape(&q, &shape)?,
            step.reshape(&k, &shape)?,
            step.reshape(&v, &shape)?,
        );
        let a = step.attend(hd, [&q, &k, &v], None)?;
        return step.reshape(&a, &[rows, d]);
    };
    if caches.iter().all(KvCache::on_device) {
        return cached_on_device(step, h, qkv, (d, heads), layer, n, caches);
    }
    // With a host cache the keys and values go to the host anyway: the projections are cut
    // into each sequence's queries, keys and values there.
    let (q, k, v) = match qkv {
        Qkv::Stacked(l) => {
            let y = step.dispatcher.to_host_f32(&step.linear(h, l)?)?;
            let part = |i: usize| -> Vec<f32> {
                y.chunks_exact(3 * d)
                    .flat_map(|r| r[i * d..(i + 1) * d].iter().copied())
                    .collect()
            };
            (part(0), part(1), part(2))
        }
        Qkv::Apart(l) => {
            let mut host = |w| -> Result<Vec<f32>> {
                let t = step.linear(h, w)?;
                step.dispatcher.to_host_f32(&t)
            };
            (host(&l[0])?, host(&l[1])?, host(&l[2])?)
        }
    };
    let block = n * d;
    let mut out = Vec::with_capacity(rows * d);
    for (s, cache) in caches.iter_mut().enumerate() {
        let span = s * block..(s + 1) * block;
        let rows_of = |x: &[f32]| Tensor::from_f32(&[n, heads, hd], &x[span.clone()]);
        let (qs, ks, vs) = (rows_of(&q)?, rows_of(&k)?, rows_of(&v)?);
        let (k_all, v_all) = cache.write(layer, &ks, &vs)?;
        let a = step.attend_causal(hd, [&qs, &k_all, &v_all])?;
        out.extend_from_slice(&step.dispatcher.to_host_f32(&a)?);
    }
    Tensor::from_f32(&[rows, d], &out)
}

/// The query, key and value projections `[rows, d]` of `h`.
fn project(
    step: &mut Step<'_>,
    h: &Tensor,
    qkv: &Qkv,
    d: usize,
) -> Result<(Tensor, Tensor, Tensor)> {
    Ok(match qkv {
        Qkv::Stacked(l) => {
            let y = step.linear(h, l)?;
            let mut p = step.split(&y, -1, &[d, d, d])?;
            let v = p.swap_remove(2);
            let k = p.swap_remove(1);
            (p.swap_remove(0), k, v)
        }
        Qkv::Apart(l) => (
            step.linear(h, &l[0])?,
            step.linear(h, &l[1])?,
            step.linear(h, &l[2])?,
        ),
    })
}

/// Cached self-attention with every cache in the device's memory: each sequence's new keys
/// and values are appended there (`Op::KvAppend`) and its queries attend over the cache's
/// prefix, head-major, so nothing comes back to the host.
fn cached_on_device(
    step: &mut Step<'_>,
    h: &Tensor,
    qkv: &Qkv,
    (d, heads): (usize, usize),
    layer: usize,
    n: usize,
    caches: &mut [KvCache],
) -> Result<Tensor> {
    let hd = d / heads;
    let (q, k, v) = project(step, h, qkv, d)?;
    let swap = [1, 0, 2];
    let mut outs = Vec::with_capacity(caches.len());
    for (s, cache) in caches.iter_mut().enumerate() {
        let mut rows_of = |x: &Tensor| -> Result<Tensor> {
            let rows = Op::Slice {
                axis: 0,
                start: (s * n) as isize,
                end: ((s + 1) * n) as isize,
                step: 1,
            };
            let part = step.run(rows, &[x])?;
            step.reshape(&part, &[n, heads, hd])
        };
        let (qs, ks, vs) = (rows_of(&q)?, rows_of(&k)?, rows_of(&v)?);
        let start = cache.len();
        let (ck, cv) = cache.device_layer(layer)?;
        let append = Op::KvAppend { start };
        let k_cap = step.run(append.clone(), &[&ck, &ks])?;
        let v_cap = step.run(append, &[&cv, &vs])?;
        cache.set_device_layer(layer, k_cap.clone(), v_cap.clone())?;
        let prefix = Op::Slice {
            axis: 1,
            start: 0,
            end: (start + n) as isize,
            step: 1,
        };
        let kp = step.run(prefix.clone(), &[&k_cap])?;
        let vp = step.run(prefix, &[&v_cap])?;
        let qh = step.permute(&qs, &swap)?;
        let a = step.run(sdpa_op(SdpaLayout::HeadMajor, hd, true), &[&qh, &kp, &vp])?;
        let a = step.permute(&a, &swap)?;
        outs.push(step.reshape(&a, &[n, d])?);
    }
    if outs.len() == 1 {
        return Ok(outs.swap_remove(0));
    }
    let parts: Vec<&Tensor> = outs.iter().collect();
    step.run(Op::Concat { axis: 0 }, &parts)
}

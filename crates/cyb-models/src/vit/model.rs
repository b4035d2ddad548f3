//! Running a ViTStyle model: patch embedding (flattened patches times the convolution's
//! weight), class token, registers and positions (interpolated bicubically as torch does when
//! the image is not the size they were made for), the blocks, and each member's pooling and
//! heads. Every step is an `Op` run by the dispatcher.

use super::config::{Act, TowerConfig, VisionArch, VisionConfig};
use super::weights::{Block, MapHead, TextWeights, VisionWeights};
use crate::step::{run_step, shared_f32, Linear, Step};
use cyb_backend::Dispatcher;
use cyb_format::ModelFile;
use cyb_ops::{GeluApprox, LinearAct, Op, UnaryFn};
use cyb_tensor::{Error, Result, Tensor};
use std::sync::Arc;

/// A loaded ViTStyle model.
pub struct VisionModel {
    config: VisionConfig,
    weights: VisionWeights,
    dispatcher: Arc<Dispatcher>,
}

impl std::fmt::Debug for VisionModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VisionModel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The encoder's outputs for a batch of images.
#[derive(Clone, Debug, PartialEq)]
pub struct VisionOutput {
    pub hidden: usize,
    /// Tokens per image (class token, registers, patches).
    pub tokens: usize,
    /// `[images, tokens, hidden]`, as the Hugging Face base model's `last_hidden_state`.
    pub last_hidden_state: Vec<f32>,
    /// One vector per image, as the base model's `pooler_output`: the class token after the
    /// final LayerNorm (ViT without a pooler, DINOv2, CLIP's `post_layernorm`), ViT's pooler,
    /// or SigLIP's attention-pooling head.
    pub pooled: Vec<Vec<f32>>,
}

impl VisionModel {
    /// Reads the config from a Hugging Face directory (or `.model`) and checks every tensor.
    pub fn load(file: &ModelFile, dispatcher: Arc<Dispatcher>) -> Result<VisionModel> {
        let ModelFile::HuggingFace(hf) = file else {
            return Err(Error::invalid(
                "load",
                format!(
                    "{}: ViTStyle models load from Hugging Face directories",
                    file.path().display()
                ),
            ));
        };
        let names: Vec<String> = file.tensors().into_iter().map(|t| t.name).collect();
        let config = VisionConfig::from_hf_json(hf.config_json(), &names)?;
        let weights = VisionWeights::load(file, &config)?;
        Ok(VisionModel {
            config,
            weights,
            dispatcher,
        })
    }

    pub fn config(&self) -> &VisionConfig {
        &self.config
    }

    /// True when the model has an image-classification head.
    pub fn has_classifier(&self) -> bool {
        self.weights.classifier.is_some()
    }

    /// True when the model has a text tower (CLIP, SigLIP).
    pub fn has_text(&self) -> bool {
        self.weights.text.is_some()
    }

    /// CLIP's and SigLIP's `exp(logit_scale)`, and SigLIP's `logit_bias`.
    pub fn logit_scale(&self) -> Option<f32> {
        self.weights.logit_scale.map(f32::exp)
    }

    pub fn logit_bias(&self) -> Option<f32> {
        self.weights.logit_bias
    }

    /// The encoder on `images` images of `3 × height × width` floats each (channels first,
    /// preprocessed), concatenated in `pixels`.
    pub fn encode(
        &self,
        pixels: &[f32],
        images: usize,
        height: usize,
        width: usize,
    ) -> Result<VisionOutput> {
        let c = &self.config;
        let tokens = self.check_input(pixels, images, height, width)?;
        let h = c.tower.hidden;
        let mut pooled_dim = h;
        let out = run_step(&self.dispatcher, |step| {
            let x = self.embed_and_encode(step, pixels, images, height, width)?;
            let pooled = self.pool(step, &x, images, tokens)?;
            pooled_dim = pooled.dims().last().copied().unwrap_or(h);
            // Both results in one host tensor: the states, then the pooled rows.
            let flat_x = step.reshape(&x, &[images * tokens * h])?;
            let flat_p = step.reshape(&pooled, &[images * pooled_dim])?;
            step.run(Op::Concat { axis: 0 }, &[&flat_x, &flat_p])
        })?;
        let all = out.to_f32_vec()?;
        let (states, pooled) = all.split_at(images * tokens * h);
        Ok(VisionOutput {
            hidden: h,
            tokens,
            last_hidden_state: states.to_vec(),
            pooled: pooled
                .chunks_exact(pooled_dim)
                .map(<[f32]>::to_vec)
                .collect(),
        })
    }

    /// Image-classification logits (ViT: the class token; DINOv2: the class token and the mean
    /// of the patch tokens), one vector per image.
    pub fn image_logits(
        &self,
        pixels: &[f32],
        images: usize,
        height: usize,
        width: usize,
    ) -> Result<Vec<Vec<f32>>> {
        let Some(classifier) = &self.weights.classifier else {
            return Err(Error::invalid(
                "classify",
                format!(
                    "this {} checkpoint has no image-classification head",
                    self.config.architecture
                ),
            ));
        };
        let tokens = self.check_input(pixels, images, height, width)?;
        let n = self.config.labels.len().max(1);
        let out = run_step(&self.dispatcher, |step| {
            let x = self.embed_and_encode(step, pixels, images, height, width)?;
            let h = self.config.tower.hidden;
            let x3 = step.reshape(&x, &[images, tokens, h])?;
            let cls = slice(step, &x3, 1, 0, 1)?;
            let cls = step.reshape(&cls, &[images, h])?;
            let feats = if self.config.arch == VisionArch::Dinov2 {
                let first = 1 + self.config.registers;
                let patches = slice(step, &x3, 1, first, tokens)?;
                let mean = step.run(
                    Op::Reduce {
                        f: cyb_ops::ReduceFn::Mean,
                        axes: vec![1],
                        keepdims: false,
                    },
                    &[&patches],
                )?;
                step.run(Op::Concat { axis: 1 }, &[&cls, &mean])?
            } else {
                cls
            };
            step.linear(&feats, classifier)
        })?;
        Ok(out
            .to_f32_vec()?
            .chunks_exact(n)
            .map(<[f32]>::to_vec)
            .collect())
    }

    /// Image embeddings for search and zero-shot classification: CLIP's projected pooled
    /// state, SigLIP's pooled state, the pooled state of the others. Only these vectors come
    /// back to the host.
    pub fn image_embeds(
        &self,
        pixels: &[f32],
        images: usize,
        height: usize,
        width: usize,
    ) -> Result<Vec<Vec<f32>>> {
        let tokens = self.check_input(pixels, images, height, width)?;
        let out = run_step(&self.dispatcher, |step| {
            let x = self.embed_and_encode(step, pixels, images, height, width)?;
            let pooled = self.pool(step, &x, images, tokens)?;
            match &self.weights.projection {
                Some(proj) => step.linear(&pooled, proj),
                None => Ok(pooled),
            }
        })?;
        let d = out.dims().last().copied().unwrap_or(1).max(1);
        Ok(out
            .to_f32_vec()?
            .chunks_exact(d)
            .map(<[f32]>::to_vec)
            .collect())
    }

    /// Text embeddings from CLIP's or SigLIP's text tower for token ids (one sequence each,
    /// as the tokenizer gives them: CLIP's unpadded, SigLIP's padded to the maximum length).
    pub fn text_embeds(&self, ids: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let (Some(tw), Some(tc)) = (&self.weights.text, &self.config.text) else {
            return Err(Error::invalid(
                "text",
                format!(
                    "this {} checkpoint has no text tower",
                    self.config.architecture
                ),
            ));
        };
        let mut out = Vec::with_capacity(ids.len());
        for seq in ids {
            if seq.is_empty() || seq.len() > tc.max_positions {
                return Err(Error::invalid(
                    "text",
                    format!(
                        "{} tokens; the text tower takes 1 to {}",
                        seq.len(),
                        tc.max_positions
                    ),
                ));
            }
            if let Some(bad) = seq.iter().find(|&&t| t as usize >= tc.vocab) {
                return Err(Error::invalid(
                    "text",
                    format!("token id {bad} is outside the vocabulary of {}", tc.vocab),
                ));
            }
            let at = match (self.config.arch, tc.eos) {
                // The legacy CLIP config (eos 2) pools at the highest token id.
                (VisionArch::Clip, Some(2)) | (VisionArch::Clip, None) => seq
                    .iter()
                    .enumerate()
                    .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
                    .map_or(0, |(i, _)| i),
                (VisionArch::Clip, Some(eos)) => seq.iter().position(|&t| t == eos).unwrap_or(0),
                _ => seq.len() - 1,
            };
            let y = run_step(&self.dispatcher, |step| {
                self.text_forward(step, tw, &tc.tower, seq, at)
            })?;
            out.push(y.to_f32_vec()?);
        }
        Ok(out)
    }

    fn text_forward(
        &self,
        step: &mut Step<'_>,
        tw: &TextWeights,
        t: &TowerConfig,
        seq: &[u32],
        at: usize,
    ) -> Result<Tensor> {
        let n = seq.len();
        let ids: Vec<i64> = seq.iter().map(|&i| i64::from(i)).collect();
        let ids = Tensor::from_i64(&[n], &ids)?;
        let pos: Vec<i64> = (0..n as i64).collect();
        let pos = Tensor::from_i64(&[n], &pos)?;
        let x = step.run(Op::Embedding, &[&tw.tokens, &ids])?;
        let p = step.run(Op::Embedding, &[&tw.positions, &pos])?;
        let mut x = step.run(Op::Add, &[&x, &p])?;
        let causal = self.config.arch == VisionArch::Clip;
        for b in &tw.blocks {
            x = block(step, b, t, &x, 1, n, causal)?;
        }
        x = step.layer_norm(&x, &tw.final_norm, t.eps)?;
        let row = slice(step, &x, 0, at, at + 1)?;
        step.linear(&row, &tw.projection)
    }

    /// Tokens per image, after checking the input's size.
    fn check_input(
        &self,
        pixels: &[f32],
        images: usize,
        height: usize,
        width: usize,
    ) -> Result<usize> {
        let c = &self.config;
        let p = c.patch;
        if images == 0
            || height < p
            || width < p
            || pixels.len() != images * c.channels * height * width
        {
            return Err(Error::invalid(
                "image",
                format!(
                    "{} values for {images} images of {}x{height}x{width} (patch {p})",
                    pixels.len(),
                    c.channels
                ),
            ));
        }
        let fixed = matches!(
            c.arch,
            VisionArch::Vit | VisionArch::Clip | VisionArch::Siglip
        );
        if fixed && (height != c.image_size || width != c.image_size) {
            return Err(Error::invalid(
                "image",
                format!(
                    "{}x{} images; this {} takes {}x{} (its position embeddings are not \
                     interpolated)",
                    width, height, c.architecture, c.image_size, c.image_size
                ),
            ));
        }
        Ok(c.tokens(height, width))
    }

    /// Embeddings and every block: `[images · tokens, hidden]`.
    fn embed_and_encode(
        &self,
        step: &mut Step<'_>,
        pixels: &[f32],
        images: usize,
        height: usize,
        width: usize,
    ) -> Result<Tensor> {
        let blocks = self.config.tower.layers;
        // ViT, DINOv2 and SigLIP normalize every state; CLIP only its pooled one.
        let post_norm = self.config.arch != VisionArch::Clip;
        self.hidden_state(step, pixels, images, height, width, blocks, post_norm)
    }

    /// The states after the first `blocks` blocks, `[images · tokens, hidden]` (Hugging Face's
    /// `hidden_states[blocks]`), then the final LayerNorm when `post_norm`, after checking the
    /// input. What a vision-language model's connector reads.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn features(
        &self,
        step: &mut Step<'_>,
        pixels: &[f32],
        images: usize,
        height: usize,
        width: usize,
        blocks: usize,
        post_norm: bool,
    ) -> Result<Tensor> {
        self.check_input(pixels, images, height, width)?;
        if blocks > self.config.tower.layers {
            return Err(Error::invalid(
                "vision features",
                format!(
                    "block {blocks} of a tower of {} blocks",
                    self.config.tower.layers
                ),
            ));
        }
        self.hidden_state(step, pixels, images, height, width, blocks, post_norm)
    }

    #[allow(clippy::too_many_arguments)]
    fn hidden_state(
        &self,
        step: &mut Step<'_>,
        pixels: &[f32],
        images: usize,
        height: usize,
        width: usize,
        blocks: usize,
        post_norm: bool,
    ) -> Result<Tensor> {
        let c = &self.config;
        let w = &self.weights;
        let (p, ch, h) = (c.patch, c.channels, c.tower.hidden);
        let (gh, gw) = (height / p, width / p);
        let n = gh * gw;
        let patches = patchify(pixels, images, ch, height, width, p);
        let patches = shared_f32(&[images * n, ch * p * p], &patches)?;
        let x = step.linear(&patches, &w.patch)?;
        let x = step.reshape(&x, &[images, n, h])?;
        // Positions for the patch grid, and the class token with its position.
        let pos = w.positions.to_f32_vec()?;
        let cls_rows = usize::from(w.cls.is_some());
        let grid = (c.image_size / p, c.image_size / p);
        let patch_pos = &pos[cls_rows * h..];
        let patch_pos = if (gh, gw) == grid {
            patch_pos.to_vec()
        } else {
            bicubic_resize(patch_pos, grid.0, grid.1, h, gh, gw)
        };
        let patch_pos = shared_f32(&[n, h], &patch_pos)?;
        let x = step.run(Op::Add, &[&x, &patch_pos])?;
        let mut parts: Vec<Tensor> = Vec::new();
        if let Some(cls) = &w.cls {
            let cls: Vec<f32> = cls
                .to_f32_vec()?
                .iter()
                .zip(&pos[..h])
                .map(|(a, b)| a + b)
                .collect();
            let rep: Vec<f32> = cls.iter().copied().cycle().take(images * h).collect();
            parts.push(shared_f32(&[images, 1, h], &rep)?);
        }
        if let Some(regs) = &w.registers {
            let r = regs.to_f32_vec()?;
            let rep: Vec<f32> = r.iter().copied().cycle().take(images * r.len()).collect();
            parts.push(shared_f32(&[images, c.registers, h], &rep)?);
        }
        let x = if parts.is_empty() {
            x
        } else {
            parts.push(x);
            let refs: Vec<&Tensor> = parts.iter().collect();
            step.run(Op::Concat { axis: 1 }, &refs)?
        };
        let tokens = c.tokens(height, width);
        let mut x = step.reshape(&x, &[images * tokens, h])?;
        if let Some(norm) = &w.pre_norm {
            x = step.layer_norm(&x, norm, c.tower.eps)?;
        }
        for b in w.blocks.iter().take(blocks) {
            x = block(step, b, &c.tower, &x, images, tokens, false)?;
        }
        if post_norm {
            x = step.layer_norm(&x, &w.post_norm, c.tower.eps)?;
        }
        Ok(x)
    }

    /// The pooled state per image, `[images, d]`.
    fn pool(
        &self,
        step: &mut Step<'_>,
        x: &Tensor,
        images: usize,
        tokens: usize,
    ) -> Result<Tensor> {
        let c = &self.config;
        let h = c.tower.hidden;
        let x3 = step.reshape(x, &[images, tokens, h])?;
        if let Some(head) = &self.weights.map_head {
            return map_head(step, head, &c.tower, &x3, images, tokens);
        }
        let cls = slice(step, &x3, 1, 0, 1)?;
        let cls = step.reshape(&cls, &[images, h])?;
        match c.arch {
            VisionArch::Clip => step.layer_norm(&cls, &self.weights.post_norm, c.tower.eps),
            _ => match &self.weights.pooler {
                Some(pooler) => step.linear_act(&cls, pooler, LinearAct::Tanh),
                None => Ok(cls),
            },
        }
    }
}

/// `x[.., start..end, ..]` along `axis`.
fn slice(step: &mut Step<'_>, x: &Tensor, axis: isize, start: usize, end: usize) -> Result<Tensor> {
    step.run(
        Op::Slice {
            axis,
            start: start as isize,
            end: end as isize,
            step: 1,
        },
        &[x],
    )
}

/// One pre-LN block over `images` sequences of `tokens` rows.
fn block(
    step: &mut Step<'_>,
    b: &Block,
    t: &TowerConfig,
    x: &Tensor,
    images: usize,
    tokens: usize,
    causal: bool,
) -> Result<Tensor> {
    let (nh, d) = (t.heads, t.head_dim());
    let y = step.layer_norm(x, &b.ln1, t.eps)?;
    let heads = |step: &mut Step<'_>, l: &Linear| -> Result<Tensor> {
        let z = step.linear(&y, l)?;
        step.reshape(&z, &[images, tokens, nh, d])
    };
    let (q, k, v) = (heads(step, &b.q)?, heads(step, &b.k)?, heads(step, &b.v)?);
    let a = if causal {
        step.attend_causal(d, [&q, &k, &v])?
    } else {
        step.attend(d, [&q, &k, &v], None)?
    };
    let a = step.reshape(&a, &[images * tokens, nh * d])?;
    let mut a = step.linear(&a, &b.o)?;
    if let Some(ls) = &b.ls1 {
        a = step.run(Op::Mul, &[&a, ls])?;
    }
    let x = step.run(Op::Add, &[x, &a])?;
    let y = step.layer_norm(&x, &b.ln2, t.eps)?;
    let mut y = mlp(step, &y, &b.fc1, &b.fc2, t.act)?;
    if let Some(ls) = &b.ls2 {
        y = step.run(Op::Mul, &[&y, ls])?;
    }
    step.run(Op::Add, &[&x, &y])
}

fn mlp(step: &mut Step<'_>, x: &Tensor, fc1: &Linear, fc2: &Linear, act: Act) -> Result<Tensor> {
    let h = match act {
        Act::Gelu => step.linear_act(x, fc1, LinearAct::Gelu(GeluApprox::Erf))?,
        Act::GeluTanh => step.linear_act(x, fc1, LinearAct::Gelu(GeluApprox::Tanh))?,
        Act::Relu => step.linear_act(x, fc1, LinearAct::Relu)?,
        Act::QuickGelu => {
            // x · sigmoid(1.702 x)
            let h = step.linear(x, fc1)?;
            let s = step.run(Op::Scale { factor: 1.702 }, &[&h])?;
            let s = step.run(
                Op::Unary {
                    f: UnaryFn::Sigmoid,
                },
                &[&s],
            )?;
            step.run(Op::Mul, &[&h, &s])?
        }
    };
    step.linear(&h, fc2)
}

/// SigLIP's head: the probe attends over every state (`nn.MultiheadAttention`), then
/// `x + mlp(LayerNorm(x))`; the result per image.
fn map_head(
    step: &mut Step<'_>,
    head: &MapHead,
    t: &TowerConfig,
    x3: &Tensor,
    images: usize,
    tokens: usize,
) -> Result<Tensor> {
    let h = t.hidden;
    let (nh, d) = (t.heads, t.head_dim());
    let x = step.reshape(x3, &[images * tokens, h])?;
    // The probe's query is the same for every image.
    let q = step.linear(&head.probe, &head.q)?;
    let q = step.reshape(&q, &[1, 1, nh, d])?;
    let q = if images > 1 {
        let copies: Vec<&Tensor> = std::iter::repeat_n(&q, images).collect();
        step.run(Op::Concat { axis: 0 }, &copies)?
    } else {
        q
    };
    let k = step.linear(&x, &head.k)?;
    let k = step.reshape(&k, &[images, tokens, nh, d])?;
    let v = step.linear(&x, &head.v)?;
    let v = step.reshape(&v, &[images, tokens, nh, d])?;
    let a = step.attend(d, [&q, &k, &v], None)?;
    let a = step.reshape(&a, &[images, h])?;
    let a = step.linear(&a, &head.out)?;
    let y = step.layer_norm(&a, &head.norm, t.eps)?;
    let y = mlp(step, &y, &head.fc1, &head.fc2, t.act)?;
    step.run(Op::Add, &[&a, &y])
}

/// Flattens `p × p` patches of channel-first images into rows of `channels · p · p` values
/// (channel, then row, then column: the convolution weight's order), patches in row-major
/// grid order.
fn patchify(
    pixels: &[f32],
    images: usize,
    ch: usize,
    height: usize,
    width: usize,
    p: usize,
) -> Vec<f32> {
    let (gh, gw) = (height / p, width / p);
    let mut out = Vec::with_capacity(images * gh * gw * ch * p * p);
    for img in pixels.chunks_exact(ch * height * width).take(images) {
        for gy in 0..gh {
            for gx in 0..gw {
                for c in 0..ch {
                    let plane = &img[c * height * width..(c + 1) * height * width];
                    for ky in 0..p {
                        let row = (gy * p + ky) * width + gx * p;
                        out.extend_from_slice(&plane[row..row + p]);
                    }
                }
            }
        }
    }
    out
}

/// torch's `interpolate(mode="bicubic", align_corners=False)` of a `[gh0, gw0, dim]` grid
/// (row-major, `dim` values per cell) to `[gh, gw, dim]`: Keys' cubic with a = -0.75, source
/// index `(i + 0.5) · in/out - 0.5`, edges clamped, in single precision.
fn bicubic_resize(
    src: &[f32],
    gh0: usize,
    gw0: usize,
    dim: usize,
    gh: usize,
    gw: usize,
) -> Vec<f32> {
    const A: f32 = -0.75;
    let c1 = |x: f32| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    let c2 = |x: f32| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
    let taps = |n_in: usize, n_out: usize, i: usize| -> ([usize; 4], [f32; 4]) {
        let scale = n_in as f32 / n_out as f32;
        let real = scale * (i as f32 + 0.5) - 0.5;
        let base = real.floor();
        let t = real - base;
        let w = [c2(t + 1.0), c1(t), c1(1.0 - t), c2(2.0 - t)];
        let idx = [-1i64, 0, 1, 2].map(|o| (base as i64 + o).clamp(0, n_in as i64 - 1) as usize);
        (idx, w)
    };
    let mut out = vec![0f32; gh * gw * dim];
    for y in 0..gh {
        let (ys, wy) = taps(gh0, gh, y);
        for x in 0..gw {
            let (xs, wx) = taps(gw0, gw, x);
            let o = &mut out[(y * gw + x) * dim..(y * gw + x + 1) * dim];
            for (k, v) in o.iter_mut().enumerate() {
                let mut rows = [0f32; 4];
                for (r, &yy) in ys.iter().enumerate() {
                    let at = |xx: usize| src[(yy * gw0 + xx) * dim + k];
                    rows[r] = at(xs[0]) * wx[0]
                        + at(xs[1]) * wx[1]
                        + at(xs[2]) * wx[2]
                        + at(xs[3]) * wx[3];
                }
                *v = rows[0] * wy[0] + rows[1] * wy[1] + rows[2] * wy[2] + rows[3] * wy[3];
            }
        }
    }
    out
}

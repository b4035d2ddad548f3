//! The ViTStyle weights under Hugging Face's names, checked for presence and shape at load time
//! and used in place from the file mapping.

use super::config::{VisionArch, VisionConfig};
use crate::step::{Linear, Norm};
use cyb_format::ModelFile;
use cyb_tensor::{Error, Result, Tensor};
use std::collections::HashSet;

/// One pre-LN block.
pub(super) struct Block {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub ln1: Norm,
    pub ln2: Norm,
    pub fc1: Linear,
    pub fc2: Linear,
    /// DINOv2's layer scale after attention and after the feed-forward.
    pub ls1: Option<Tensor>,
    pub ls2: Option<Tensor>,
}

/// SigLIP's attention-pooling head: a learned probe attends over the states, then a residual
/// feed-forward.
pub(super) struct MapHead {
    pub probe: Tensor,
    /// `nn.MultiheadAttention`'s packed input projection, split into q, k and v at load.
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub out: Linear,
    pub norm: Norm,
    pub fc1: Linear,
    pub fc2: Linear,
}

pub(super) struct VisionWeights {
    /// The patch embedding as a linear map over flattened `c × p × p` patches.
    pub patch: Linear,
    pub cls: Option<Tensor>,
    /// `[positions, hidden]`.
    pub positions: Tensor,
    pub registers: Option<Tensor>,
    /// CLIP's LayerNorm before the blocks.
    pub pre_norm: Option<Norm>,
    pub blocks: Vec<Block>,
    /// ViT's and DINOv2's final LayerNorm, SigLIP's `post_layernorm` (all states); CLIP's
    /// `post_layernorm` (the pooled state only).
    pub post_norm: Norm,
    pub map_head: Option<MapHead>,
    /// ViT's pooler (dense + tanh on the class token), when saved.
    pub pooler: Option<Linear>,
    /// An image-classification head.
    pub classifier: Option<Linear>,
    /// CLIP's `visual_projection`.
    pub projection: Option<Linear>,
    pub text: Option<TextWeights>,
    pub logit_scale: Option<f32>,
    pub logit_bias: Option<f32>,
}

pub(super) struct TextWeights {
    pub tokens: Tensor,
    pub positions: Tensor,
    pub blocks: Vec<Block>,
    pub final_norm: Norm,
    /// CLIP's `text_projection` (no bias) or SigLIP's `head`.
    pub projection: Linear,
}

struct Loader<'a> {
    file: &'a ModelFile,
    names: HashSet<String>,
    cfg: &'a VisionConfig,
}

impl Loader<'_> {
    fn has(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    fn tensor(&self, name: &str, dims: &[usize]) -> Result<Tensor> {
        if !self.has(name) {
            return Err(Error::MissingTensor {
                name: name.to_string(),
                required_by: format!(
                    "{} in {}",
                    self.cfg.architecture,
                    self.file.path().display()
                ),
            });
        }
        let t = self.file.tensor(name)?;
        if t.dims() != dims {
            return Err(Error::shape(format!("tensor {name}"), dims, t.dims()));
        }
        Ok(t)
    }

    fn opt(&self, name: &str, dims: &[usize]) -> Result<Option<Tensor>> {
        if self.has(name) {
            self.tensor(name, dims).map(Some)
        } else {
            Ok(None)
        }
    }

    fn linear(&self, name: &str, out: usize, inp: usize) -> Result<Linear> {
        Ok(Linear {
            w: self.tensor(&format!("{name}.weight"), &[out, inp])?,
            b: self.opt(&format!("{name}.bias"), &[out])?,
        })
    }

    fn norm(&self, name: &str, d: usize) -> Result<Norm> {
        Ok(Norm {
            w: self.tensor(&format!("{name}.weight"), &[d])?,
            b: self.tensor(&format!("{name}.bias"), &[d])?,
        })
    }

    fn scalar(&self, name: &str) -> Result<Option<f32>> {
        if !self.has(name) {
            return Ok(None);
        }
        let t = self.file.tensor(name)?;
        let v = t.to_f32_vec()?;
        match v[..] {
            [x] => Ok(Some(x)),
            _ => Err(Error::shape(format!("tensor {name}"), &[1], t.dims())),
        }
    }

    /// Block `i` of a tower whose blocks live under `base` (`…encoder.layer` or
    /// `…encoder.layers`), sizes from `tower`.
    fn block(
        &self,
        base: &str,
        i: usize,
        t: &super::TowerConfig,
        hf_vit: bool,
        dino: bool,
    ) -> Result<Block> {
        let (h, f) = (t.hidden, t.intermediate);
        if hf_vit {
            let b = format!("{base}.{i}");
            let (ln1, ln2, fc1, fc2) = if dino {
                ("norm1", "norm2", "mlp.fc1", "mlp.fc2")
            } else {
                (
                    "layernorm_before",
                    "layernorm_after",
                    "intermediate.dense",
                    "output.dense",
                )
            };
            return Ok(Block {
                q: self.linear(&format!("{b}.attention.attention.query"), h, h)?,
                k: self.linear(&format!("{b}.attention.attention.key"), h, h)?,
                v: self.linear(&format!("{b}.attention.attention.value"), h, h)?,
                o: self.linear(&format!("{b}.attention.output.dense"), h, h)?,
                ln1: self.norm(&format!("{b}.{ln1}"), h)?,
                ln2: self.norm(&format!("{b}.{ln2}"), h)?,
                fc1: self.linear(&format!("{b}.{fc1}"), f, h)?,
                fc2: self.linear(&format!("{b}.{fc2}"), h, f)?,
                ls1: if dino {
                    Some(self.tensor(&format!("{b}.layer_scale1.lambda1"), &[h])?)
                } else {
                    None
                },
                ls2: if dino {
                    Some(self.tensor(&format!("{b}.layer_scale2.lambda1"), &[h])?)
                } else {
                    None
                },
            });
        }
        let b = format!("{base}.{i}");
        Ok(Block {
            q: self.linear(&format!("{b}.self_attn.q_proj"), h, h)?,
            k: self.linear(&format!("{b}.self_attn.k_proj"), h, h)?,
            v: self.linear(&format!("{b}.self_attn.v_proj"), h, h)?,
            o: self.linear(&format!("{b}.self_attn.out_proj"), h, h)?,
            ln1: self.norm(&format!("{b}.layer_norm1"), h)?,
            ln2: self.norm(&format!("{b}.layer_norm2"), h)?,
            fc1: self.linear(&format!("{b}.mlp.fc1"), f, h)?,
            fc2: self.linear(&format!("{b}.mlp.fc2"), h, f)?,
            ls1: None,
            ls2: None,
        })
    }
}

impl VisionWeights {
    pub(super) fn load(file: &ModelFile, cfg: &VisionConfig) -> Result<VisionWeights> {
        let names = file.tensors().into_iter().map(|t| t.name).collect();
        let l = Loader { file, names, cfg };
        let t = &cfg.tower;
        let (h, p, c) = (t.hidden, cfg.patch, cfg.channels);
        let pre = &cfg.prefix;
        let grid = (cfg.image_size / p) * (cfg.image_size / p);
        let hf_vit = matches!(cfg.arch, VisionArch::Vit | VisionArch::Dinov2);
        let dino = cfg.arch == VisionArch::Dinov2;
        let (patch_name, pos_name, cls_name) = if hf_vit {
            (
                format!("{pre}embeddings.patch_embeddings.projection"),
                format!("{pre}embeddings.position_embeddings"),
                Some(format!("{pre}embeddings.cls_token")),
            )
        } else {
            (
                format!("{pre}embeddings.patch_embedding"),
                format!("{pre}embeddings.position_embedding.weight"),
                (cfg.arch == VisionArch::Clip).then(|| format!("{pre}embeddings.class_embedding")),
            )
        };
        let conv = l.tensor(&format!("{patch_name}.weight"), &[h, c, p, p])?;
        let patch = Linear {
            w: conv.reshape(&[h, c * p * p])?,
            b: l.opt(&format!("{patch_name}.bias"), &[h])?,
        };
        let n_pos = grid + usize::from(cls_name.is_some());
        let positions = if hf_vit {
            l.tensor(&pos_name, &[1, n_pos, h])?.reshape(&[n_pos, h])?
        } else {
            l.tensor(&pos_name, &[n_pos, h])?
        };
        let cls = match &cls_name {
            Some(n) if hf_vit => Some(l.tensor(n, &[1, 1, h])?.reshape(&[1, h])?),
            Some(n) => Some(l.tensor(n, &[h])?.reshape(&[1, h])?),
            None => None,
        };
        let registers = match cfg.registers {
            0 => None,
            r => Some(
                l.tensor(&format!("{pre}embeddings.register_tokens"), &[1, r, h])?
                    .reshape(&[r, h])?,
            ),
        };
        let base = if hf_vit {
            format!("{pre}encoder.layer")
        } else {
            format!("{pre}encoder.layers")
        };
        let blocks = (0..t.layers)
            .map(|i| l.block(&base, i, t, hf_vit, dino))
            .collect::<Result<Vec<_>>>()?;
        let post_norm = match cfg.arch {
            VisionArch::Vit | VisionArch::Dinov2 => l.norm(&format!("{pre}layernorm"), h)?,
            _ => l.norm(&format!("{pre}post_layernorm"), h)?,
        };
        let pre_norm = match cfg.arch {
            VisionArch::Clip => Some(l.norm(&format!("{pre}pre_layrnorm"), h)?),
            _ => None,
        };
        let map_head = if cfg.arch == VisionArch::Siglip && l.has(&format!("{pre}head.probe")) {
            let hd = format!("{pre}head");
            let in_w = l
                .tensor(&format!("{hd}.attention.in_proj_weight"), &[3 * h, h])?
                .to_f32_vec()?;
            let in_b = l
                .tensor(&format!("{hd}.attention.in_proj_bias"), &[3 * h])?
                .to_f32_vec()?;
            let part = |i: usize| -> Result<Linear> {
                Ok(Linear {
                    w: Tensor::from_f32(&[h, h], &in_w[i * h * h..(i + 1) * h * h])?,
                    b: Some(Tensor::from_f32(&[h], &in_b[i * h..(i + 1) * h])?),
                })
            };
            Some(MapHead {
                probe: l
                    .tensor(&format!("{hd}.probe"), &[1, 1, h])?
                    .reshape(&[1, h])?,
                q: part(0)?,
                k: part(1)?,
                v: part(2)?,
                out: l.linear(&format!("{hd}.attention.out_proj"), h, h)?,
                norm: l.norm(&format!("{hd}.layernorm"), h)?,
                fc1: l.linear(&format!("{hd}.mlp.fc1"), t.intermediate, h)?,
                fc2: l.linear(&format!("{hd}.mlp.fc2"), h, t.intermediate)?,
            })
        } else {
            None
        };
        let pooler = if cfg.arch == VisionArch::Vit && l.has(&format!("{pre}pooler.dense.weight")) {
            Some(l.linear(&format!("{pre}pooler.dense"), h, h)?)
        } else {
            None
        };
        let classifier = if l.has("classifier.weight") {
            let n = cfg.labels.len().max(1);
            let inp = if dino { 2 * h } else { h };
            Some(l.linear("classifier", n, inp)?)
        } else {
            None
        };
        let projection = if l.has("visual_projection.weight") {
            let w = l.file.tensor("visual_projection.weight")?;
            let out = w.dims().first().copied().unwrap_or(0);
            Some(l.linear("visual_projection", out, h)?)
        } else {
            None
        };
        let text = match &cfg.text {
            Some(tc) => {
                let tt = &tc.tower;
                let th = tt.hidden;
                let blocks = (0..tt.layers)
                    .map(|i| l.block("text_model.encoder.layers", i, tt, false, false))
                    .collect::<Result<Vec<_>>>()?;
                let projection = if cfg.arch == VisionArch::Clip {
                    let w = l.file.tensor("text_projection.weight")?;
                    let out = w.dims().first().copied().unwrap_or(0);
                    l.linear("text_projection", out, th)?
                } else {
                    let w = l.file.tensor("text_model.head.weight")?;
                    let out = w.dims().first().copied().unwrap_or(0);
                    l.linear("text_model.head", out, th)?
                };
                Some(TextWeights {
                    tokens: l.tensor(
                        "text_model.embeddings.token_embedding.weight",
                        &[tc.vocab, th],
                    )?,
                    positions: l.tensor(
                        "text_model.embeddings.position_embedding.weight",
                        &[tc.max_positions, th],
                    )?,
                    blocks,
                    final_norm: l.norm("text_model.final_layer_norm", th)?,
                    projection,
                })
            }
            None => None,
        };
        Ok(VisionWeights {
            patch,
            cls,
            positions,
            registers,
            pre_norm,
            blocks,
            post_norm,
            map_head,
            pooler,
            classifier,
            projection,
            text,
            logit_scale: l.scalar("logit_scale")?,
            logit_bias: l.scalar("logit_bias")?,
        })
    }
}

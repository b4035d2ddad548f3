//! The WhisperStyle weights under transformers' names (`model.encoder.layers.N.self_attn.q_proj`,
//! …), each checked for presence and shape at load. Matrices are used in place from the file
//! mapping, except the convolution kernels, which are rearranged once into the matrices the
//! convolutions are computed with, and the self-attention q/k/v, stacked into one matrix
//! where the backend prefers that.

use super::config::WhisperConfig;
use crate::step::{shared_f32, stack_rows, Linear, Norm};
use cyb_format::ModelFile;
use cyb_tensor::{DType, Error, Result, Tensor};
use std::collections::HashSet;

/// A 1-D convolution of kernel 3 (padding 1) as the matrix it is computed with: `w` holds
/// `[out, 3 · in]`, tap-major (`w[o, q · in + c] = kernel[o, c, q]`), so that the convolution is
/// `w · [x(t·s-1); x(t·s); x(t·s+1)] + b`.
pub(crate) struct Conv3 {
    pub lin: Linear,
    pub stride: usize,
}

/// q/k/v of one attention, stacked (`[3d, d]`, k's bias zero) or apart.
pub(crate) enum Qkv {
    Stacked(Linear),
    Apart(Box<[Linear; 3]>),
}

pub(crate) struct EncoderLayer {
    pub attn_norm: Norm,
    pub qkv: Qkv,
    pub attn_out: Linear,
    pub mlp_norm: Norm,
    pub fc1: Linear,
    pub fc2: Linear,
}

pub(crate) struct DecoderLayer {
    pub self_norm: Norm,
    pub self_qkv: Qkv,
    pub self_out: Linear,
    pub cross_norm: Norm,
    pub cross_q: Linear,
    pub cross_k: Linear,
    pub cross_v: Linear,
    pub cross_out: Linear,
    pub mlp_norm: Norm,
    pub fc1: Linear,
    pub fc2: Linear,
}

pub(crate) struct WhisperWeights {
    pub conv1: Conv3,
    pub conv2: Conv3,
    /// `[max_source_positions, d]`.
    pub encoder_positions: Tensor,
    pub encoder_layers: Vec<EncoderLayer>,
    pub encoder_norm: Norm,
    /// `[vocab, d]`, also the output projection (tied).
    pub tokens: Tensor,
    /// `[max_target_positions, d]`.
    pub decoder_positions: Tensor,
    pub decoder_layers: Vec<DecoderLayer>,
    pub decoder_norm: Norm,
}

struct Loader<'a> {
    file: &'a ModelFile,
    names: HashSet<String>,
    stack: bool,
}

impl Loader<'_> {
    fn tensor(&self, name: &str, dims: &[usize]) -> Result<Tensor> {
        if !self.names.contains(name) {
            return Err(Error::MissingTensor {
                name: name.to_string(),
                required_by: format!("Whisper in {}", self.file.path().display()),
            });
        }
        let t = self.file.tensor(name)?;
        if t.dims() != dims {
            return Err(Error::shape(format!("tensor {name}"), dims, t.dims()));
        }
        Ok(t)
    }

    fn linear(&self, name: &str, out: usize, inp: usize, bias: bool) -> Result<Linear> {
        Ok(Linear {
            w: self.tensor(&format!("{name}.weight"), &[out, inp])?,
            b: if bias {
                Some(f32_copy(self.tensor(&format!("{name}.bias"), &[out])?)?)
            } else {
                None
            },
        })
    }

    fn norm(&self, name: &str, d: usize) -> Result<Norm> {
        Ok(Norm {
            w: f32_copy(self.tensor(&format!("{name}.weight"), &[d])?)?,
            b: f32_copy(self.tensor(&format!("{name}.bias"), &[d])?)?,
        })
    }

    /// `{name}.{q,k,v}_proj` (k without a bias), stacked when the backend prefers it and the
    /// three share a dtype.
    fn qkv(&self, name: &str, d: usize) -> Result<Qkv> {
        let q = self.linear(&format!("{name}.q_proj"), d, d, true)?;
        let k = self.linear(&format!("{name}.k_proj"), d, d, false)?;
        let v = self.linear(&format!("{name}.v_proj"), d, d, true)?;
        if self.stack {
            if let (Some(w), Some(qb), Some(vb)) =
                (stack_rows(&[&q.w, &k.w, &v.w]), q.b.as_ref(), v.b.as_ref())
            {
                let mut b = qb.to_f32_vec()?;
                b.extend(std::iter::repeat_n(0.0, d));
                b.extend(vb.to_f32_vec()?);
                let b = shared_f32(&[3 * d], &b)?;
                return Ok(Qkv::Stacked(Linear { w, b: Some(b) }));
            }
        }
        Ok(Qkv::Apart(Box::new([q, k, v])))
    }

    fn conv(&self, name: &str, out: usize, inp: usize, stride: usize) -> Result<Conv3> {
        let kernel = self.tensor(&format!("{name}.weight"), &[out, inp, 3])?;
        let k = kernel.to_f32_vec()?;
        let mut w = vec![0f32; out * 3 * inp];
        for o in 0..out {
            for c in 0..inp {
                for q in 0..3 {
                    w[o * 3 * inp + q * inp + c] = k[(o * inp + c) * 3 + q];
                }
            }
        }
        let b = f32_copy(self.tensor(&format!("{name}.bias"), &[out])?)?;
        Ok(Conv3 {
            lin: Linear {
                w: shared_f32(&[out, 3 * inp], &w)?,
                b: Some(b),
            },
            stride,
        })
    }
}

/// `t` as F32: biases, norms and the encoder's position table are added, not multiplied, and
/// the backends add and normalize in F32 (an F16 checkpoint's or a requantized import's small
/// tensors would otherwise send those ops to the reference).
fn f32_copy(t: Tensor) -> Result<Tensor> {
    if t.dtype() == DType::F32 {
        return Ok(t);
    }
    shared_f32(t.dims(), &t.to_f32_vec()?)
}

impl WhisperWeights {
    /// Finds every tensor `c` needs in `file` and checks its shape; `stack` stacks the
    /// self-attention projections (see [`Qkv`]).
    pub(crate) fn load(file: &ModelFile, c: &WhisperConfig, stack: bool) -> Result<WhisperWeights> {
        let l = Loader {
            file,
            names: file.tensors().into_iter().map(|t| t.name).collect(),
            stack,
        };
        let d = c.d_model;
        let encoder_layers = (0..c.encoder_layers)
            .map(|i| {
                let p = format!("model.encoder.layers.{i}");
                Ok(EncoderLayer {
                    attn_norm: l.norm(&format!("{p}.self_attn_layer_norm"), d)?,
                    qkv: l.qkv(&format!("{p}.self_attn"), d)?,
                    attn_out: l.linear(&format!("{p}.self_attn.out_proj"), d, d, true)?,
                    mlp_norm: l.norm(&format!("{p}.final_layer_norm"), d)?,
                    fc1: l.linear(&format!("{p}.fc1"), c.encoder_ffn_dim, d, true)?,
                    fc2: l.linear(&format!("{p}.fc2"), d, c.encoder_ffn_dim, true)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let decoder_layers = (0..c.decoder_layers)
            .map(|i| {
                let p = format!("model.decoder.layers.{i}");
                let x = format!("{p}.encoder_attn");
                Ok(DecoderLayer {
                    self_norm: l.norm(&format!("{p}.self_attn_layer_norm"), d)?,
                    self_qkv: l.qkv(&format!("{p}.self_attn"), d)?,
                    self_out: l.linear(&format!("{p}.self_attn.out_proj"), d, d, true)?,
                    cross_norm: l.norm(&format!("{p}.encoder_attn_layer_norm"), d)?,
                    cross_q: l.linear(&format!("{x}.q_proj"), d, d, true)?,
                    cross_k: l.linear(&format!("{x}.k_proj"), d, d, false)?,
                    cross_v: l.linear(&format!("{x}.v_proj"), d, d, true)?,
                    cross_out: l.linear(&format!("{x}.out_proj"), d, d, true)?,
                    mlp_norm: l.norm(&format!("{p}.final_layer_norm"), d)?,
                    fc1: l.linear(&format!("{p}.fc1"), c.decoder_ffn_dim, d, true)?,
                    fc2: l.linear(&format!("{p}.fc2"), d, c.decoder_ffn_dim, true)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let tokens = l.tensor("model.decoder.embed_tokens.weight", &[c.vocab_size, d])?;
        if l.names.contains("proj_out.weight") {
            // Every Whisper ties it to the token embedding; a checkpoint that does not would
            // need its own projection, which no published one has.
            let proj = l.tensor("proj_out.weight", &[c.vocab_size, d])?;
            if proj.host_bytes() != tokens.host_bytes() {
                return Err(Error::invalid(
                    "whisper weights",
                    "proj_out.weight differs from model.decoder.embed_tokens.weight (an untied \
                     output projection is not supported)",
                ));
            }
        }
        Ok(WhisperWeights {
            conv1: l.conv("model.encoder.conv1", d, c.num_mel_bins, 1)?,
            conv2: l.conv("model.encoder.conv2", d, d, 2)?,
            encoder_positions: f32_copy(l.tensor(
                "model.encoder.embed_positions.weight",
                &[c.max_source_positions, d],
            )?)?,
            encoder_layers,
            encoder_norm: l.norm("model.encoder.layer_norm", d)?,
            tokens,
            decoder_positions: l.tensor(
                "model.decoder.embed_positions.weight",
                &[c.max_target_positions, d],
            )?,
            decoder_layers,
            decoder_norm: l.norm("model.decoder.layer_norm", d)?,
        })
    }
}

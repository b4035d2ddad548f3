//! The LlamaStyle family as a graph template: the same block as `model.rs`, written as a
//! `cyb_graph::Graph` so the graph executor can run GGUF and safetensors models too
//! (`--path graph`). The two must agree (F32 within 1e-5); tests compare them.
//!
//! The graph is stateless: the KV cache stays with the session. Inputs:
//! `ids` and `positions` I64 `[n]`, and per layer `past_k.{i}`, `past_v.{i}` F32
//! `[kv_heads, past, head_dim]` (the cached prefix). Outputs: `logits` (`[1, vocab]` for the
//! last token, or `[n, vocab]` for all), then per layer `k.{i}`, `v.{i}` F32
//! `[n, kv_heads, head_dim]`, the new tokens' keys (after rope) and values that the session
//! appends to its cache.

use super::config::{Activation, LlamaConfig};
use super::weights::{GateUpWeights, LayerWeights, LlamaWeights, QkvWeights};
use cyb_graph::{Dim, Graph, NodeOp, ValueId, ValueType};
use cyb_ops::{GeluApprox, Op, SdpaLayout};
use cyb_tensor::{DType, Error, Result, Tensor};

/// Appends nodes with generated, unique value names.
struct Builder<'a> {
    g: Graph,
    cfg: &'a LlamaConfig,
    next: usize,
}

impl Builder<'_> {
    fn input(&mut self, name: &str, dtype: DType, dims: Vec<Dim>) -> ValueId {
        let id = self.g.add_value(
            name,
            Some(ValueType {
                dtype,
                dims: Some(dims),
            }),
        );
        self.g.inputs.push(id);
        id
    }

    fn weight(&mut self, name: &str, t: &Tensor) -> ValueId {
        self.g.add_constant(name, t.clone())
    }

    fn node(&mut self, op: Op, inputs: &[ValueId], outputs: usize) -> Vec<ValueId> {
        let base = format!("{}_{}", op.name(), self.next);
        self.next += 1;
        let names: Vec<String> = match outputs {
            1 => vec![base.clone()],
            n => (0..n).map(|k| format!("{base}.{k}")).collect(),
        };
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let inputs = inputs.iter().map(|&i| Some(i)).collect();
        self.g.add_node(&base, NodeOp::Op(op), inputs, &names)
    }

    fn op(&mut self, op: Op, inputs: &[ValueId]) -> ValueId {
        self.node(op, inputs, 1)[0]
    }

    fn linear(&mut self, x: ValueId, w: ValueId, bias: Option<ValueId>) -> ValueId {
        let y = self.op(
            Op::MatMul {
                rhs_transposed: true,
            },
            &[x, w],
        );
        match bias {
            Some(b) => self.op(Op::Add, &[y, b]),
            None => y,
        }
    }

    fn rms_norm(&mut self, x: ValueId, w: ValueId) -> ValueId {
        let op = Op::RmsNorm {
            eps: self.cfg.norm_eps,
            weight_offset: self.cfg.norm_weight_offset,
        };
        self.op(op, &[x, w])
    }

    fn reshape(&mut self, x: ValueId, dims: &[isize]) -> ValueId {
        self.op(
            Op::Reshape {
                dims: dims.to_vec(),
            },
            &[x],
        )
    }

    fn permute_021(&mut self, x: ValueId) -> ValueId {
        self.op(
            Op::Permute {
                perm: vec![1, 0, 2],
            },
            &[x],
        )
    }

    fn softcap(&mut self, x: ValueId, c: f32) -> ValueId {
        let y = self.op(Op::Scale { factor: 1.0 / c }, &[x]);
        let y = self.op(Op::Tanh, &[y]);
        self.op(Op::Scale { factor: c }, &[y])
    }

    fn opt_weight(&mut self, name: &str, t: &Option<Tensor>) -> Option<ValueId> {
        t.as_ref().map(|t| self.weight(name, t))
    }
}

/// Builds the template for `cfg` over `weights` (the graph holds the weight tensors, which
/// still point into the file mapping). `last_only` makes `logits` the last token's row only.
pub(super) fn llama_graph(
    cfg: &LlamaConfig,
    weights: &LlamaWeights,
    last_only: bool,
) -> Result<Graph> {
    let mut b = Builder {
        g: Graph::default(),
        cfg,
        next: 0,
    };
    let n = || Dim::Sym("n".into());
    let ids = b.input("ids", DType::I64, vec![n()]);
    let positions = b.input("positions", DType::I64, vec![n()]);
    let (hkv, d) = (cfg.num_kv_heads, cfg.head_dim);
    let mut past = Vec::with_capacity(cfg.num_layers);
    for i in 0..cfg.num_layers {
        let kv_dims = || vec![Dim::Fixed(hkv), Dim::Sym("past".into()), Dim::Fixed(d)];
        let k = b.input(&format!("past_k.{i}"), DType::F32, kv_dims());
        let v = b.input(&format!("past_v.{i}"), DType::F32, kv_dims());
        past.push((k, v));
    }
    let embed = b.weight("token_embd.weight", &weights.embed);
    let mut x = b.op(Op::Embedding, &[embed, ids]);
    if let Some(s) = cfg.embedding_scale {
        x = b.op(Op::Scale { factor: s }, &[x]);
    }
    let rope_freqs = b.opt_weight("rope_freqs.weight", &weights.rope_freqs);
    let mut new_kv = Vec::with_capacity(cfg.num_layers);
    if weights.layers.len() != cfg.num_layers || cfg.layers.len() != cfg.num_layers {
        return Err(Error::invalid(
            "llama graph template",
            format!(
                "{} layers of weights and {} of attention settings for {} layers",
                weights.layers.len(),
                cfg.layers.len(),
                cfg.num_layers
            ),
        ));
    }
    for (i, (layer, &(past_k, past_v))) in weights.layers.iter().zip(&past).enumerate() {
        let (a, k, v) = attention(&mut b, i, layer, x, positions, rope_freqs, past_k, past_v);
        new_kv.push((k, v));
        x = b.op(Op::Add, &[x, a]);
        let m = feed_forward(&mut b, i, layer, x);
        x = b.op(Op::Add, &[x, m]);
    }
    if last_only {
        let last = Op::Slice {
            axis: 0,
            start: -1,
            end: isize::MAX,
            step: 1,
        };
        x = b.op(last, &[x]);
    }
    let norm = b.weight("output_norm.weight", &weights.output_norm);
    x = b.rms_norm(x, norm);
    // When tied this is the embedding tensor again: a second constant over the same storage.
    let output = b.weight("output.weight", &weights.output);
    let mut logits = b.linear(x, output, None);
    if let Some(c) = cfg.final_softcap {
        logits = b.softcap(logits, c);
    }
    rename(&mut b.g, logits, "logits");
    b.g.outputs.push(logits);
    for (i, (k, v)) in new_kv.into_iter().enumerate() {
        rename(&mut b.g, k, &format!("k.{i}"));
        rename(&mut b.g, v, &format!("v.{i}"));
        b.g.outputs.extend([k, v]);
    }
    b.g.validate()?;
    Ok(b.g)
}

fn rename(g: &mut Graph, id: ValueId, name: &str) {
    if let Some(v) = g.values.get_mut(id) {
        v.name = name.to_string();
    }
}

/// Block `i`'s attention; returns its output `[n, hidden]` and the new keys and values
/// `[n, kv_heads, head_dim]`.
#[allow(clippy::too_many_arguments)]
fn attention(
    b: &mut Builder,
    i: usize,
    layer: &LayerWeights,
    x: ValueId,
    positions: ValueId,
    rope_freqs: Option<ValueId>,
    past_k: ValueId,
    past_v: ValueId,
) -> (ValueId, ValueId, ValueId) {
    let cfg = b.cfg;
    let (hq, hkv, d) = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim);
    let attn = &cfg.layers[i];
    let w = |name: &str| format!("blk.{i}.{name}");
    let norm = b.weight(&w("attn_norm.weight"), &layer.attn_norm);
    let h = b.rms_norm(x, norm);
    let (q, k, v) = match &layer.qkv {
        QkvWeights::Split { q, k, v } => {
            let (q, k, v) = (
                b.weight(&w("attn_q.weight"), q),
                b.weight(&w("attn_k.weight"), k),
                b.weight(&w("attn_v.weight"), v),
            );
            (
                b.linear(h, q, None),
                b.linear(h, k, None),
                b.linear(h, v, None),
            )
        }
        QkvWeights::Fused(qkv) => {
            let qkv = b.weight(&w("attn_qkv.weight"), qkv);
            let y = b.linear(h, qkv, None);
            let split = Op::Split {
                axis: -1,
                sizes: vec![hq * d, hkv * d, hkv * d],
            };
            let parts = b.node(split, &[y], 3);
            (parts[0], parts[1], parts[2])
        }
    };
    let bias = |b: &mut Builder, t: ValueId, name: &str, bias: &Option<Tensor>| match bias {
        Some(bt) => {
            let c = b.weight(&w(name), bt);
            b.op(Op::Add, &[t, c])
        }
        None => t,
    };
    let q = bias(b, q, "attn_q.bias", &layer.q_bias);
    let k = bias(b, k, "attn_k.bias", &layer.k_bias);
    let v = bias(b, v, "attn_v.bias", &layer.v_bias);
    let (hq, hkv, d) = (hq as isize, hkv as isize, d as isize);
    let mut q = b.reshape(q, &[-1, hq, d]);
    let mut k = b.reshape(k, &[-1, hkv, d]);
    let v = b.reshape(v, &[-1, hkv, d]);
    if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
        let qn = b.weight(&w("attn_q_norm.weight"), qn);
        let kn = b.weight(&w("attn_k_norm.weight"), kn);
        q = b.rms_norm(q, qn);
        k = b.rms_norm(k, kn);
    }
    let rope = Op::Rope {
        layout: cfg.rope_layout,
        rot_dims: cfg.rot_dims,
        base: attn.rope_base,
        scaling: attn.rope_scaling,
    };
    let (q, k) = match rope_freqs {
        Some(f) => (
            b.op(rope.clone(), &[q, positions, f]),
            b.op(rope, &[k, positions, f]),
        ),
        None => (
            b.op(rope.clone(), &[q, positions]),
            b.op(rope, &[k, positions]),
        ),
    };
    let k_t = b.permute_021(k);
    let v_t = b.permute_021(v);
    let k_all = b.op(Op::Concat { axis: 1 }, &[past_k, k_t]);
    let v_all = b.op(Op::Concat { axis: 1 }, &[past_v, v_t]);
    let q = b.permute_021(q);
    let sdpa = Op::Sdpa {
        layout: SdpaLayout::HeadMajor,
        scale: cfg.attention_scale,
        causal: true,
        sliding_window: attn.sliding_window,
        softcap: cfg.attn_softcap,
        alibi_max_bias: None,
    };
    let a = b.op(sdpa, &[q, k_all, v_all]);
    let a = b.permute_021(a);
    let a = b.reshape(a, &[-1, hq * d]);
    let o = b.weight(&w("attn_output.weight"), &layer.attn_out);
    let mut a = b.linear(a, o, None);
    if let Some(pn) = &layer.post_attn_norm {
        let pn = b.weight(&w("post_attention_norm.weight"), pn);
        a = b.rms_norm(a, pn);
    }
    (a, k, v)
}

/// Block `i`'s gated feed-forward for `x` `[n, hidden]`.
fn feed_forward(b: &mut Builder, i: usize, layer: &LayerWeights, x: ValueId) -> ValueId {
    let w = |name: &str| format!("blk.{i}.{name}");
    let norm = b.weight(&w("ffn_norm.weight"), &layer.ffn_norm);
    let h = b.rms_norm(x, norm);
    let glu = match b.cfg.activation {
        Activation::SwiGlu => Op::SwiGlu,
        Activation::GeGluTanh => Op::GeGlu {
            approx: GeluApprox::Tanh,
        },
    };
    let act = match &layer.gate_up {
        GateUpWeights::Split { gate, up } => {
            let (gw, uw) = (
                b.weight(&w("ffn_gate.weight"), gate),
                b.weight(&w("ffn_up.weight"), up),
            );
            let g = b.linear(h, gw, None);
            let u = b.linear(h, uw, None);
            b.op(glu, &[g, u])
        }
        GateUpWeights::Fused(gu) => {
            let gu = b.weight(&w("ffn_gate_up.weight"), gu);
            let y = b.linear(h, gu, None);
            b.op(glu, &[y])
        }
    };
    let down = b.weight(&w("ffn_down.weight"), &layer.down);
    let mut y = b.linear(act, down, None);
    if let Some(pn) = &layer.post_ffw_norm {
        let pn = b.weight(&w("post_ffw_norm.weight"), pn);
        y = b.rms_norm(y, pn);
    }
    y
}

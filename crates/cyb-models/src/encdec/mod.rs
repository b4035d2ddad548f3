//! What every encoder–decoder family shares (Whisper now; T5, BART and Marian later): the
//! cross-attention keys and values computed once from the encoder's output and read by every
//! decoder step, and the decoder's per-sequence self-attention caches, which a beam search copies
//! ([`crate::KvCache::copy_from`]) when a hypothesis has more than one continuation.

use cyb_tensor::{Error, Result, Tensor};

/// Per decoder layer, the keys and values of the encoder states, each `[source, heads,
/// head_dim]` (token-major), on the backend that computed them.
#[derive(Debug)]
pub struct CrossKv {
    layers: Vec<(Tensor, Tensor)>,
}

impl CrossKv {
    pub fn new(layers: Vec<(Tensor, Tensor)>) -> CrossKv {
        CrossKv { layers }
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Keys and values of decoder layer `i`.
    pub fn layer(&self, i: usize) -> Result<(&Tensor, &Tensor)> {
        self.layers
            .get(i)
            .map(|(k, v)| (k, v))
            .ok_or_else(|| Error::invalid("cross attention", format!("no layer {i}")))
    }
}

//! How a batch of token sequences of different lengths is laid out for the encoder.
//!
//! - **Padded**: every sequence right-padded to the longest, `[b·l]` rows, with an additive
//!   `-inf` mask `[b, 1, 1, l]` hiding the padding keys; one attention op per layer. For
//!   backends that run masked attention natively (and the CPU reference).
//! - **Packed**: the sequences' rows back to back, `[Σ lenᵢ]` rows, no padding at all; the
//!   row-wise ops (projections, norms, activations) see one matrix and attention runs once per
//!   sequence over its own rows, unmasked. No work is spent on padding, and a backend without
//!   masked attention keeps its fast kernel.
//!
//! Either way each sequence's real tokens get exactly the states they would get alone.

use super::config::{BertConfig, BertVariant};
use cyb_tensor::{Error, Result, Tensor};

/// Which layout a forward pass uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BatchLayout {
    /// Padded when the primary backend runs masked attention itself (or nothing is padded),
    /// else packed.
    #[default]
    Auto,
    Padded,
    Packed,
}

/// The inputs of one forward pass: ids, positions and token types, one per row.
pub(super) struct Batch {
    pub ids: Tensor,
    pub positions: Tensor,
    pub types: Tensor,
    /// Real tokens of each sequence.
    pub lens: Vec<usize>,
    /// First row of each sequence.
    pub starts: Vec<usize>,
    pub rows: usize,
    /// `Some((l, mask))` for the padded layout: the padded length and the `[b, 1, 1, l]` mask
    /// (`None` when no sequence is padded).
    pub padded: Option<(usize, Option<Tensor>)>,
}

/// Checks `seqs` against the model: non-empty, within the position table and vocabulary.
pub(super) fn check(c: &BertConfig, seqs: &[Vec<u32>]) -> Result<()> {
    if seqs.is_empty() {
        return Err(Error::invalid("encode", "no sequences to encode"));
    }
    let max = c.max_tokens();
    for (i, s) in seqs.iter().enumerate() {
        if s.is_empty() {
            return Err(Error::invalid("encode", format!("sequence {i} is empty")));
        }
        if s.len() > max {
            return Err(Error::invalid(
                "encode",
                format!(
                    "sequence {i} has {} tokens; the model takes at most {max} \
                     (max_position_embeddings {})",
                    s.len(),
                    c.max_position
                ),
            ));
        }
        if let Some(id) = s.iter().find(|&&id| id as usize >= c.vocab_size) {
            return Err(Error::invalid(
                "encode",
                format!(
                    "token id {id} is outside the vocabulary of {}",
                    c.vocab_size
                ),
            ));
        }
    }
    Ok(())
}

impl Batch {
    /// Lays out checked `seqs` (`padded` picks the padded layout) with the token type of every
    /// token (a text pair: 0 for the first text, 1 for the second), checked against the
    /// model's token type table; `None` is all 0.
    pub(super) fn with_types(
        c: &BertConfig,
        seqs: &[Vec<u32>],
        types: Option<&[Vec<u32>]>,
        padded: bool,
    ) -> Result<Batch> {
        check(c, seqs)?;
        // A model without a token type table ignores them (DeBERTa-v3, DistilBERT).
        let types = types.filter(|_| c.type_vocab_size > 0);
        if let Some(types) = types {
            let fits = types.len() == seqs.len()
                && types.iter().zip(seqs).all(|(t, s)| t.len() == s.len());
            if !fits {
                return Err(Error::invalid(
                    "encode",
                    "token types must give one type per token of every sequence",
                ));
            }
            let limit = c.type_vocab_size;
            if let Some(t) = types.iter().flatten().find(|&&t| t as usize >= limit) {
                return Err(Error::invalid(
                    "encode",
                    format!("token type {t} is outside the model's {limit} token types"),
                ));
            }
        }
        let lens: Vec<usize> = seqs.iter().map(Vec::len).collect();
        let longest = lens.iter().copied().max().unwrap_or(0);
        let all_full = lens.iter().all(|&n| n == longest);
        // Without padding both layouts are the same rows; call it padded (one attention op).
        let padded = padded || all_full;
        let slots = if padded { longest } else { 0 };
        let pad = i64::from(c.pad_token_id);
        let (mut ids, mut positions, mut starts) = (Vec::new(), Vec::new(), Vec::new());
        let mut type_ids = Vec::new();
        for (i, s) in seqs.iter().enumerate() {
            starts.push(ids.len());
            for j in 0..s.len().max(slots) {
                let real = s.get(j).map(|&t| i64::from(t));
                ids.push(real.unwrap_or(pad));
                let ty = types.and_then(|t| t.get(i)).and_then(|t| t.get(j));
                type_ids.push(ty.map_or(0, |&t| i64::from(t)));
                // RoBERTa gives padding the pad id's own position (transformers'
                // create_position_ids_from_input_ids); BERT numbers every slot.
                positions.push(match (real, c.variant) {
                    (None, BertVariant::Roberta) => pad,
                    _ => (c.position_offset + j) as i64,
                });
            }
        }
        let rows = ids.len();
        let padded = if !padded {
            None
        } else if all_full {
            Some((longest, None))
        } else {
            let m: Vec<f32> = lens
                .iter()
                .flat_map(|&n| {
                    (0..longest).map(move |j| if j < n { 0.0 } else { f32::NEG_INFINITY })
                })
                .collect();
            let mask = Tensor::from_f32(&[lens.len(), 1, 1, longest], &m)?;
            Some((longest, Some(mask)))
        };
        Ok(Batch {
            ids: Tensor::from_i64(&[rows], &ids)?,
            positions: Tensor::from_i64(&[rows], &positions)?,
            types: Tensor::from_i64(&[rows], &type_ids)?,
            lens,
            starts,
            rows,
            padded,
        })
    }

    /// Each sequence's real rows of a host `[rows, width]` result.
    pub(super) fn split_rows(&self, host: &[f32], width: usize) -> Result<Vec<Vec<f32>>> {
        self.starts
            .iter()
            .zip(&self.lens)
            .map(|(&s, &n)| {
                host.get(s * width..(s + n) * width)
                    .map(<[f32]>::to_vec)
                    .ok_or_else(|| Error::invalid("encode", "result shorter than the batch"))
            })
            .collect()
    }
}

//! ONNX TfIdfVectorizer over integer tokens: counts the pool's n-grams in each row of `X`
//! (`[N]` or `[B, N]`), where an n-gram may skip up to `max_skip` tokens between its items (the
//! same gap throughout; unigrams count once per position), and writes F32 term frequencies,
//! inverse-document-frequency weights, or their product.

use crate::host_op::{req, HostRun};
use cyb_tensor::memory::filled_vec;
use cyb_tensor::{Error, Result, Tensor};
use std::collections::HashMap;

const OP: &str = "tfidf_vectorizer";

/// What each output column holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TfIdfMode {
    /// The count.
    Tf,
    /// The weight where the count is non-zero.
    Idf,
    /// Count × weight.
    TfIdf,
}

/// The attributes of one TfIdfVectorizer (ONNX's names).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TfIdfSpec {
    pub mode: TfIdfMode,
    pub min_gram_length: usize,
    pub max_gram_length: usize,
    pub max_skip_count: usize,
    /// Start, in `pool`, of the n-grams of each length (1, 2, ...).
    pub ngram_counts: Vec<i64>,
    /// Output column of each n-gram of the pool, in pool order.
    pub ngram_indexes: Vec<i64>,
    pub pool: Vec<i64>,
    pub weights: Option<Vec<f32>>,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::invalid(OP, reason)
}

/// Every n-gram of the pool with its output column.
fn grams(s: &TfIdfSpec) -> Result<HashMap<Vec<i64>, usize>> {
    let mut map = HashMap::new();
    let mut next = 0usize;
    for (level, &start) in s.ngram_counts.iter().enumerate() {
        let n = level + 1;
        let end = match s.ngram_counts.get(level + 1) {
            Some(&e) => e,
            None => s.pool.len() as i64,
        };
        let (start, end) = (usize::try_from(start), usize::try_from(end));
        let (Ok(start), Ok(end)) = (start, end) else {
            return Err(bad("negative ngram_counts"));
        };
        let items = s
            .pool
            .get(start..end)
            .ok_or_else(|| bad(format!("ngram_counts {start}..{end} outside the pool")))?;
        if !items.len().is_multiple_of(n) {
            return Err(bad(format!(
                "{} pool items are not whole {n}-grams",
                items.len()
            )));
        }
        for g in items.chunks_exact(n) {
            let col = s
                .ngram_indexes
                .get(next)
                .and_then(|&c| usize::try_from(c).ok())
                .ok_or_else(|| bad(format!("no valid ngram_indexes entry for n-gram {next}")))?;
            map.insert(g.to_vec(), col);
            next += 1;
        }
    }
    Ok(map)
}

pub(crate) fn tfidf(
    r: &mut HostRun,
    s: &TfIdfSpec,
    inputs: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let x_t = r.d.to_host(req(OP, inputs, 0)?)?;
    let x = x_t.to_i64_vec()?;
    let (rows, len, batched) = match x_t.dims() {
        [n] => (1, *n, false),
        [b, n] => (*b, *n, true),
        d => return Err(bad(format!("input {d:?} is not [N] or [B, N]"))),
    };
    let map = grams(s)?;
    let cols = s
        .ngram_indexes
        .iter()
        .map(|&c| usize::try_from(c).map(|c| c + 1).unwrap_or(0))
        .max()
        .unwrap_or(0);
    if s.min_gram_length == 0 || s.min_gram_length > s.max_gram_length {
        return Err(bad(format!(
            "gram lengths {}..={}",
            s.min_gram_length, s.max_gram_length
        )));
    }
    let mut counts = filled_vec("tfidf_vectorizer", &[rows, cols], 0f32)?;
    let mut gram = Vec::with_capacity(s.max_gram_length);
    for (row, out) in x.chunks(len.max(1)).zip(counts.chunks_mut(cols.max(1))) {
        for i in 0..row.len() {
            for skip in 0..=s.max_skip_count {
                let step = skip + 1;
                for n in s.min_gram_length..=s.max_gram_length {
                    if n == 1 && skip > 0 {
                        continue;
                    }
                    if i + (n - 1) * step >= row.len() {
                        break;
                    }
                    gram.clear();
                    gram.extend((0..n).map(|j| row[i + j * step]));
                    if let Some(&c) = map.get(&gram) {
                        if let Some(o) = out.get_mut(c) {
                            *o += 1.0;
                        }
                    }
                }
            }
        }
    }
    let weight = |c: usize| -> f32 {
        s.weights
            .as_ref()
            .and_then(|w| w.get(c).copied())
            .unwrap_or(1.0)
    };
    for (i, v) in counts.iter_mut().enumerate() {
        let w = weight(i % cols.max(1));
        *v = match s.mode {
            TfIdfMode::Tf => *v,
            TfIdfMode::Idf if *v > 0.0 => w,
            TfIdfMode::Idf => 0.0,
            TfIdfMode::TfIdf => *v * w,
        };
    }
    let dims = if batched {
        vec![rows, cols]
    } else {
        vec![cols]
    };
    Ok(vec![Tensor::from_f32(&dims, &counts)?])
}

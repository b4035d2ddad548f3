//! Sentence vectors from an encoder's token states, as sentence-transformers' `Pooling` and
//! `Normalize` modules compute them: the first token, the mean or the per-dimension maximum
//! over the real (unpadded) tokens, then optionally scaled to unit L2 length.
//!
//! This is a handful of additions per vector on host rows that are already there, so it runs
//! in plain Rust rather than as ops.

use cyb_tensor::{Error, Result};

/// How one vector is made from a sequence's token states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The first token (`[CLS]` / `<s>`).
    Cls,
    /// The mean over the tokens, summed in token order.
    Mean,
    /// The largest value of each dimension over the tokens.
    Max,
}

impl Pooling {
    /// Parses `cls`, `mean` or `max`.
    pub fn parse(s: &str) -> Result<Pooling> {
        match s {
            "cls" => Ok(Pooling::Cls),
            "mean" => Ok(Pooling::Mean),
            "max" => Ok(Pooling::Max),
            other => Err(Error::InvalidConfig {
                field: "pooling".into(),
                reason: format!("unknown pooling {other:?}; use cls, mean or max"),
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Pooling::Cls => "cls",
            Pooling::Mean => "mean",
            Pooling::Max => "max",
        }
    }
}

/// The final hidden states of a batch: one `[tokens, hidden]` block per sequence, only its
/// real tokens (padding dropped).
#[derive(Clone, Debug)]
pub struct EncoderOutput {
    pub hidden: usize,
    /// Row-major `[len_i, hidden]` per sequence, in input order.
    pub states: Vec<Vec<f32>>,
}

impl EncoderOutput {
    /// One vector per sequence.
    pub fn pool(&self, pooling: Pooling, normalize: bool) -> Vec<Vec<f32>> {
        self.states
            .iter()
            .map(|s| {
                let mut v = pool_rows(s, self.hidden, pooling);
                if normalize {
                    l2_normalize(&mut v);
                }
                v
            })
            .collect()
    }
}

/// Pools `rows` (`[n, hidden]` row-major, `n ≥ 1` for a meaningful result; an empty block
/// gives zeros).
pub fn pool_rows(rows: &[f32], hidden: usize, pooling: Pooling) -> Vec<f32> {
    let mut it = rows.chunks_exact(hidden.max(1));
    let Some(first) = it.next() else {
        return vec![0.0; hidden];
    };
    match pooling {
        Pooling::Cls => first.to_vec(),
        Pooling::Mean => {
            let mut sum = first.to_vec();
            let mut n = 1usize;
            for r in it {
                sum.iter_mut().zip(r).for_each(|(s, x)| *s += x);
                n += 1;
            }
            sum.iter_mut().for_each(|s| *s /= n as f32);
            sum
        }
        Pooling::Max => {
            let mut m = first.to_vec();
            for r in it {
                m.iter_mut().zip(r).for_each(|(a, &x)| *a = a.max(x));
            }
            m
        }
    }
}

/// Scales `v` to unit L2 length (a zero vector stays zero, as `F.normalize`'s epsilon does).
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_two_rows() {
        let rows = [1.0, -2.0, 3.0, 4.0];
        assert_eq!(pool_rows(&rows, 2, Pooling::Cls), vec![1.0, -2.0]);
        assert_eq!(pool_rows(&rows, 2, Pooling::Mean), vec![2.0, 1.0]);
        assert_eq!(pool_rows(&rows, 2, Pooling::Max), vec![3.0, 4.0]);
        let mut v = vec![3.0, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
        assert!(Pooling::parse("sum").is_err());
    }
}

//! KL divergence between two runs over the same text, the way llama.cpp's
//! `llama-perplexity --kl-divergence-base FILE [--kl-divergence]` measures a quantization or a
//! backend against a base run.
//!
//! The base run writes, for every scored position of [`Model::perplexity`](crate::Model), its
//! whole log-probability row, compressed to 16 bits a value (`lo + q · step`, `q` in
//! `0..=65535`, `lo` no lower than 100 below the row's top log-probability). A later run reads
//! the rows back (renormalized, so each is a distribution again) and compares them with its
//! own: per position `KL(base ‖ this) = Σ p_base · (log p_base − log p_this)`, whether the top
//! token is the same, and the change of the next token's probability.
//!
//! File layout (little-endian): the 8-byte magic `CYBKLD01`, then `u32` vocabulary size, `u32`
//! context, `u32` token count, `u32` zero, the token ids (`u32` each), then one record a scored
//! position: `f32 lo`, `f32 step`, `vocab × u16`.

use cyb_tensor::{Error, Result};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"CYBKLD01";
/// How far below a row's top log-probability the stored range reaches (e^-100 is nothing).
const RANGE: f64 = 100.0;

/// `log softmax(row)` in f64; an error naming the position when a logit is NaN.
fn log_softmax(row: &[f32], pos: usize, out: &mut Vec<f64>) -> Result<()> {
    if let Some(i) = row.iter().position(|x| x.is_nan()) {
        return Err(Error::invalid(
            "kl-divergence",
            format!("logit {i} of scored position {pos} is NaN"),
        ));
    }
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
    let norm = max + sum.ln();
    out.clear();
    out.extend(row.iter().map(|&x| x as f64 - norm));
    Ok(())
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes a base file: [`KldBaseWriter::create`], one [`push`](KldBaseWriter::push) per scored
/// position, then [`finish`](KldBaseWriter::finish).
pub struct KldBaseWriter {
    path: PathBuf,
    out: BufWriter<std::fs::File>,
    vocab: usize,
    lp: Vec<f64>,
    rows: usize,
}

impl KldBaseWriter {
    pub fn create(path: &Path, vocab: usize, ctx: usize, tokens: &[u32]) -> Result<KldBaseWriter> {
        let too_big = |what: &str| {
            Error::invalid(
                "kl-divergence",
                format!("{what} does not fit the base file's 32-bit header"),
            )
        };
        let vocab32 = u32::try_from(vocab).map_err(|_| too_big("the vocabulary"))?;
        let ctx32 = u32::try_from(ctx).map_err(|_| too_big("the context"))?;
        let n32 = u32::try_from(tokens.len()).map_err(|_| too_big("the token count"))?;
        let file = std::fs::File::create(path).map_err(io(path))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let mut head = Vec::with_capacity(24 + 4 * tokens.len());
        head.extend_from_slice(MAGIC);
        for v in [vocab32, ctx32, n32, 0] {
            head.extend_from_slice(&v.to_le_bytes());
        }
        for t in tokens {
            head.extend_from_slice(&t.to_le_bytes());
        }
        out.write_all(&head).map_err(io(path))?;
        Ok(KldBaseWriter {
            path: path.to_path_buf(),
            out,
            vocab,
            lp: Vec::new(),
            rows: 0,
        })
    }

    /// Stores one scored position's logits.
    pub fn push(&mut self, logits: &[f32]) -> Result<()> {
        if logits.len() != self.vocab {
            return Err(Error::shape(
                "kl-divergence",
                &[self.vocab],
                &[logits.len()],
            ));
        }
        log_softmax(logits, self.rows, &mut self.lp)?;
        let top = self.lp.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
        let low = self.lp.iter().fold(f64::INFINITY, |m, &x| m.min(x));
        let lo = low.max(top - RANGE);
        let step = ((top - lo) / 65535.0).max(f64::MIN_POSITIVE);
        // Stored as f32: the levels below are taken against the stored values.
        let (lo, step) = (lo as f32, step as f32);
        let mut rec = Vec::with_capacity(8 + 2 * self.vocab);
        rec.extend_from_slice(&lo.to_le_bytes());
        rec.extend_from_slice(&step.to_le_bytes());
        for &v in &self.lp {
            let q = ((v - lo as f64) / step as f64).round().clamp(0.0, 65535.0) as u16;
            rec.extend_from_slice(&q.to_le_bytes());
        }
        self.out.write_all(&rec).map_err(io(&self.path))?;
        self.rows += 1;
        Ok(())
    }

    /// Flushes the file; returns the number of positions stored.
    pub fn finish(mut self) -> Result<usize> {
        self.out.flush().map_err(io(&self.path))?;
        Ok(self.rows)
    }
}

/// Reads a base file back, position by position, and gathers the comparison.
pub struct KldComparison {
    path: PathBuf,
    input: BufReader<std::fs::File>,
    vocab: usize,
    /// Where the first record starts.
    start: u64,
    rec: Vec<u8>,
    base: Vec<f64>,
    this: Vec<f64>,
    kld: Vec<f64>,
    same_top: usize,
    dp2: f64,
    nll_base: f64,
    nll_this: f64,
}

impl KldComparison {
    /// Opens `path` and checks that it was written for this vocabulary, context and text.
    pub fn open(path: &Path, vocab: usize, ctx: usize, tokens: &[u32]) -> Result<KldComparison> {
        let file = std::fs::File::open(path).map_err(io(path))?;
        let mut input = BufReader::with_capacity(1 << 20, file);
        let bad = |offset: u64, reason: String| Error::Format {
            file: path.to_path_buf(),
            offset,
            reason,
        };
        let mut head = [0u8; 24];
        input
            .read_exact(&mut head)
            .map_err(|_| bad(0, "shorter than the 24-byte header".into()))?;
        if &head[..8] != MAGIC {
            return Err(bad(
                0,
                "not a cyb-llm KL-divergence base file (written by --kl-divergence-base)".into(),
            ));
        }
        let word = |i: usize| u32::from_le_bytes(head[8 + 4 * i..12 + 4 * i].try_into().unwrap());
        let (fv, fc, fn_) = (word(0) as usize, word(1) as usize, word(2) as usize);
        if fv != vocab {
            return Err(bad(
                8,
                format!("written for a vocabulary of {fv} tokens, this model has {vocab}"),
            ));
        }
        if fc != ctx {
            return Err(bad(
                12,
                format!("written with --ctx {fc}, this run uses {ctx}"),
            ));
        }
        if fn_ != tokens.len() {
            return Err(bad(
                16,
                format!(
                    "written for a text of {fn_} tokens, this text has {}",
                    tokens.len()
                ),
            ));
        }
        let mut ids = vec![0u8; 4 * fn_];
        input
            .read_exact(&mut ids)
            .map_err(|_| bad(24, format!("ends inside its {fn_} token ids")))?;
        for (i, (c, &t)) in ids.chunks_exact(4).zip(tokens).enumerate() {
            let f = u32::from_le_bytes(c.try_into().unwrap());
            if f != t {
                return Err(bad(
                    24 + 4 * i as u64,
                    format!("token {i} is {f} there and {t} in this text: not the same text or tokenizer"),
                ));
            }
        }
        Ok(KldComparison {
            path: path.to_path_buf(),
            input,
            vocab,
            start: 24 + 4 * fn_ as u64,
            rec: vec![0u8; 8 + 2 * vocab],
            base: Vec::with_capacity(vocab),
            this: Vec::with_capacity(vocab),
            kld: Vec::new(),
            same_top: 0,
            dp2: 0.0,
            nll_base: 0.0,
            nll_this: 0.0,
        })
    }

    /// Where scored position `pos`'s record starts in the file.
    fn offset(&self, pos: usize) -> u64 {
        self.start + pos as u64 * self.rec.len() as u64
    }

    /// Compares the next stored position with `logits`, whose following token is `target`.
    pub fn push(&mut self, logits: &[f32], target: usize) -> Result<()> {
        let pos = self.kld.len();
        if logits.len() != self.vocab {
            return Err(Error::shape(
                "kl-divergence",
                &[self.vocab],
                &[logits.len()],
            ));
        }
        if target >= self.vocab {
            return Err(Error::invalid(
                "kl-divergence",
                format!("token {target} is outside the vocabulary of {}", self.vocab),
            ));
        }
        self.input
            .read_exact(&mut self.rec)
            .map_err(|_| Error::Format {
                file: self.path.clone(),
                offset: self.offset(pos),
                reason: format!("ends before scored position {pos}"),
            })?;
        let lo = f32::from_le_bytes(self.rec[0..4].try_into().unwrap()) as f64;
        let step = f32::from_le_bytes(self.rec[4..8].try_into().unwrap()) as f64;
        if !lo.is_finite() || !step.is_finite() || step <= 0.0 {
            return Err(Error::Format {
                file: self.path.clone(),
                offset: self.offset(pos),
                reason: format!("scored position {pos} has a bad range ({lo}, {step})"),
            });
        }
        self.base.clear();
        self.base.extend(
            self.rec[8..]
                .chunks_exact(2)
                .map(|c| lo + step * u16::from_le_bytes([c[0], c[1]]) as f64),
        );
        // Renormalized: the rounding must not leave a distribution summing to other than 1.
        let top = self.base.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
        let norm = top + self.base.iter().map(|&x| (x - top).exp()).sum::<f64>().ln();
        self.base.iter_mut().for_each(|x| *x -= norm);
        log_softmax(logits, pos, &mut self.this)?;
        let kl: f64 = self
            .base
            .iter()
            .zip(&self.this)
            .map(|(&b, &t)| b.exp() * (b - t))
            .sum();
        self.kld.push(kl.max(0.0));
        if argmax(&self.base) == argmax(&self.this) {
            self.same_top += 1;
        }
        let dp = self.this[target].exp() - self.base[target].exp();
        self.dp2 += dp * dp;
        self.nll_base -= self.base[target];
        self.nll_this -= self.this[target];
        Ok(())
    }

    /// The figures over every position compared; an error when the base file holds more
    /// positions than were compared (a different `--ctx` or text would have been caught
    /// earlier, so this means a truncated run).
    pub fn finish(mut self) -> Result<KldReport> {
        let n = self.kld.len();
        let mut extra = [0u8; 1];
        if self.input.read(&mut extra).map_err(io(&self.path))? != 0 {
            return Err(Error::Format {
                file: self.path.clone(),
                offset: self.offset(n),
                reason: format!("holds more scored positions than the {n} of this run"),
            });
        }
        if n == 0 {
            return Err(Error::invalid("kl-divergence", "no position was compared"));
        }
        let mean = self.kld.iter().sum::<f64>() / n as f64;
        let var = self
            .kld
            .iter()
            .map(|k| (k - mean) * (k - mean))
            .sum::<f64>()
            / (n.max(2) - 1) as f64;
        self.kld.sort_by(f64::total_cmp);
        let pct = |p: f64| self.kld[((n - 1) as f64 * p).round() as usize];
        Ok(KldReport {
            positions: n,
            mean_kld: mean,
            mean_kld_stderr: (var / n as f64).sqrt(),
            median_kld: pct(0.5),
            p99_kld: pct(0.99),
            max_kld: self.kld[n - 1],
            same_top: self.same_top as f64 / n as f64,
            rms_dp: (self.dp2 / n as f64).sqrt(),
            base_perplexity: (self.nll_base / n as f64).exp(),
            perplexity: (self.nll_this / n as f64).exp(),
        })
    }
}

fn argmax(v: &[f64]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// The comparison of a run with its base file.
#[derive(Clone, Debug, PartialEq)]
pub struct KldReport {
    /// Scored positions compared.
    pub positions: usize,
    /// Mean `KL(base ‖ this)` in nats, and its standard error.
    pub mean_kld: f64,
    pub mean_kld_stderr: f64,
    pub median_kld: f64,
    pub p99_kld: f64,
    pub max_kld: f64,
    /// Share of positions whose most likely token is the same in both runs.
    pub same_top: f64,
    /// Root mean square of the change in the next token's probability.
    pub rms_dp: f64,
    /// Perplexity of the base run (from the stored rows) and of this run, over the same
    /// positions.
    pub base_perplexity: f64,
    pub perplexity: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(seed: u64, n: usize, vocab: usize) -> Vec<Vec<f32>> {
        let mut s = seed;
        let mut next = move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
        };
        (0..n)
            .map(|_| (0..vocab).map(|_| 6.0 * next()).collect())
            .collect()
    }

    /// `KL(p ‖ q)` straight from the definition, in f64.
    fn kl(p: &[f32], q: &[f32]) -> f64 {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        log_softmax(p, 0, &mut a).unwrap();
        log_softmax(q, 0, &mut b).unwrap();
        a.iter().zip(&b).map(|(x, y)| x.exp() * (x - y)).sum()
    }

    #[test]
    fn stored_rows_give_the_exact_divergence() {
        let dir = std::env::temp_dir().join(format!("cyb-kld-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("base.kld");
        let (vocab, ctx) = (300, 8);
        let tokens: Vec<u32> = (0..20).map(|i| (i * 7 % vocab) as u32).collect();
        let base = rows(1, 5, vocab);
        let mut w = KldBaseWriter::create(&path, vocab, ctx, &tokens).unwrap();
        for r in &base {
            w.push(r).unwrap();
        }
        assert_eq!(w.finish().unwrap(), 5);

        // The same rows: no divergence beyond the 16-bit storage.
        let mut c = KldComparison::open(&path, vocab, ctx, &tokens).unwrap();
        for (i, r) in base.iter().enumerate() {
            c.push(r, i).unwrap();
        }
        let same = c.finish().unwrap();
        assert!(same.max_kld < 1e-6, "{same:?}");
        assert_eq!(same.same_top, 1.0);
        assert!((same.perplexity / same.base_perplexity - 1.0).abs() < 1e-3);

        // Other rows: the divergence from the definition, and the perplexities.
        let other = rows(2, 5, vocab);
        let mut c = KldComparison::open(&path, vocab, ctx, &tokens).unwrap();
        for (i, r) in other.iter().enumerate() {
            c.push(r, i).unwrap();
        }
        let got = c.finish().unwrap();
        let want: Vec<f64> = base.iter().zip(&other).map(|(p, q)| kl(p, q)).collect();
        let mean = want.iter().sum::<f64>() / 5.0;
        assert!(
            (got.mean_kld - mean).abs() < 1e-4 * mean,
            "{} vs {mean}",
            got.mean_kld
        );
        let mut sorted = want.clone();
        sorted.sort_by(f64::total_cmp);
        assert!((got.max_kld - sorted[4]).abs() < 1e-4 * sorted[4]);
        assert!((got.median_kld - sorted[2]).abs() < 1e-4 * sorted[2]);
        let nll: f64 = other
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut l = Vec::new();
                log_softmax(r, 0, &mut l).unwrap();
                -l[i]
            })
            .sum();
        assert!((got.perplexity - (nll / 5.0).exp()).abs() < 1e-9 * got.perplexity);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mismatched_or_short_files_are_refused() {
        let dir = std::env::temp_dir().join(format!("cyb-kld-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("base.kld");
        let tokens = [1u32, 2, 3, 4];
        let mut w = KldBaseWriter::create(&path, 50, 4, &tokens).unwrap();
        w.push(&rows(3, 1, 50)[0]).unwrap();
        w.finish().unwrap();
        let msg = |r: Result<KldComparison>| r.err().expect("refused").to_string();
        assert!(msg(KldComparison::open(&path, 51, 4, &tokens)).contains("vocabulary of 50"));
        assert!(msg(KldComparison::open(&path, 50, 8, &tokens)).contains("--ctx 4"));
        assert!(msg(KldComparison::open(&path, 50, 4, &[1, 2, 3])).contains("4 tokens"));
        assert!(msg(KldComparison::open(&path, 50, 4, &[1, 2, 9, 4])).contains("token 2"));
        // One stored position, two compared: the second runs off the end.
        let r = rows(4, 2, 50);
        let mut c = KldComparison::open(&path, 50, 4, &tokens).unwrap();
        c.push(&r[0], 0).unwrap();
        let e = c.push(&r[1], 0).unwrap_err().to_string();
        assert!(e.contains("ends before scored position 1"), "{e}");
        // Fewer compared than stored.
        let c = KldComparison::open(&path, 50, 4, &tokens).unwrap();
        assert!(c.finish().is_err());
        // Not a base file at all, and a truncated header.
        std::fs::write(&path, b"GGUF\0\0\0\0 and more bytes than a header").unwrap();
        assert!(msg(KldComparison::open(&path, 50, 4, &tokens)).contains("not a cyb-llm"));
        std::fs::write(&path, b"CYBKLD01").unwrap();
        assert!(msg(KldComparison::open(&path, 50, 4, &tokens)).contains("24-byte header"));
        // NaN logits name the position.
        let mut w = KldBaseWriter::create(&path, 3, 4, &tokens).unwrap();
        let e = w.push(&[0.0, f32::NAN, 1.0]).unwrap_err().to_string();
        assert!(e.contains("logit 1 of scored position 0"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

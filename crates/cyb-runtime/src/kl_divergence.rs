//! KL divergence between two runs over the same text, in the file layout and with the
//! arithmetic of llama.cpp's `llama-perplexity --kl-divergence-base FILE [--kl-divergence]`, so
//! a base stored by either tool can be compared by the other.
//!
//! The base run writes, for every scored position of [`Model::perplexity`](crate::Model), its
//! log-probability row compressed to 16 bits a value: with `hi` the row's largest logit and `lo`
//! its smallest but no lower than `hi − 16`, a logit `x > lo` is stored as `round((x − lo) /
//! step)`, `step = (hi − lo) / 65535`, and anything at or below `lo` as 0; a level `q` reads back
//! as the log-probability `step · q + lo_lp`, `lo_lp = lo − hi − log Σ exp(x − hi)`. A later run
//! compares its own rows with them: per position `KL(base ‖ this) = Σ p_base · (log p_base −
//! log p_this)` over the entries the base kept above −16 nats, whether the top token is the same,
//! and the change of the next token's probability.
//!
//! File layout (little-endian): the 8 bytes `_logits_`, `u32` context, `i32` vocabulary size,
//! `i32` chunk count, the chunks' tokens (`i32`, chunks × context, as tokenized: the BOS that
//! replaces each chunk's first token is not stored), then for each chunk, for each of its scored
//! positions, `f32 step`, `f32 lo_lp` and the levels (`u16`, padded to an even count).

use cyb_tensor::{Error, Result};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"_logits_";
/// How far below a row's top logit the stored range reaches (llama.cpp's choice).
const RANGE: f32 = 16.0;

/// An error naming the position when a logit is NaN.
fn no_nan(row: &[f32], pos: usize) -> Result<()> {
    match row.iter().position(|x| x.is_nan()) {
        Some(i) => Err(Error::invalid(
            "kl-divergence",
            format!("logit {i} of scored position {pos} is NaN"),
        )),
        None => Ok(()),
    }
}

/// `log softmax(row)` in f64; an error naming the position when a logit is NaN.
fn log_softmax(row: &[f32], pos: usize, out: &mut Vec<f64>) -> Result<()> {
    no_nan(row, pos)?;
    let norm = crate::perplexity::log_norm(row);
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

/// `u16` values a stored row takes: two f32 and the levels, padded to an even count.
fn row_u16s(vocab: usize) -> usize {
    2 * vocab.div_ceil(2) + 4
}

/// Writes a base file: [`KldBaseWriter::create`], one [`push`](KldBaseWriter::push) per scored
/// position, then [`finish`](KldBaseWriter::finish).
pub struct KldBaseWriter {
    path: PathBuf,
    out: BufWriter<std::fs::File>,
    vocab: usize,
    rec: Vec<u8>,
    rows: usize,
}

impl KldBaseWriter {
    /// A base file for `tokens` (whole chunks of `ctx`) under a vocabulary of `vocab`.
    pub fn create(path: &Path, vocab: usize, ctx: usize, tokens: &[u32]) -> Result<KldBaseWriter> {
        let too_big = |what: &str| {
            Error::invalid(
                "kl-divergence",
                format!("{what} does not fit the base file's 32-bit header"),
            )
        };
        if ctx == 0 || !tokens.len().is_multiple_of(ctx) {
            return Err(Error::invalid(
                "kl-divergence",
                format!("{} tokens are not whole chunks of {ctx}", tokens.len()),
            ));
        }
        let vocab32 = i32::try_from(vocab).map_err(|_| too_big("the vocabulary"))?;
        let ctx32 = u32::try_from(ctx).map_err(|_| too_big("the context"))?;
        let chunks = i32::try_from(tokens.len() / ctx).map_err(|_| too_big("the chunk count"))?;
        let file = std::fs::File::create(path).map_err(io(path))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let mut head = Vec::with_capacity(20 + 4 * tokens.len());
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&ctx32.to_le_bytes());
        head.extend_from_slice(&vocab32.to_le_bytes());
        head.extend_from_slice(&chunks.to_le_bytes());
        for &t in tokens {
            let t = i32::try_from(t).map_err(|_| too_big("a token id"))?;
            head.extend_from_slice(&t.to_le_bytes());
        }
        out.write_all(&head).map_err(io(path))?;
        Ok(KldBaseWriter {
            path: path.to_path_buf(),
            out,
            vocab,
            rec: Vec::with_capacity(2 * row_u16s(vocab)),
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
        no_nan(logits, self.rows)?;
        let hi = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        let lo = logits
            .iter()
            .fold(f32::INFINITY, |m, &x| m.min(x))
            .max(hi - RANGE);
        let lo_lp = (lo as f64 - crate::perplexity::log_norm(logits)) as f32;
        let step = (hi - lo) / 65535.0;
        self.rec.clear();
        self.rec.extend_from_slice(&step.to_le_bytes());
        self.rec.extend_from_slice(&lo_lp.to_le_bytes());
        for &x in logits {
            let q = if step > 0.0 && x > lo {
                ((x - lo) / step).round().clamp(0.0, 65535.0) as u16
            } else {
                0
            };
            self.rec.extend_from_slice(&q.to_le_bytes());
        }
        self.rec.resize(2 * row_u16s(self.vocab), 0);
        self.out.write_all(&self.rec).map_err(io(&self.path))?;
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
    ctx: usize,
    tokens: Vec<u32>,
    /// Where the first record starts.
    start: u64,
    rec: Vec<u8>,
    this: Vec<f64>,
    kld: Vec<f64>,
    same_top: usize,
    dp2: f64,
    nll_base: f64,
    nll_this: f64,
}

impl KldComparison {
    /// Opens a base file (ours or llama-perplexity's) and reads its header and tokens.
    pub fn open(path: &Path) -> Result<KldComparison> {
        let file = std::fs::File::open(path).map_err(io(path))?;
        let len = file.metadata().map_err(io(path))?.len();
        let mut input = BufReader::with_capacity(1 << 20, file);
        let bad = |offset: u64, reason: String| Error::Format {
            file: path.to_path_buf(),
            offset,
            reason,
        };
        let mut head = [0u8; 20];
        input
            .read_exact(&mut head)
            .map_err(|_| bad(0, "shorter than the 20-byte header".into()))?;
        if &head[..8] != MAGIC {
            return Err(bad(
                0,
                "not a log-probability file (`_logits_`, written by --kl-divergence-base)".into(),
            ));
        }
        let word = |i: usize| u32::from_le_bytes(head[8 + 4 * i..12 + 4 * i].try_into().unwrap());
        let ctx = word(0) as usize;
        let (vocab, chunks) = (word(1) as i32, word(2) as i32);
        if ctx < 4 {
            return Err(bad(8, format!("a context of {ctx} tokens")));
        }
        if vocab <= 0 {
            return Err(bad(12, format!("a vocabulary of {vocab} tokens")));
        }
        if chunks <= 0 {
            return Err(bad(16, format!("{chunks} chunks")));
        }
        let (vocab, chunks) = (vocab as usize, chunks as usize);
        let rec_len = 2 * row_u16s(vocab) as u64;
        let scored = (ctx - 1 - ctx / 2) as u64;
        let want = 20 + 4 * (chunks * ctx) as u64 + chunks as u64 * scored * rec_len;
        if len != want {
            return Err(bad(
                len.min(want),
                format!(
                    "{len} bytes where {chunks} chunks of {ctx} tokens over a vocabulary of {vocab} take {want}"
                ),
            ));
        }
        let mut ids = vec![0u8; 4 * chunks * ctx];
        input
            .read_exact(&mut ids)
            .map_err(|e| bad(20, format!("token ids: {e}")))?;
        let tokens = ids
            .chunks_exact(4)
            .enumerate()
            .map(|(i, c)| {
                let t = i32::from_le_bytes(c.try_into().unwrap());
                u32::try_from(t)
                    .ok()
                    .filter(|&t| (t as usize) < vocab)
                    .ok_or_else(|| {
                        bad(
                            20 + 4 * i as u64,
                            format!("token {i} is {t}, outside the vocabulary"),
                        )
                    })
            })
            .collect::<Result<Vec<u32>>>()?;
        Ok(KldComparison {
            path: path.to_path_buf(),
            input,
            vocab,
            ctx,
            tokens,
            start: 20 + 4 * (chunks * ctx) as u64,
            rec: vec![0u8; rec_len as usize],
            this: Vec::with_capacity(vocab),
            kld: Vec::new(),
            same_top: 0,
            dp2: 0.0,
            nll_base: 0.0,
            nll_this: 0.0,
        })
    }

    /// The context (chunk length) the base was made with.
    pub fn ctx(&self) -> usize {
        self.ctx
    }

    /// The base's tokens, whole chunks, as tokenized (a run to compare evaluates these).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// An error unless the base was made under a vocabulary of `vocab` tokens.
    pub fn check_vocab(&self, vocab: usize) -> Result<()> {
        if vocab == self.vocab {
            return Ok(());
        }
        Err(Error::Format {
            file: self.path.clone(),
            offset: 12,
            reason: format!(
                "written for a vocabulary of {} tokens, this model has {vocab}",
                self.vocab
            ),
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
        let f = |i: usize| f32::from_le_bytes(self.rec[4 * i..4 * i + 4].try_into().unwrap());
        let (step, lo_lp) = (f(0) as f64, f(1) as f64);
        if !step.is_finite() || !lo_lp.is_finite() || step < 0.0 {
            return Err(Error::Format {
                file: self.path.clone(),
                offset: self.offset(pos),
                reason: format!("scored position {pos} has a bad range ({step}, {lo_lp})"),
            });
        }
        log_softmax(logits, pos, &mut self.this)?;
        let levels = &self.rec[8..8 + 2 * self.vocab];
        let level = |i: usize| u16::from_le_bytes([levels[2 * i], levels[2 * i + 1]]);
        let (mut kl, mut top_base, mut top_lp) = (0f64, 0usize, f64::NEG_INFINITY);
        for (i, &t) in self.this.iter().enumerate() {
            let b = step * level(i) as f64 + lo_lp;
            if b > top_lp {
                (top_base, top_lp) = (i, b);
            }
            // As llama.cpp: entries the base clamped (16 nats under its top) are left out.
            if b > -(RANGE as f64) {
                kl += b.exp() * (b - t);
            }
        }
        self.kld.push(kl);
        if argmax(logits) == top_base {
            self.same_top += 1;
        }
        let base_lp = step * level(target) as f64 + lo_lp;
        let dp = self.this[target].exp() - base_lp.exp();
        self.dp2 += dp * dp;
        self.nll_base -= base_lp;
        self.nll_this -= self.this[target];
        Ok(())
    }

    /// The figures over every position compared; an error when the base file holds other than
    /// the positions compared.
    pub fn finish(self) -> Result<KldReport> {
        let n = self.kld.len();
        let stored = (self.tokens.len() / self.ctx) * (self.ctx - 1 - self.ctx / 2);
        if n != stored {
            return Err(Error::Format {
                file: self.path.clone(),
                offset: self.offset(n),
                reason: format!("holds {stored} scored positions, {n} were compared"),
            });
        }
        let mut kld = self.kld;
        let mean = kld.iter().sum::<f64>() / n as f64;
        let var = kld.iter().map(|k| (k - mean) * (k - mean)).sum::<f64>() / (n.max(2) - 1) as f64;
        kld.sort_by(f64::total_cmp);
        let pct = |p: f64| kld[((n - 1) as f64 * p).round() as usize];
        Ok(KldReport {
            positions: n,
            mean_kld: mean,
            mean_kld_stderr: (var / n as f64).sqrt(),
            median_kld: pct(0.5),
            p99_kld: pct(0.99),
            max_kld: kld[n - 1],
            same_top: self.same_top as f64 / n as f64,
            rms_dp: (self.dp2 / n as f64).sqrt(),
            base_perplexity: (self.nll_base / n as f64).exp(),
            perplexity: (self.nll_this / n as f64).exp(),
        })
    }
}

/// The first index of the largest value.
fn argmax(v: &[f32]) -> usize {
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

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cyb-kld-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    /// Two chunks of 8 tokens: 3 scored positions each.
    fn write(path: &Path, vocab: usize, rows: &[Vec<f32>]) -> Vec<u32> {
        let tokens: Vec<u32> = (0..16).map(|i| (i * 7 % vocab) as u32).collect();
        let mut w = KldBaseWriter::create(path, vocab, 8, &tokens).unwrap();
        for r in rows {
            w.push(r).unwrap();
        }
        assert_eq!(w.finish().unwrap(), rows.len());
        tokens
    }

    fn compare(path: &Path, rows: &[Vec<f32>]) -> Result<KldReport> {
        let mut c = KldComparison::open(path)?;
        for (i, r) in rows.iter().enumerate() {
            c.push(r, i % r.len())?;
        }
        c.finish()
    }

    #[test]
    fn stored_rows_give_the_divergence_of_the_definition() {
        let path = scratch("base.kld");
        let vocab = 301;
        let base = rows(1, 6, vocab);
        let tokens = write(&path, vocab, &base);
        let c = KldComparison::open(&path).unwrap();
        assert_eq!((c.ctx(), c.tokens()), (8, &tokens[..]));
        c.check_vocab(vocab).unwrap();

        // The same rows: nothing but the 16-bit storage's rounding (a step of 12/65535 nats).
        let same = compare(&path, &base).unwrap();
        assert!(
            same.max_kld.abs() < 2e-5 && same.mean_kld.abs() < 2e-5,
            "{same:?}"
        );
        assert_eq!((same.same_top, same.positions), (1.0, 6));
        assert!((same.perplexity / same.base_perplexity - 1.0).abs() < 1e-4);

        // Other rows: the divergence, perplexities and top tokens from the definitions.
        let other = rows(2, 6, vocab);
        let got = compare(&path, &other).unwrap();
        let mut want: Vec<f64> = base.iter().zip(&other).map(|(p, q)| kl(p, q)).collect();
        let mean = want.iter().sum::<f64>() / 6.0;
        assert!(
            (got.mean_kld - mean).abs() < 1e-3 * mean,
            "{} vs {mean}",
            got.mean_kld
        );
        want.sort_by(f64::total_cmp);
        assert!((got.max_kld - want[5]).abs() < 1e-3 * want[5]);
        let nll = |rows: &[Vec<f32>]| -> f64 {
            let s: f64 = rows
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let mut l = Vec::new();
                    log_softmax(r, 0, &mut l).unwrap();
                    -l[i]
                })
                .sum();
            (s / rows.len() as f64).exp()
        };
        assert!((got.perplexity - nll(&other)).abs() < 1e-9 * got.perplexity);
        assert!((got.base_perplexity - nll(&base)).abs() < 1e-3 * got.base_perplexity);
        let tops = base
            .iter()
            .zip(&other)
            .filter(|(p, q)| argmax(p) == argmax(q))
            .count();
        assert_eq!(got.same_top, tops as f64 / 6.0);
        std::fs::remove_file(&path).unwrap();
    }

    /// A file put together byte by byte in the layout the module doc gives (llama.cpp's): the
    /// reader takes its fields from where that layout puts them.
    #[test]
    fn reads_the_documented_layout() {
        let path = scratch("handmade.kld");
        let (vocab, ctx) = (3usize, 4usize); // one scored position a chunk
        let mut b = Vec::new();
        b.extend_from_slice(b"_logits_");
        b.extend_from_slice(&(ctx as u32).to_le_bytes());
        b.extend_from_slice(&(vocab as i32).to_le_bytes());
        b.extend_from_slice(&1i32.to_le_bytes());
        for t in [2i32, 0, 1, 2] {
            b.extend_from_slice(&t.to_le_bytes());
        }
        // log p = step · q + lo_lp: levels 0, 1000, 2000 with step 0.001 and lo_lp −2.5, i.e.
        // log-probabilities −2.5, −1.5, −0.5 (padded to four u16).
        b.extend_from_slice(&0.001f32.to_le_bytes());
        b.extend_from_slice(&(-2.5f32).to_le_bytes());
        for q in [0u16, 1000, 2000, 0] {
            b.extend_from_slice(&q.to_le_bytes());
        }
        std::fs::write(&path, &b).unwrap();
        let mut c = KldComparison::open(&path).unwrap();
        assert_eq!((c.ctx(), c.tokens()), (4, &[2u32, 0, 1, 2][..]));
        // This run puts log p = [−1.5, −1.5, −0.5] + const on the three tokens; next token 1.
        let logits = [0.0f32, 0.0, 1.0];
        c.push(&logits, 1).unwrap();
        let k = c.finish().unwrap();
        let (mut this, base) = (Vec::new(), [-2.5f64, -1.5, -0.5]);
        log_softmax(&logits, 0, &mut this).unwrap();
        let want: f64 = base.iter().zip(&this).map(|(b, t)| b.exp() * (b - t)).sum();
        assert!((k.mean_kld - want).abs() < 1e-6, "{} vs {want}", k.mean_kld);
        assert!((k.base_perplexity - 1.5f64.exp()).abs() < 1e-5);
        assert_eq!(k.same_top, 1.0);
        std::fs::remove_file(&path).unwrap();
    }

    /// Logits more than 16 below the top are stored as level 0 and left out of the divergence.
    #[test]
    fn far_tails_are_clamped_and_left_out() {
        let path = scratch("tail.kld");
        let vocab = 4;
        let mut base = rows(3, 6, vocab);
        for r in &mut base {
            r[3] = -100.0;
        }
        write(&path, vocab, &base);
        let mut other = base.clone();
        for r in &mut other {
            r[3] = -60.0; // a big change, but only where the base kept nothing
        }
        let k = compare(&path, &other).unwrap();
        assert!(k.max_kld.abs() < 2e-5, "{k:?}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn mismatched_or_damaged_files_are_refused() {
        let path = scratch("bad.kld");
        let vocab = 50;
        let r = rows(4, 6, vocab);
        write(&path, vocab, &r);
        let msg = |r: Result<KldComparison>| r.err().expect("refused").to_string();
        let c = KldComparison::open(&path).unwrap();
        assert!(c
            .check_vocab(51)
            .unwrap_err()
            .to_string()
            .contains("vocabulary of 50"));
        // Fewer positions compared than stored.
        let mut c = KldComparison::open(&path).unwrap();
        c.push(&r[0], 0).unwrap();
        let e = c.finish().unwrap_err().to_string();
        assert!(
            e.contains("holds 6 scored positions, 1 were compared"),
            "{e}"
        );
        // One position more than stored runs off the end.
        let mut c = KldComparison::open(&path).unwrap();
        for row in &r {
            c.push(row, 0).unwrap();
        }
        let e = c.push(&r[0], 0).unwrap_err().to_string();
        assert!(e.contains("ends before scored position 6"), "{e}");
        // Cut short, lengthened, not such a file at all, a header cut short, a bad token.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert!(msg(KldComparison::open(&path)).contains("bytes where 2 chunks of 8 tokens"));
        std::fs::write(&path, [&bytes[..], &[0u8; 2]].concat()).unwrap();
        assert!(msg(KldComparison::open(&path)).contains("bytes where"));
        std::fs::write(&path, b"GGUF\0\0\0\0 and more bytes than a header").unwrap();
        assert!(msg(KldComparison::open(&path)).contains("not a log-probability file"));
        std::fs::write(&path, b"_logits_").unwrap();
        assert!(msg(KldComparison::open(&path)).contains("20-byte header"));
        let mut b = bytes.clone();
        b[20..24].copy_from_slice(&(vocab as i32).to_le_bytes());
        std::fs::write(&path, &b).unwrap();
        assert!(msg(KldComparison::open(&path)).contains("token 0 is 50"));
        // NaN logits name the position; tokens that are not whole chunks are refused.
        let mut w = KldBaseWriter::create(&path, 3, 4, &[0, 1, 2, 0]).unwrap();
        let e = w.push(&[0.0, f32::NAN, 1.0]).unwrap_err().to_string();
        assert!(e.contains("logit 1 of scored position 0"), "{e}");
        assert!(KldBaseWriter::create(&path, 3, 4, &[0, 1, 2]).is_err());
        std::fs::remove_file(&path).unwrap();
    }
}

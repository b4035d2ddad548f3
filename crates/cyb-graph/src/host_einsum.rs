//! ONNX Einsum on the host: every operand's labels (an ellipsis stands for its broadcast
//! leading dims), a label repeated in one operand reads its diagonal, labels missing from the
//! output are summed. Floats are computed in f64, integers in i64, and the result has the
//! dtype of the first operand.

use crate::host_op::HostRun;
use cyb_tensor::memory::filled_vec;
use cyb_tensor::{DType, Error, Result, Tensor};

const OP: &str = "einsum";

/// The most multiply-adds one Einsum may take on the host (the loop visits every label
/// combination).
const MAX_STEPS: usize = 1 << 30;

/// Labels are letters (as their code) or ellipsis dims (`ELL + k`, k counted from the left of
/// the broadcast ellipsis shape).
const ELL: u32 = 1 << 20;

fn bad(reason: impl Into<String>) -> Error {
    Error::invalid(OP, reason)
}

/// One operand's term (`"ij"`, `"...ii"`): letters, and where the ellipsis stands.
struct Term {
    letters: Vec<u32>,
    ellipsis: Option<usize>,
}

fn parse_term(s: &str) -> Result<Term> {
    let mut letters = Vec::new();
    let mut ellipsis = None;
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("...") {
            if ellipsis.is_some() {
                return Err(bad(format!("term {s:?} has two ellipses")));
            }
            ellipsis = Some(letters.len());
            rest = r;
            continue;
        }
        let mut chars = rest.chars();
        let c = chars.next().unwrap_or(' ');
        if !c.is_ascii_alphabetic() {
            return Err(bad(format!("term {s:?}: {c:?} is not a letter")));
        }
        letters.push(c as u32);
        rest = chars.as_str();
    }
    Ok(Term { letters, ellipsis })
}

/// The labels of a term for an operand of `rank` dims, with `ell` the broadcast ellipsis rank.
fn labels(t: &Term, rank: usize, ell: usize) -> Result<Vec<u32>> {
    let Some(at) = t.ellipsis else {
        if rank != t.letters.len() {
            return Err(bad(format!(
                "{} labels for an operand of rank {rank}",
                t.letters.len()
            )));
        }
        return Ok(t.letters.clone());
    };
    let own = rank
        .checked_sub(t.letters.len())
        .ok_or_else(|| bad(format!("too many labels for rank {rank}")))?;
    let mut v = t.letters[..at].to_vec();
    v.extend((ell - own..ell).map(|k| ELL + k as u32));
    v.extend(&t.letters[at..]);
    Ok(v)
}

pub(crate) fn einsum(
    r: &mut HostRun,
    equation: &str,
    inputs: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, o)) => (l, Some(o)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<Term> = lhs.split(',').map(parse_term).collect::<Result<_>>()?;
    let xs: Vec<Tensor> = inputs
        .iter()
        .map(|t| {
            t.as_ref()
                .ok_or_else(|| bad("missing operand"))
                .and_then(|t| r.d.to_host(t))
        })
        .collect::<Result<_>>()?;
    if xs.len() != terms.len() || xs.is_empty() {
        return Err(bad(format!(
            "{} terms in {equation:?} for {} operands",
            terms.len(),
            xs.len()
        )));
    }
    let dtype = xs[0].dtype();
    if xs.iter().any(|x| x.dtype() != dtype) || dtype.is_quantized() || dtype == DType::Bool {
        return Err(bad("operands must share one number dtype"));
    }
    let ell = terms
        .iter()
        .zip(&xs)
        .filter(|(t, _)| t.ellipsis.is_some())
        .map(|(t, x)| x.dims().len().saturating_sub(t.letters.len()))
        .max()
        .unwrap_or(0);
    let labs: Vec<Vec<u32>> = terms
        .iter()
        .zip(&xs)
        .map(|(t, x)| labels(t, x.dims().len(), ell))
        .collect::<Result<_>>()?;

    // Each label's size: operands agree, or have 1 (broadcast).
    let mut size: Vec<(u32, usize)> = Vec::new();
    for (l, x) in labs.iter().zip(&xs) {
        for (&lab, &d) in l.iter().zip(x.dims()) {
            match size.iter_mut().find(|(k, _)| *k == lab) {
                Some((_, s)) if *s == d || d == 1 => {}
                Some((_, s)) if *s == 1 => *s = d,
                Some((_, s)) => return Err(bad(format!("label sizes {s} and {d} differ"))),
                None => size.push((lab, d)),
            }
        }
    }
    let out_labels: Vec<u32> = match rhs {
        Some(o) => labels(&parse_term(o)?, ell + parse_term(o)?.letters.len(), ell)?,
        None => {
            // Implicit output: the ellipsis, then the letters used once, alphabetically.
            let mut once: Vec<u32> = size
                .iter()
                .map(|&(k, _)| k)
                .filter(|&k| k < ELL && labs.iter().flatten().filter(|&&l| l == k).count() == 1)
                .collect();
            once.sort_unstable();
            (0..ell).map(|k| ELL + k as u32).chain(once).collect()
        }
    };
    let size_of = |lab: u32| size.iter().find(|(k, _)| *k == lab).map(|&(_, s)| s);
    let mut all = out_labels.clone();
    for &(k, _) in &size {
        if !all.contains(&k) {
            all.push(k);
        }
    }
    let dims: Vec<usize> = all
        .iter()
        .map(|&k| size_of(k).ok_or_else(|| bad("output label not in any operand")))
        .collect::<Result<_>>()?;
    let out_dims = &dims[..out_labels.len()];
    let n_out: usize = out_dims.iter().product();
    let n_sum: usize = dims[out_labels.len()..].iter().product();
    if n_out.saturating_mul(n_sum).saturating_mul(xs.len()) > MAX_STEPS {
        return Err(bad(format!(
            "{n_out} × {n_sum} steps is too many for the host"
        )));
    }
    // Stride of every label (in `all` order) in every operand; repeated labels add up, which
    // walks the diagonal; size-1 dims stay put.
    let strides: Vec<Vec<usize>> = labs
        .iter()
        .zip(&xs)
        .map(|(l, x)| {
            let mut st = vec![0usize; all.len()];
            let mut s = 1;
            for (&lab, &d) in l.iter().zip(x.dims()).rev() {
                if d != 1 {
                    if let Some(p) = all.iter().position(|&k| k == lab) {
                        st[p] += s;
                    }
                }
                s *= d;
            }
            st
        })
        .collect();
    let offsets = |flat: usize| -> Vec<usize> {
        let mut rem = flat;
        let mut off = vec![0usize; xs.len()];
        for p in (0..all.len()).rev() {
            let i = rem % dims[p].max(1);
            rem /= dims[p].max(1);
            for (o, st) in off.iter_mut().zip(&strides) {
                *o += i * st[p];
            }
        }
        off
    };
    let total = n_out * n_sum;
    if dtype.is_integer() {
        let vals: Vec<Vec<i64>> = xs.iter().map(Tensor::to_i64_vec).collect::<Result<_>>()?;
        let mut y = filled_vec("einsum", &[n_out], 0i64)?;
        for flat in 0..total {
            let off = offsets(flat);
            let p = vals
                .iter()
                .zip(&off)
                .fold(1i64, |acc, (v, &o)| acc.wrapping_mul(v[o]));
            y[flat / n_sum.max(1)] = y[flat / n_sum.max(1)].wrapping_add(p);
        }
        return Ok(vec![Tensor::from_i64_as(out_dims, &y, dtype)?]);
    }
    let vals: Vec<Vec<f64>> = xs.iter().map(Tensor::to_f64_vec).collect::<Result<_>>()?;
    let mut y = filled_vec("einsum", &[n_out], 0f64)?;
    for flat in 0..total {
        let off = offsets(flat);
        let p: f64 = vals.iter().zip(&off).map(|(v, &o)| v[o]).product();
        y[flat / n_sum.max(1)] += p;
    }
    Ok(vec![Tensor::from_f64_as(out_dims, &y, dtype)?])
}

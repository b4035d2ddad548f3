//! Which type each tensor is stored as: `--quant TYPE` for float matrices, overridden per
//! tensor by `--keep PATTERN=TYPE` rules (first match wins).

use cyb_tensor::{DType, Error, Result, Shape};

/// What a `--keep` rule asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Store the tensor exactly as the source has it.
    Keep,
    /// Store the tensor as this type (converted or requantized from the source's values).
    Type(DType),
}

/// `PATTERN=TYPE`: tensors whose name matches the glob `PATTERN` (`*` any run of characters,
/// `?` one character) are stored as `TYPE` (or as they are for `keep`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeepRule {
    pub pattern: String,
    pub target: Target,
}

impl KeepRule {
    /// Parses `PATTERN=TYPE`; the type is a storable type name (`F16`, `Q8_0`, `Q4_K`, ...)
    /// or `keep`.
    pub fn parse(spec: &str) -> Result<KeepRule> {
        let bad = |reason: String| Error::InvalidArgument {
            op: "import --keep".into(),
            reason,
        };
        let (pattern, ty) = spec
            .rsplit_once('=')
            .ok_or_else(|| bad(format!("{spec:?} is not NAME_PATTERN=TYPE")))?;
        if pattern.is_empty() {
            return Err(bad(format!("{spec:?} has an empty name pattern")));
        }
        let target = if ty.eq_ignore_ascii_case("keep") {
            Target::Keep
        } else {
            match DType::parse(ty).filter(|d| storable(*d)) {
                Some(d) => Target::Type(d),
                None => {
                    return Err(bad(format!(
                        "{spec:?}: {ty:?} is not a type tensors can be stored as \
                         (F32, F16, BF16, Q8_0, Q4_K, Q6_K, ... or keep)"
                    )))
                }
            }
        };
        Ok(KeepRule {
            pattern: pattern.to_string(),
            target,
        })
    }

    pub fn matches(&self, name: &str) -> bool {
        glob(self.pattern.as_bytes(), name.as_bytes())
    }
}

/// Types a float tensor can be converted to: the float types and every ggml weight format we
/// have a quantizer for (Q8_1 and Q8_K are activation formats, not weight formats).
pub fn storable(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
        || (d.is_quantized() && !matches!(d, DType::Q8_1 | DType::Q8_K))
}

/// `*` matches any run of bytes (dots included), `?` exactly one; everything else itself.
fn glob(pat: &[u8], s: &[u8]) -> bool {
    // Iterative matching with one backtrack point: linear in practice, never exponential.
    let (mut p, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        match pat.get(p) {
            Some(b'*') => {
                star = Some((p, i));
                p += 1;
            }
            Some(&c) if c == b'?' || c == s[i] => {
                p += 1;
                i += 1;
            }
            _ => match star {
                Some((sp, si)) => {
                    p = sp + 1;
                    i = si + 1;
                    star = Some((sp, si + 1));
                }
                None => return false,
            },
        }
    }
    pat[p.min(pat.len())..].iter().all(|&c| c == b'*')
}

/// llama.cpp's replacement when a tensor's rows are not whole blocks of a 256-value type
/// (`llama-quantize` does the same), so `--quant Q4_K` still quantizes 32-multiple rows.
fn fallback(q: DType) -> Option<DType> {
    Some(match q {
        DType::Q2_K | DType::Q3_K => DType::IQ4_NL,
        DType::Q4_K => DType::Q5_0,
        DType::Q5_K => DType::Q5_1,
        DType::Q6_K => DType::Q8_0,
        DType::TQ1_0 | DType::TQ2_0 => DType::Q4_0,
        _ => return None,
    })
}

fn fits(q: DType, shape: &Shape) -> bool {
    shape.rank() >= 1 && shape.last().is_multiple_of(q.block_elems())
}

/// How one tensor is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// `None`: copied byte for byte.
    pub convert_to: Option<DType>,
    /// The index of the `--keep` rule that decided, if one did.
    pub rule: Option<usize>,
}

/// Decides the stored type of tensor `name` (`dtype` is `None` for a type this build cannot
/// compute with, which can only be copied). A `--keep` rule that asks for a conversion the
/// tensor cannot take (integer data, rows that are not whole blocks) is an error naming both.
pub fn choose(
    name: &str,
    dtype: Option<DType>,
    type_name: &str,
    shape: &Shape,
    quant: Option<DType>,
    keep: &[KeepRule],
) -> Result<Choice> {
    if let Some((k, rule)) = keep.iter().enumerate().find(|(_, r)| r.matches(name)) {
        let convert_to = match rule.target {
            Target::Keep => None,
            Target::Type(t) if Some(t) == dtype => None,
            Target::Type(t) => {
                let bad = |why: String| Error::InvalidArgument {
                    op: "import --keep".into(),
                    reason: format!(
                        "{}={}: tensor {name:?} ({type_name} {shape}) {why}",
                        rule.pattern,
                        t.name()
                    ),
                };
                match dtype {
                    None => return Err(bad("is of a type this build cannot convert from".into())),
                    Some(d) if !d.is_float() && !d.is_quantized() => {
                        return Err(bad("holds integers, not values to convert".into()))
                    }
                    Some(_) => {}
                }
                if t.is_quantized() && !fits(t, shape) {
                    return Err(bad(format!(
                        "has rows that are not whole blocks of {} values",
                        t.block_elems()
                    )));
                }
                Some(t)
            }
        };
        return Ok(Choice {
            convert_to,
            rule: Some(k),
        });
    }
    let convert_to = match (quant, dtype) {
        (Some(q), Some(d)) if d.is_float() && d != q && shape.rank() >= 2 => {
            if fits(q, shape) {
                Some(q)
            } else {
                fallback(q).filter(|f| fits(*f, shape) && *f != d)
            }
        }
        _ => None,
    };
    Ok(Choice {
        convert_to,
        rule: None,
    })
}

/// An error for the first rule in `keep` that `used` says matched no tensor.
pub fn check_all_used(keep: &[KeepRule], used: &[bool]) -> Result<()> {
    match keep.iter().zip(used).find(|(_, u)| !**u) {
        Some((r, _)) => Err(Error::InvalidArgument {
            op: "import --keep".into(),
            reason: format!(
                "the pattern {:?} matches no tensor of the source (or every tensor it \
                 matches was taken by an earlier --keep)",
                r.pattern
            ),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_like_a_shell_pattern() {
        let m = |p: &str, s: &str| glob(p.as_bytes(), s.as_bytes());
        assert!(m("output.weight", "output.weight"));
        assert!(!m("output.weight", "output.weights"));
        assert!(m("*.attn_v.weight", "blk.0.attn_v.weight"));
        assert!(!m("*.attn_v.weight", "blk.0.attn_k.weight"));
        assert!(m("blk.?.ffn_*", "blk.3.ffn_up.weight"));
        assert!(!m("blk.?.ffn_*", "blk.13.ffn_up.weight"));
        assert!(m("*", ""));
        assert!(m("a*b*c", "a_b_b_c"));
        assert!(!m("a*b*c", "a_b_b_d"));
    }

    #[test]
    fn rules_parse_and_refuse_bad_types() {
        let r = KeepRule::parse("*.attn_v.weight=f16").unwrap();
        assert_eq!(r.target, Target::Type(DType::F16));
        assert_eq!(KeepRule::parse("x=keep").unwrap().target, Target::Keep);
        for bad in ["x", "=Q8_0", "x=I32", "x=Q8_K", "x=Q9_9"] {
            assert!(KeepRule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn first_rule_wins_then_quant_with_fallback() {
        let s = |d: &[usize]| Shape::new(d).unwrap();
        let keep = vec![
            KeepRule::parse("output.weight=Q8_0").unwrap(),
            KeepRule::parse("*.weight=keep").unwrap(),
        ];
        let c = choose(
            "output.weight",
            Some(DType::F32),
            "F32",
            &s(&[8, 64]),
            None,
            &keep,
        );
        assert_eq!(c.unwrap().convert_to, Some(DType::Q8_0));
        let q = Some(DType::Q4_K);
        let c = choose("a.weight", Some(DType::F32), "F32", &s(&[8, 256]), q, &keep).unwrap();
        assert_eq!((c.convert_to, c.rule), (None, Some(1)));
        let c = choose("a.bias", Some(DType::F32), "F32", &s(&[8, 256]), q, &keep).unwrap();
        assert_eq!(c.convert_to, Some(DType::Q4_K));
        let c = choose("a.bias", Some(DType::F32), "F32", &s(&[8, 64]), q, &keep).unwrap();
        assert_eq!(c.convert_to, Some(DType::Q5_0));
        let c = choose("a.bias", Some(DType::F32), "F32", &s(&[8, 10]), q, &keep).unwrap();
        assert_eq!(c.convert_to, None);
        let c = choose("a.bias", Some(DType::F32), "F32", &s(&[256]), q, &keep).unwrap();
        assert_eq!(c.convert_to, None);
        let c = choose(
            "output.weight",
            Some(DType::F32),
            "F32",
            &s(&[8, 10]),
            q,
            &keep,
        );
        assert!(c.unwrap_err().to_string().contains("output.weight"));
        let c = choose(
            "output.weight",
            Some(DType::I32),
            "I32",
            &s(&[8, 64]),
            q,
            &keep,
        );
        assert!(c.is_err());
    }
}
